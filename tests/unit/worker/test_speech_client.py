"""The worker's speech client: splitting by script, re-splitting cut pieces, one encoding,
transient vs permanent errors. Against the in-process stand-in, or a scripted server answering
through httpx.MockTransport."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
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
PCM_0_1_S = b"\0\0" * 2_400  # 0.1 s of silence at 24 kHz


class Scripted:
    """A speech server in process (httpx.MockTransport): answers each POST with
    `answer(request number, body)`, GET /health with 200; counts the POSTs."""

    url = "http://speech.test"

    def __init__(self, answer: Callable[[int, dict[str, Any]], Reply]) -> None:
        self.answer, self.requests = answer, 0
        self.transport = httpx.MockTransport(self._handle)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/health":
            return httpx.Response(200)
        assert (request.method, request.url.path) == ("POST", "/v1/audio/speech")
        status, content, headers = self.answer(self.requests, json.loads(request.content))
        self.requests += 1
        return httpx.Response(status, content=content, headers=headers)

    def client(self, **options: Any) -> SpeechClient:
        return SpeechClient(self.url, transport=self.transport, **options)


def statuses(*script: int) -> Callable[[int, dict[str, Any]], Reply]:
    """The n-th answer has the n-th status (the last one repeats); 200 is 0.1 s of PCM."""

    def answer(n: int, body: dict[str, Any]) -> Reply:
        status = script[min(n, len(script) - 1)]
        if status == 200:
            return 200, PCM_0_1_S, {}
        return status, b'{"error": {"message": "scripted", "code": %d}}' % status, {}

    return answer


def test_short_audio_without_usage_headers_is_split_again() -> None:
    # 0.1 s for 311 characters, and no headers to say why: judged cut and halved; the halves
    # are too short to judge (under 200 characters).
    server = Scripted(statuses(200))
    text = "Many words in a sentence. " * 12
    speech = server.client().synthesize(Job(text=text, format="pcm"))
    assert (speech.pieces, server.requests) == (2, 1 + 2)


def test_usage_headers_at_the_context_limit_mean_cut_short() -> None:
    # The first answer's token counts reach the limit less the prompt margin: split again;
    # the halves' counts are far below it.
    def answer(n: int, body: dict[str, Any]) -> Reply:
        frames = "4060" if n == 0 else "100"
        headers = {"x-vllm-omni-input-tokens": "10", "x-vllm-omni-output-tokens": frames}
        return 200, PCM_0_1_S, headers

    server = Scripted(answer)
    speech = server.client().synthesize(Job(text="One sentence. Another one.", format="pcm"))
    assert (speech.pieces, server.requests) == (2, 3)


def test_a_piece_that_never_fits_is_permanent() -> None:
    def too_long(n: int, body: dict[str, Any]) -> Reply:
        message = "Speech generation failed: The decoder prompt (length 5000) is longer than the"
        message += " maximum model length of 4096."
        return 500, json.dumps({"error": {"message": message, "code": 500}}).encode(), {}

    server = Scripted(too_long)
    client = server.client(retries=3, retry_delay_s=0.0)
    with pytest.raises(PermanentSpeechError, match="does not fit the model after"):
        client.synthesize(Job(text="One. Two. Three. Four."))
    assert server.requests <= 2**7  # halved to single characters at most, never retried


def test_the_request_carries_the_job_and_the_configured_model_and_task() -> None:
    seen: list[dict[str, Any]] = []

    def record(n: int, body: dict[str, Any]) -> Reply:
        seen.append(body)
        return 200, PCM_0_1_S, {}

    client = Scripted(record).client(model="Qwen/M", task_type="VoiceDesign")
    job = Job(text="Hi.", format="mp3", voice="Ryan", instructions="Calm.", speed=1.5)
    client.synthesize(job)
    assert seen == [
        {
            "input": "Hi.",
            "voice": "Ryan",
            "language": "Auto",
            "response_format": "pcm",  # the job's format is encoded by the worker, once
            "sample_rate": 24_000,
            "speed": 1.5,
            "model": "Qwen/M",
            "instructions": "Calm.",
            "task_type": "VoiceDesign",
        }
    ]


def test_5xx_is_retried_then_succeeds() -> None:
    server = Scripted(statuses(503, 500, 200))
    speech = server.client(retries=2, retry_delay_s=0.0).synthesize(Job(text="Hi."))
    assert (server.requests, speech.duration_s) == (3, pytest.approx(0.1))


def test_5xx_past_the_retries_is_transient() -> None:
    server = Scripted(statuses(503))
    with pytest.raises(TransientSpeechError, match="503: scripted"):
        server.client(retries=2, retry_delay_s=0.0).synthesize(Job(text="Hi."))
    assert server.requests == 3


@pytest.mark.parametrize("status", [400, 422])
def test_4xx_is_permanent_and_not_retried(status: int) -> None:
    server = Scripted(statuses(status, 200))
    with pytest.raises(PermanentSpeechError, match=f"{status}: scripted"):
        server.client(retries=3, retry_delay_s=0.0).synthesize(Job(text="Hi."))
    assert server.requests == 1


@pytest.mark.parametrize("status", [401, 403, 404, 408, 429])
def test_server_side_4xx_is_transient(status: int) -> None:
    # A wrong model name, route, key or proxy: every job would fail, none is at fault.
    server = Scripted(statuses(status))
    with pytest.raises(TransientSpeechError, match=f"{status}: scripted"):
        server.client(retries=1, retry_delay_s=0.0).synthesize(Job(text="Hi."))
    assert server.requests == 2


def test_timeout_is_transient() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        # The client's own read timeout reaches the transport; the server outlasts it.
        assert request.extensions["timeout"]["read"] == 0.2
        raise httpx.ReadTimeout("no answer in 0.2 s", request=request)

    client = SpeechClient("http://speech.test", timeout_s=0.2, retries=0,
                          transport=httpx.MockTransport(slow))  # fmt: skip
    with pytest.raises(TransientSpeechError, match="timed out"):
        client.synthesize(Job(text="Hi."))


def test_health_is_a_200_on_health() -> None:
    assert Scripted(statuses(200)).client().healthy() is True
    down = httpx.MockTransport(lambda request: httpx.Response(503))
    assert SpeechClient("http://speech.test", transport=down).healthy() is False


def test_connection_refused_is_transient() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = SpeechClient(f"http://127.0.0.1:{port}", retries=1, retry_delay_s=0.01)
    with pytest.raises(TransientSpeechError, match="unreachable"):
        client.synthesize(Job(text="Hi."))
    assert client.wait_healthy(0.2, interval_s=0.05) is False


def test_a_jobs_seed_is_its_first_renderings_and_its_re_renders_derive_from_it() -> None:
    from worker.qa.guard import seed_for
    from worker.speech import job_seed

    plain, seeded = Job(id="j1", text="Hi."), Job(id="j1", text="Hi.", seed=7)
    assert [job_seed(plain, a) for a in range(3)] == [seed_for("j1", a) for a in range(3)]
    assert job_seed(seeded, 0) == 7
    again = [job_seed(seeded, a) for a in (1, 2)]
    assert len(set(again)) == 2 and not set(again) & {7, *(seed_for("j1", a) for a in (1, 2))}
    assert [job_seed(seeded, a) for a in (1, 2)] == again  # a redelivery renders the same
