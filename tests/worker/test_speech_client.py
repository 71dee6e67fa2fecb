"""The worker's speech client: splitting by script, re-splitting cut pieces, one encoding,
transient vs permanent errors. Against the in-process stand-in or a scripted server."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import soundfile

from tts_fleet.local.speech_backends import spoken_seconds
from tts_fleet.local.speech_server import SpeechServer, serve_in_thread
from worker.jobs import Job
from worker.speech import (
    PermanentSpeechError,
    SpeechClient,
    TransientSpeechError,
    speech_pieces,
    text_cost,
)


@pytest.mark.parametrize(
    ("text", "limit", "pieces"),
    [
        ("Short.", 100, ["Short."]),
        ("One. Two. Three.", 10, ["One. Two.", "Three."]),
        ("One! Two? Three.", 9, ["One!", "Two?", "Three."]),
        ("第一句。第二句。第三句。", 32, ["第一句。第二句。", "第三句。"]),
        ("alpha beta gamma delta", 11, ["alpha beta", "gamma delta"]),
        ("abcdefghij", 4, ["abcd", "efgh", "ij"]),
        ("一二三四五六", 8, ["一二", "三四", "五六"]),
    ],
)
def test_speech_pieces(text: str, limit: int, pieces: list[str]) -> None:
    assert speech_pieces(text, limit) == pieces
    assert all(text_cost(piece) <= limit for piece in speech_pieces(text, limit))


def test_cjk_pieces_are_a_quarter_of_latin_ones() -> None:
    english = " ".join(f"Sentence {i} is here." for i in range(400))
    chinese = "这是一个很长的中文句子。" * 400
    assert max(map(len, speech_pieces(english, 1_000))) > 900
    assert max(map(len, speech_pieces(chinese, 1_000))) <= 250


@pytest.fixture(scope="module")
def tone() -> Iterator[SpeechServer]:
    with serve_in_thread("tone") as server:
        yield server


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3", "pcm"])
def test_pieces_are_joined_and_encoded_once(tone: SpeechServer, fmt: str) -> None:
    job = Job(text=" ".join(f"Sentence number {i} is here." for i in range(12)), format=fmt)
    speech = SpeechClient(tone.url, chunk_chars=60).synthesize(job)
    assert speech.pieces == len(speech_pieces(job.text, 60)) > 4
    expected = sum(spoken_seconds(piece) for piece in speech_pieces(job.text, 60))
    assert speech.sample_rate == 24_000
    assert speech.duration_s == pytest.approx(expected, abs=0.01)
    if fmt == "pcm":
        assert len(speech.audio) == round(expected * 24_000) * 2
    else:  # one header for all of it: libsndfile reads the whole length
        info = soundfile.info(io.BytesIO(speech.audio))
        assert (info.samplerate, info.duration) == (24_000, pytest.approx(expected, abs=0.06))


def test_a_piece_cut_at_the_context_is_split_again(tone: SpeechServer) -> None:
    text = "This sentence is part of a long chapter. " * 125  # one piece past the context
    speech = SpeechClient(tone.url, chunk_chars=100_000).synthesize(Job(text=text, format="pcm"))
    assert speech.pieces == 2
    assert speech.duration_s == pytest.approx(spoken_seconds(text), rel=0.01)


def test_a_prompt_too_long_500_is_split_again(tone: SpeechServer) -> None:
    text = "word " * 3_300  # the prompt alone is past 4,096 tokens
    speech = SpeechClient(tone.url, chunk_chars=100_000).synthesize(Job(text=text, format="pcm"))
    assert speech.pieces >= 4
    assert speech.duration_s == pytest.approx(spoken_seconds(text), rel=0.01)


def test_instructions_past_500_are_permanent(tone: SpeechServer) -> None:
    job = Job.model_construct(text="Hi.", instructions="x" * 501)  # past the job contract
    with pytest.raises(PermanentSpeechError, match="400: Instructions too long"):
        SpeechClient(tone.url).synthesize(job)


def test_unknown_voice_is_permanent(tone: SpeechServer) -> None:
    with pytest.raises(PermanentSpeechError, match="Invalid voice 'nobody'"):
        SpeechClient(tone.url).synthesize(Job(text="Hi.", voice="Nobody"))


def test_wrong_model_is_transient(tone: SpeechServer) -> None:
    # A deployment fault, not the job's: the message goes back to the queue.
    client = SpeechClient(tone.url, model="Qwen/Other", retries=0)
    with pytest.raises(TransientSpeechError, match="404: The model `Qwen/Other` does not exist"):
        client.synthesize(Job(text="Hi."))


Reply = tuple[int, bytes, dict[str, str]]


class Scripted(ThreadingHTTPServer):
    """Answers each POST with `answer(request number, body)`; counts requests."""

    daemon_threads = True

    def __init__(self, answer: Callable[[int, dict[str, Any]], Reply], delay: float) -> None:
        super().__init__(("127.0.0.1", 0), ScriptedHandler)
        self.answer, self.delay, self.requests = answer, delay, 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the timeout test hangs up on purpose


class ScriptedHandler(BaseHTTPRequestHandler):
    server: Scripted

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, content, headers = self.server.answer(self.server.requests, body)
        self.server.requests += 1
        time.sleep(self.server.delay)
        self.send_response(status)
        self.send_header("Content-Length", str(len(content)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(content)


def statuses(*script: int) -> Callable[[int, dict[str, Any]], Reply]:
    """The n-th answer has the n-th status (the last one repeats); 200 is 0.1 s of PCM."""

    def answer(n: int, body: dict[str, Any]) -> Reply:
        status = script[min(n, len(script) - 1)]
        if status == 200:
            return 200, b"\0\0" * 2_400, {}
        return status, b'{"error": {"message": "scripted", "code": %d}}' % status, {}

    return answer


@pytest.fixture
def scripted() -> Iterator[Callable[..., Scripted]]:
    servers: list[Scripted] = []

    def make(answer: Callable[[int, dict[str, Any]], Reply], delay: float = 0.0) -> Scripted:
        server = Scripted(answer, delay)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def test_short_audio_without_usage_headers_is_split_again(scripted: Any) -> None:
    # 0.1 s for 311 characters, and no headers to say why: judged cut and halved; the halves
    # are too short to judge (under 200 characters).
    server = scripted(statuses(200))
    text = "Many words in a sentence. " * 12
    speech = SpeechClient(server.url).synthesize(Job(text=text, format="pcm"))
    assert (speech.pieces, server.requests) == (2, 1 + 2)


def test_a_piece_that_never_fits_is_permanent(scripted: Any) -> None:
    def too_long(n: int, body: dict[str, Any]) -> Reply:
        message = "Speech generation failed: The decoder prompt (length 5000) is longer than the"
        message += " maximum model length of 4096."
        return 500, json.dumps({"error": {"message": message, "code": 500}}).encode(), {}

    server = scripted(too_long)
    client = SpeechClient(server.url, retries=3, retry_delay_s=0.01)
    with pytest.raises(PermanentSpeechError, match="does not fit the model after"):
        client.synthesize(Job(text="One. Two. Three. Four."))
    assert server.requests <= 2**7  # halved to single characters at most, never retried


def test_the_worker_asks_for_pcm_at_24_khz(scripted: Any) -> None:
    seen: list[dict[str, Any]] = []

    def record(n: int, body: dict[str, Any]) -> Reply:
        seen.append(body)
        return 200, b"\0\0" * 2_400, {}

    SpeechClient(scripted(record).url).synthesize(Job(text="Hi.", format="mp3"))
    assert (seen[0]["response_format"], seen[0]["sample_rate"]) == ("pcm", 24_000)


def test_5xx_is_retried_then_succeeds(scripted: Any) -> None:
    server = scripted(statuses(503, 500, 200))
    speech = SpeechClient(server.url, retries=2, retry_delay_s=0.01).synthesize(Job(text="Hi."))
    assert (server.requests, speech.duration_s) == (3, pytest.approx(0.1))


def test_5xx_past_the_retries_is_transient(scripted: Any) -> None:
    server = scripted(statuses(503))
    with pytest.raises(TransientSpeechError, match="503: scripted"):
        SpeechClient(server.url, retries=2, retry_delay_s=0.01).synthesize(Job(text="Hi."))
    assert server.requests == 3


@pytest.mark.parametrize("status", [400, 422])
def test_4xx_is_permanent_and_not_retried(scripted: Any, status: int) -> None:
    server = scripted(statuses(status, 200))
    with pytest.raises(PermanentSpeechError, match=f"{status}: scripted"):
        SpeechClient(server.url, retries=3, retry_delay_s=0.01).synthesize(Job(text="Hi."))
    assert server.requests == 1


@pytest.mark.parametrize("status", [401, 403, 404])
def test_server_side_4xx_is_transient(scripted: Any, status: int) -> None:
    # A wrong model name, route, key or proxy: every job would fail, none is at fault.
    server = scripted(statuses(status))
    with pytest.raises(TransientSpeechError, match=f"{status}: scripted"):
        SpeechClient(server.url, retries=1, retry_delay_s=0.01).synthesize(Job(text="Hi."))
    assert server.requests == 2


def test_timeout_is_transient(scripted: Any) -> None:
    server = scripted(statuses(200), delay=1.0)
    client = SpeechClient(server.url, timeout_s=0.2, retries=0)
    with pytest.raises(TransientSpeechError, match="timed out"):
        client.synthesize(Job(text="Hi."))


def test_connection_refused_is_transient() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = SpeechClient(f"http://127.0.0.1:{port}", retries=1, retry_delay_s=0.01)
    with pytest.raises(TransientSpeechError, match="unreachable"):
        client.synthesize(Job(text="Hi."))
    assert client.wait_healthy(0.2, interval_s=0.05) is False
