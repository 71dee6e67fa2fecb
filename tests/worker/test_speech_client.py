"""The worker's speech client: splitting, concatenation, transient vs permanent errors."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.lib.procs import SpeechServer, start_speech_server
from worker.jobs import Job
from worker.speech import (
    PermanentSpeechError,
    SpeechClient,
    TransientSpeechError,
    split_text,
    wav_info,
)


@pytest.mark.parametrize(
    ("text", "limit", "pieces"),
    [
        ("Short.", 100, ["Short."]),
        ("One. Two. Three.", 10, ["One. Two.", "Three."]),
        ("One! Two? Three.", 9, ["One!", "Two?", "Three."]),
        ("第一句。第二句。第三句。", 8, ["第一句。第二句。", "第三句。"]),
        ("alpha beta gamma delta", 11, ["alpha beta", "gamma delta"]),
        ("abcdefghij", 4, ["abcd", "efgh", "ij"]),
    ],
)
def test_split_text(text: str, limit: int, pieces: list[str]) -> None:
    assert split_text(text, limit) == pieces
    assert all(len(piece) <= limit for piece in split_text(text, limit))


@pytest.fixture(scope="module")
def tone() -> Iterator[SpeechServer]:
    with start_speech_server("tone") as server:
        yield server


@pytest.mark.processes
def test_long_text_is_split_and_the_wav_concatenated(tone: SpeechServer) -> None:
    sentences = [f"Sentence number {i} is here." for i in range(12)]
    job = Job(id="long", text=" ".join(sentences), voice="Eric")
    whole = SpeechClient(tone.url, chunk_chars=100_000).synthesize(job)
    split = SpeechClient(tone.url, chunk_chars=60).synthesize(job)
    assert (whole.pieces, split.pieces) == (1, len(split_text(job.text, 60)))
    assert split.pieces > 4
    # tone audio is 0.06 s per character of each piece: the pieces add up, minus the spaces cut
    rate, seconds = wav_info(split.audio)
    assert (rate, split.sample_rate) == (24_000, 24_000)
    assert seconds == pytest.approx(split.duration_s)
    assert seconds == pytest.approx(0.06 * sum(len(p) for p in split_text(job.text, 60)), abs=0.01)


@pytest.mark.processes
def test_pcm_pieces_concatenate(tone: SpeechServer) -> None:
    job = Job(id="pcm", text="First part here. Second part here.", format="pcm")
    speech = SpeechClient(tone.url, chunk_chars=20).synthesize(job)
    assert speech.pieces == 2 and speech.sample_rate == 24_000
    assert speech.duration_s == pytest.approx(len(speech.audio) / 2 / 24_000)


@pytest.mark.processes
def test_unknown_voice_is_permanent(tone: SpeechServer) -> None:
    with pytest.raises(PermanentSpeechError, match="Unknown voice 'Nobody'"):
        SpeechClient(tone.url).synthesize(Job(text="Hi.", voice="Nobody"))


class Scripted(ThreadingHTTPServer):
    """Answers each POST with the next status in `script`; counts requests."""

    daemon_threads = True

    def __init__(self, script: list[int], delay: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), ScriptedHandler)
        self.script, self.delay, self.requests = script, delay, 0

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
        self.rfile.read(int(self.headers["Content-Length"]))
        status = self.server.script[min(self.server.requests, len(self.server.script) - 1)]
        self.server.requests += 1
        time.sleep(self.server.delay)
        body = b'{"error": {"message": "scripted", "code": %d}}' % status
        if status == 200:
            body = _tiny_wav()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _tiny_wav() -> bytes:
    from tts_fleet.local.speech_server import wav_bytes

    return wav_bytes(b"\0\0" * 2400, 24_000)


@pytest.fixture
def scripted() -> Iterator[Any]:
    servers: list[Scripted] = []

    def make(script: list[int], delay: float = 0.0) -> Scripted:
        server = Scripted(script, delay)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def test_5xx_is_retried_then_succeeds(scripted: Any) -> None:
    server = scripted([503, 500, 200])
    speech = SpeechClient(server.url, retries=2, retry_delay_s=0.01).synthesize(Job(text="Hi."))
    assert (server.requests, speech.duration_s) == (3, pytest.approx(0.1))


def test_5xx_past_the_retries_is_transient(scripted: Any) -> None:
    server = scripted([503])
    with pytest.raises(TransientSpeechError, match="503: scripted"):
        SpeechClient(server.url, retries=2, retry_delay_s=0.01).synthesize(Job(text="Hi."))
    assert server.requests == 3


def test_4xx_is_permanent_and_not_retried(scripted: Any) -> None:
    server = scripted([400, 200])
    with pytest.raises(PermanentSpeechError, match="400: scripted"):
        SpeechClient(server.url, retries=3, retry_delay_s=0.01).synthesize(Job(text="Hi."))
    assert server.requests == 1


def test_422_is_permanent(scripted: Any) -> None:
    server = scripted([422, 200])
    with pytest.raises(PermanentSpeechError, match="422: scripted"):
        SpeechClient(server.url, retries=3, retry_delay_s=0.01).synthesize(Job(text="Hi."))
    assert server.requests == 1


@pytest.mark.parametrize("status", [401, 403, 404])
def test_server_side_4xx_is_transient(scripted: Any, status: int) -> None:
    # A wrong model name, route, key or proxy: every job would fail, none is at fault.
    server = scripted([status])
    with pytest.raises(TransientSpeechError, match=f"{status}: scripted"):
        SpeechClient(server.url, retries=1, retry_delay_s=0.01).synthesize(Job(text="Hi."))
    assert server.requests == 2


def test_timeout_is_transient(scripted: Any) -> None:
    server = scripted([200], delay=1.0)
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
