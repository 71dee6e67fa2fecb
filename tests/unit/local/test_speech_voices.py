"""The stand-in's Base and VoiceDesign requests (tts_fleet/local/speech_server.py): what it takes
and refuses as vLLM-Omni's Qwen3TTSAdapter does (each refusal's wording is the adapter's own,
read from the installed wheel), and a cloned or designed voice that sounds unlike the default
speaker, the same for the same reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.worker.test_vllm_contract import _package_dir
from tts_fleet.local import speech_server
from tts_fleet.local.speech_backends import ToneBackend
from tts_fleet.local.speech_server import HTTPError, stand_in_speaker, validate
from worker.settings import DEFAULT_MODEL

BASE = "Qwen/Qwen3-TTS-12Hz-1.7B-Base"
DESIGN = "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign"
REF_A = "data:audio/wav;base64,UklGRgAAAA=="
REF_B = "data:audio/wav;base64,UklGRgEAAA=="


def clone(**extra: Any) -> dict[str, Any]:
    return {"input": "Hello.", "task_type": "Base", "ref_audio": REF_A, "ref_text": "Hi.", **extra}


def refusal(body: dict[str, Any], model: str) -> str:
    with pytest.raises(HTTPError) as raised:
        validate(body, model)
    assert raised.value.status == 400
    return str(raised.value)


def adapter_source() -> str:
    path: Path = _package_dir() / "entrypoints/openai/tts_adapters/qwen3_tts.py"
    serving = (_package_dir() / "entrypoints/openai/serving_speech.py").read_text()
    return path.read_text() + serving


def test_a_clone_request_is_spoken_in_a_voice_of_its_reference() -> None:
    a, b = validate(clone(), BASE), validate(clone(ref_audio=REF_B), BASE)
    assert a.voice == stand_in_speaker(REF_A) and b.voice == stand_in_speaker(REF_B)
    assert a.voice != b.voice  # these two references pick different voices
    assert validate(clone(), BASE) == a  # the same reference, the same voice
    # Inferred Base from a reference alone, as the adapter does; x-vector only needs no text.
    assert validate({"input": "Hi.", "ref_audio": REF_A, "ref_text": "Hi."}, BASE).voice == a.voice
    assert validate(clone(ref_text=None, x_vector_only_mode=True), BASE).voice == a.voice
    tone = ToneBackend()
    custom = validate({"input": "Hello."}, DEFAULT_MODEL)
    assert (
        tone.synthesize("Hello.", a.voice, "English", 1.0)
        != tone.synthesize("Hello.", custom.voice, "English", 1.0)
        or a.voice == custom.voice
    )


def test_a_design_request_is_spoken_in_a_voice_of_its_description() -> None:
    body = {"input": "Hi.", "task_type": "VoiceDesign", "instructions": "An old man.", "voice": "x"}
    request = validate(body, DESIGN)
    assert request.voice == stand_in_speaker("An old man.")
    assert request.instructions == "An old man."


@pytest.mark.parametrize(
    ("body", "model", "said"),
    [
        (clone(ref_text=""), BASE, "Base task requires non-empty 'ref_text'"),
        (clone(ref_audio="s3://b/k.wav"), BASE, "ref_audio must be a URL (http/https)"),
        (
            {"input": "Hi.", "task_type": "Base"},
            BASE,
            "Base task requires 'ref_audio' or 'speaker_embedding' for voice cloning",
        ),
        (
            {"input": "Hi.", "task_type": "Base", "voice": "narrator"},
            BASE,
            "requires 'ref_audio' for voice cloning",
        ),
        (
            {"input": "Hi.", "x_vector_only_mode": False},
            DEFAULT_MODEL,
            "'x_vector_only_mode' is only valid for Base task",
        ),
        (
            {"input": "Hi.", "task_type": "VoiceDesign"},
            DESIGN,
            "VoiceDesign task requires 'instructions' to describe the voice",
        ),
        (clone(), DEFAULT_MODEL, "checkpoint does not support task_type='Base'"),
    ],
)
def test_what_the_adapter_refuses_the_stand_in_refuses_in_its_words(
    body: dict[str, Any], model: str, said: str
) -> None:
    assert said in refusal(body, model)
    assert said.split("'")[0] in adapter_source()


def test_the_stand_in_serves_the_checkpoint_it_is_given() -> None:
    assert speech_server.model_variant(BASE) == "Base"
    assert "does not support task_type='CustomVoice'" in refusal({"input": "Hi."}, BASE)
