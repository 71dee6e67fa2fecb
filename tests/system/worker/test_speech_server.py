"""The local speech server over real HTTP, answering as vLLM-Omni 0.30 does."""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import wave
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import soundfile  # type: ignore[import-untyped]

from tests.lib.procs import ROOT, SpeechServer, start_speech_server
from tts_fleet.local import asr
from tts_fleet.local.speech_backends import (
    CODEC_FRAME_RATE,
    MAX_MODEL_LEN,
    SPEAKERS,
    prompt_tokens,
    spoken_seconds,
    text_tokens,
)
from tts_fleet.local.speech_server import Latency, model_variant
from worker.settings import DEFAULT_MODEL

pytestmark = pytest.mark.processes
SPEECH = "/v1/audio/speech"
MEDIA_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
}


@pytest.fixture(scope="module", params=["espeak", "tone"])
def server(request: pytest.FixtureRequest) -> Iterator[SpeechServer]:
    with start_speech_server(request.param) as running:
        yield running


@pytest.fixture(scope="module")
def tone() -> Iterator[SpeechServer]:
    with start_speech_server("tone") as running:
        yield running


def post(server: SpeechServer, **fields: object) -> httpx.Response:
    return httpx.post(server.url + SPEECH, json=fields, timeout=120)


def decoded(body: bytes, fmt: str) -> tuple[int, float]:
    """(rate, seconds) as libsndfile reads the answer."""
    if fmt == "pcm":
        return 24_000, len(body) / 2 / 24_000
    info = soundfile.info(io.BytesIO(body))
    return info.samplerate, info.duration


def test_wav_has_a_correct_riff_header_at_24_khz(server: SpeechServer) -> None:
    response = post(server, input="Hello there. This is a test.", voice="Ryan", language="English")
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/wav"
    body = response.content
    riff, size, wave_id, fmt_id = struct.unpack("<4sI4s4s", body[:16])
    assert (riff, wave_id, fmt_id) == (b"RIFF", b"WAVE", b"fmt ")
    assert size == len(body) - 8
    with wave.open(io.BytesIO(body)) as reader:
        assert (reader.getnchannels(), reader.getsampwidth()) == (1, 2)  # soundfile's PCM_16
        assert reader.getframerate() == 24_000  # espeak speaks at 22,050 Hz: resampled
        assert reader.getnframes() / 24_000 > 0.5


