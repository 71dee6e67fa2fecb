"""The local speech server over real HTTP: vLLM-Omni's validation and a correct WAV."""

from __future__ import annotations

import io
import struct
import wave
from collections.abc import Iterator

import httpx
import pytest

from tests.lib.procs import SpeechServer, start_speech_server
from tts_fleet.local.speech_backends import SPEAKERS
from tts_fleet.local.speech_server import Latency

pytestmark = pytest.mark.processes

SPEECH = "/v1/audio/speech"


@pytest.fixture(scope="module", params=["espeak", "tone"])
def server(request: pytest.FixtureRequest) -> Iterator[SpeechServer]:
    with start_speech_server(request.param) as running:
        yield running


def post(server: SpeechServer, **fields: object) -> httpx.Response:
    return httpx.post(server.url + SPEECH, json=fields, timeout=60)


def wav_seconds(body: bytes) -> float:
    with wave.open(io.BytesIO(body)) as reader:
        assert (reader.getnchannels(), reader.getsampwidth()) == (1, 2)
        return reader.getnframes() / reader.getframerate()


def test_wav_has_a_correct_riff_header(server: SpeechServer) -> None:
    response = post(server, input="Hello there. This is a test.", voice="Ryan", language="English")
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/wav"
    body = response.content
    riff, size, wave_id, fmt_id = struct.unpack("<4sI4s4s", body[:16])
    assert (riff, wave_id, fmt_id) == (b"RIFF", b"WAVE", b"fmt ")
    assert size == len(body) - 8
    data_size = struct.unpack("<I", body[40:44])[0]
    assert body[36:40] == b"data" and data_size == len(body) - 44
    assert wav_seconds(body) > 0.5


@pytest.mark.parametrize("voice", sorted(SPEAKERS))
def test_every_customvoice_speaker_speaks(server: SpeechServer, voice: str) -> None:
    response = post(server, input="Good morning.", voice=voice, language="Auto")
    assert response.status_code == 200, response.text
    assert wav_seconds(response.content) > 0.1


def test_pcm_answers_raw_samples_with_their_rate(server: SpeechServer) -> None:
    wav = post(server, input="Same words.", voice="Vivian", language="English")
    pcm = post(
        server, input="Same words.", voice="Vivian", language="English", response_format="pcm"
    )
    assert pcm.headers["content-type"] == "audio/pcm"
    rate = int(pcm.headers["x-sample-rate"])
    assert len(pcm.content) / 2 / rate == pytest.approx(wav_seconds(wav.content))


def test_longer_text_gives_longer_audio(server: SpeechServer) -> None:
    short = post(server, input="One sentence.", voice="Aiden", language="English")
    long = post(server, input="One sentence. " * 6, voice="Aiden", language="English")
    assert wav_seconds(long.content) > 3 * wav_seconds(short.content)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"input": "Hi.", "voice": "Bob"}, "Unknown voice 'Bob'"),
        ({"input": "Hi.", "language": "Klingon"}, "Unsupported language 'Klingon'"),
        ({"input": "   "}, "input must be a non-empty string"),
        ({"voice": "Ryan"}, "input must be a non-empty string"),
        ({"input": "Hi.", "response_format": "flac"}, "'flac' is not supported"),
        ({"input": "Hi.", "response_format": "ogg"}, "'ogg' is invalid"),
        ({"input": "Hi.", "speed": 9}, "speed must be"),
        ({"input": "Hi.", "task_type": "VoiceDesign"}, "does not match the loaded model"),
    ],
)
def test_bad_requests_are_400_with_a_reason(server: SpeechServer, fields: dict, words: str) -> None:
    response = post(server, **fields)
    assert response.status_code == 400
    error = response.json()["error"]
    assert words in error["message"]
    assert (error["type"], error["code"]) == ("BadRequestError", 400)


def test_not_json_and_unknown_paths(server: SpeechServer) -> None:
    response = httpx.post(server.url + SPEECH, content=b"{nope", timeout=10)
    assert response.status_code == 400 and "not JSON" in response.json()["error"]["message"]
    assert httpx.get(server.url + "/v2/nothing", timeout=10).status_code == 404


def test_health_and_voices(server: SpeechServer) -> None:
    assert httpx.get(server.url + "/health", timeout=10).json()["status"] == "ok"
    voices = httpx.get(server.url + "/v1/audio/voices", timeout=10).json()
    assert voices["voices"] == list(SPEAKERS)
    assert "English" in voices["languages"] and "Auto" in voices["languages"]


def test_speaker_alias_and_case_insensitive_voice(server: SpeechServer) -> None:
    assert post(server, input="Hi.", speaker="ryan").status_code == 200


def test_latency_grows_sub_linearly_with_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("tts_fleet.local.speech_server.time.sleep", slept.append)
    latency = Latency(base_ms=200, exponent=0.5)
    for _ in range(4):
        latency.__enter__()  # four requests in flight at once
    assert slept == pytest.approx([0.2, 0.2 * 2**0.5, 0.2 * 3**0.5, 0.4])
    for _ in range(4):
        latency.__exit__()
    assert latency.active == 0


def test_tone_help_says_it_is_for_load_tests() -> None:
    import subprocess
    import sys

    from tests.lib.procs import ROOT

    out = subprocess.run(
        [sys.executable, "-m", "tts_fleet.local.speech_server", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "FOR LOAD TESTS AND BENCHMARKS" in " ".join(out.split())