@pytest.mark.parametrize("fmt", sorted(MEDIA_TYPES))
def test_every_real_format_is_served(server: SpeechServer, fmt: str) -> None:
    wav = post(server, input="Same words here.", voice="Vivian", language="English")
    response = post(
        server, input="Same words here.", voice="Vivian", language="English", response_format=fmt
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == MEDIA_TYPES[fmt]
    assert "x-sample-rate" not in response.headers  # the real server never sends one
    rate, seconds = decoded(response.content, fmt)
    assert rate == 24_000 or fmt == "opus"  # libsndfile reports Ogg Opus at 48 kHz
    assert seconds == pytest.approx(decoded(wav.content, "wav")[1], abs=0.08)


@pytest.mark.parametrize("voice", sorted(SPEAKERS))
def test_every_customvoice_speaker_speaks(server: SpeechServer, voice: str) -> None:
    response = post(server, input="Good morning.", voice=voice, language="Auto")
    assert response.status_code == 200, response.text
    assert decoded(response.content, "wav")[1] > 0.1


def test_usage_headers_count_text_tokens_and_codec_frames(tone: SpeechServer) -> None:
    text = "Counting tokens and frames. " * 5
    response = post(tone, input=text, voice="Ryan", response_format="pcm", instructions="Calm.")
    seconds = len(response.content) / 2 / 24_000
    inputs = int(response.headers["x-vllm-omni-input-tokens"])
    outputs = int(response.headers["x-vllm-omni-output-tokens"])
    assert inputs == text_tokens(text) + text_tokens("Calm.")
    assert outputs == pytest.approx(seconds * CODEC_FRAME_RATE, abs=1)
    assert int(response.headers["x-vllm-omni-total-tokens"]) == inputs + outputs


def test_speed_shortens_the_audio_not_the_frame_count(tone: SpeechServer) -> None:
    normal = post(tone, input="Speed test sentence.", response_format="pcm")
    fast = post(tone, input="Speed test sentence.", response_format="pcm", speed=2.0)
    assert len(fast.content) == pytest.approx(len(normal.content) / 2, rel=0.01)
    frames = [int(r.headers["x-vllm-omni-output-tokens"]) for r in (normal, fast)]
    assert frames[0] == pytest.approx(frames[1], abs=1)


def test_past_the_context_the_audio_is_cut_with_200(tone: SpeechServer) -> None:
    text = "This sentence is part of a long chapter. " * 125  # ~5,100 characters, ~340 s
    response = post(tone, input=text, voice="Ryan", response_format="pcm")
    assert response.status_code == 200
    seconds = len(response.content) / 2 / 24_000
    frames = int(response.headers["x-vllm-omni-output-tokens"])
    assert frames == MAX_MODEL_LEN - prompt_tokens(text, "")
    assert seconds == pytest.approx(frames / CODEC_FRAME_RATE, abs=0.1)
    assert seconds < 0.75 * spoken_seconds(text)


def test_a_prompt_past_the_context_is_a_500(tone: SpeechServer) -> None:
    response = post(tone, input="word " * 3_300, voice="Ryan")  # ~4,100 text tokens
    assert response.status_code == 500
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("InternalServerError", 500)
    assert error["message"].startswith("Speech generation failed: The decoder prompt (length ")
    assert "is longer than the maximum model length of 4096" in error["message"]


@pytest.mark.parametrize(
    ("fields", "status", "words"),
    [
        ({"input": "Hi.", "voice": "Bob"}, 400, "Invalid voice 'bob'. Supported: aiden, dylan,"),
        ({"input": "Hi.", "language": "klingon"}, 400, "Invalid language 'Klingon'. Supported:"),
        ({"input": "   "}, 400, "Input text cannot be empty"),
        ({"voice": "Ryan"}, 400, "input\n  Field required"),
        ({"input": "Hi.", "response_format": "ogg"}, 400, "response_format"),
        ({"input": "Hi.", "speed": 9}, 400, "speed"),
        ({"input": "Hi.", "sample_rate": 16_000}, 400, "sample_rate=16000 is not supported"),
        ({"input": "Hi.", "instructions": "x" * 501}, 400, "Instructions too long (max 500"),
        (
            {"input": "Hi.", "task_type": "VoiceDesign"},
            400,
            "Qwen3-TTS CustomVoice checkpoint does not support task_type='VoiceDesign'",
        ),
        ({"input": "Hi.", "model": "Qwen/Other"}, 404, "The model `Qwen/Other` does not exist."),
    ],
)
def test_rejections_have_the_real_status_and_wording(
    tone: SpeechServer, fields: dict, status: int, words: str
) -> None:
    response = post(tone, **fields)
    assert response.status_code == status
    error = response.json()["error"]
    assert words in error["message"]
    kind = "NotFoundError" if status == 404 else "BadRequestError"
    assert (error["type"], error["code"]) == (kind, status)


def test_instructions_of_500_characters_pass(tone: SpeechServer) -> None:
    assert post(tone, input="Hi.", instructions="x" * 500).status_code == 200


def test_the_served_model_name_passes(tone: SpeechServer) -> None:
    assert post(tone, input="Hi.", model=DEFAULT_MODEL).status_code == 200


def test_sample_rate_8000_is_resampled(tone: SpeechServer) -> None:
    response = post(tone, input="Telephone quality.", sample_rate=8_000)
    rate, seconds = decoded(response.content, "wav")
    assert rate == 8_000 and seconds == pytest.approx(spoken_seconds("Telephone quality."), 0.01)


def test_a_base_checkpoint_refuses_customvoice_requests() -> None:
    assert model_variant("Qwen/Qwen3-TTS-12Hz-0.6B-Base") == "Base"
    assert model_variant("/opt/models/Qwen3-TTS-12Hz-1.7B-VoiceDesign/") == "VoiceDesign"
    with start_speech_server("tone", extra_args=("--model", "Qwen/Qwen3-TTS-12Hz-0.6B-Base")) as s:
        response = post(s, input="Hi.", voice="Ryan")
    assert response.status_code == 400
    assert "Base checkpoint does not support task_type='CustomVoice'" in response.text


def test_not_json_and_unknown_paths(tone: SpeechServer) -> None:
    response = httpx.post(tone.url + SPEECH, content=b"{nope", timeout=10)
    assert response.status_code == 400 and "JSON" in response.json()["error"]["message"]
    assert httpx.get(tone.url + "/v2/nothing", timeout=10).status_code == 404


def test_health_and_voices(tone: SpeechServer) -> None:
    assert httpx.get(tone.url + "/health", timeout=10).status_code == 200
    voices = httpx.get(tone.url + "/v1/audio/voices", timeout=10).json()["voices"]
    assert voices == sorted([*(name.lower() for name in SPEAKERS), "default"])


def test_speaker_alias_and_case_insensitive_voice(tone: SpeechServer) -> None:
    assert post(tone, input="Hi.", speaker="RYAN").status_code == 200
    assert post(tone, input="Hi.", voice="default").status_code == 200


def test_espeak_is_resampled_smoothly() -> None:
    from tts_fleet.local.speech_backends import to_float

    ramp = (np.arange(22_050, dtype=np.int16) - 11_025).astype("<i2").tobytes()
    out = to_float(ramp, 22_050)
    assert out.size == 24_000
    assert np.all(np.diff(out) > 0)  # a monotone ramp stays monotone: no dropped samples


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
    out = subprocess.run(
        [sys.executable, "-m", "tts_fleet.local.speech_server", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "FOR LOAD TESTS AND BENCHMARKS" in " ".join(out.split())


# --- Issue 21: faults, seed, max_new_tokens and the ASR stand-in -------------------------

TEXT = "It was a bright cold day in April. The clocks were striking thirteen and nobody minded."


@pytest.fixture(scope="module")
def truncating() -> Iterator[tuple[SpeechServer, str]]:
    with start_speech_server("espeak", extra_args=("--faults", "truncate=1")) as running:
        yield running, asr.url_from_log(running.log_path, running.proc)


@pytest.fixture(scope="module")
def runaway() -> Iterator[SpeechServer]:
    with start_speech_server("tone", extra_args=("--faults", "runaway=1")) as running:
        yield running


def transcribe(asr_url: str, audio: bytes, model: str = "whisper") -> httpx.Response:
    return httpx.post(
        asr_url + "/v1/audio/transcriptions",
        files={"file": ("piece.wav", audio, "audio/wav")},
        data={"model": model},
        timeout=30,
    )


def test_a_runaway_stops_at_max_new_tokens_when_sent(runaway: SpeechServer) -> None:
    answer = post(runaway, input="Hello there.", voice="Ryan", max_new_tokens=100)
    assert answer.headers["X-TTS-FLEET-FAULT"] == "runaway"
    assert answer.headers["X-VLLM-OMNI-OUTPUT-TOKENS"] == "100"
    assert decoded(answer.content, "wav")[1] == pytest.approx(100 / CODEC_FRAME_RATE, abs=0.01)


def test_a_runaway_fills_the_context_when_max_new_tokens_is_not_sent(
    runaway: SpeechServer,
) -> None:
    answer = post(runaway, input="Hello there.", voice="Ryan")
    budget = MAX_MODEL_LEN - prompt_tokens("Hello there.", "")
    assert answer.headers["X-VLLM-OMNI-OUTPUT-TOKENS"] == str(budget)
    assert decoded(answer.content, "wav")[1] == pytest.approx(budget / CODEC_FRAME_RATE, 0.01)


def test_a_clean_piece_longer_than_max_new_tokens_is_cut_to_it(tone: SpeechServer) -> None:
    answer = post(tone, input=TEXT, voice="Ryan", max_new_tokens=20, seed=5)
    assert "X-TTS-FLEET-FAULT" not in answer.headers
    assert answer.headers["X-VLLM-OMNI-OUTPUT-TOKENS"] == "20"
    assert decoded(answer.content, "wav")[1] == pytest.approx(20 / CODEC_FRAME_RATE, abs=0.01)


@pytest.mark.parametrize(("field", "value"), [("seed", "7"), ("seed", True), ("max_new_tokens", 0)])
def test_bad_seed_and_max_new_tokens_are_400s(
    tone: SpeechServer, field: str, value: object
) -> None:
    answer = post(tone, input="Hi.", **{field: value})
    assert answer.status_code == 400
    assert field in answer.json()["error"]["message"]


def test_the_asr_stand_in_hears_a_truncated_piece_without_its_end(
    truncating: tuple[SpeechServer, str],
) -> None:
    server, asr_url = truncating
    answer = post(server, input=TEXT, voice="Serena", seed=1)
    assert answer.headers["X-TTS-FLEET-FAULT"] == "truncate"
    heard = transcribe(asr_url, answer.content)
    assert heard.status_code == 200 and heard.headers["X-TTS-FLEET-ASR"] == "recall"
    text = heard.json()["text"]
    assert TEXT.startswith(text) and 0 < len(text.split()) < len(TEXT.split())
    assert "not a speech recognizer" in heard.json()["stand_in"]


def test_the_asr_stand_in_refuses_audio_it_did_not_make(
    truncating: tuple[SpeechServer, str],
) -> None:
    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(24_000 * 3 + 17, dtype=np.float32), 24_000, format="WAV")
    answer = transcribe(truncating[1], buffer.getvalue())
    assert answer.status_code == 400
    assert "only audio the local speech server produced" in answer.json()["error"]["message"]


def test_a_bad_faults_flag_exits_2_naming_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tts_fleet.local.speech_server", "--port", "0",
         "--faults", "babble=0.1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--faults" in done.stderr and "unknown fault 'babble'" in done.stderr
