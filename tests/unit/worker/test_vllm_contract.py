"""Every body the worker sends, against vLLM-Omni 0.30's own request model; the stand-in's
limits against the same source.

The wheel is installed without dependencies (`pip install --no-deps "vllm-omni==0.30.*"`):
importing the package would pull in torch and vllm, so nothing here imports it. The request
model's module (`protocol/audio.py`) needs only pydantic and numpy, and is loaded by file path;
the serving limits and the stage budget are read as text.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tts_fleet.local import speech_backends, speech_server
from worker.jobs import Job
from worker.settings import DEFAULT_MODEL
from worker.speech import MAX_MODEL_LEN, SpeechClient

PIP_LINE = 'pip install --no-deps "vllm-omni==0.30.*"'


def _package_dir() -> Path:
    # find_spec of a top-level package locates it without executing its __init__.
    spec = importlib.util.find_spec("vllm_omni")
    if spec is None or not spec.submodule_search_locations:
        # `make test` installs it (Makefile); without it the contract would go unchecked.
        pytest.fail(f"vllm-omni is not installed: {PIP_LINE} (make test does this)")
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.fixture(scope="module")
def omni() -> Path:
    return _package_dir()


@pytest.fixture(scope="module")
def protocol(omni: Path) -> ModuleType:
    path = omni / "entrypoints" / "openai" / "protocol" / "audio.py"
    spec = importlib.util.spec_from_file_location("_vllm_omni_protocol_audio", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the annotations through it
    spec.loader.exec_module(module)
    return module


def accepted_names(model: Any) -> set[str]:
    """Field names and their validation aliases: the keys the model reads from a body."""
    names: set[str] = set()
    for name, field in model.model_fields.items():
        names.add(name)
        alias = field.validation_alias
        if alias is not None:
            choices = getattr(alias, "choices", [alias])
            names.update(choice for choice in choices if isinstance(choice, str))
    return names


def check_body(model: Any, body: dict[str, Any]) -> None:
    """The body validates, and every key reaches a field with the value sent.

    The model ignores unknown keys, so validation alone would pass a renamed field (the server
    would silently drop it): the names are checked too.
    """
    unknown = set(body) - accepted_names(model)
    assert not unknown, f"fields the server ignores: {sorted(unknown)}"
    request = model.model_validate(body)
    for key, value in body.items():
        field = "voice" if key == "speaker" else key
        assert getattr(request, field) == value, key


def worker_bodies() -> list[dict[str, Any]]:
    """Every shape speech.py builds: each format, optional field and task type, on or off."""
    jobs = [
        Job(text="Hello.", format=fmt, voice=voice, language=language, speed=speed, instructions=i)
        for fmt, voice, language, speed, i in itertools.product(
            ("wav", "pcm", "flac", "mp3"),
            ("Vivian", "Uncle_Fu"),
            ("English", "Auto"),
            (0.25, 1.0, 4.0),
            ("", "Speak slowly and warmly." * 20),  # 480 characters: under the server's 500
        )
    ]
    clients = [
        SpeechClient("http://unused", model=model, task_type=task)
        for model, task in itertools.product(
            ("", DEFAULT_MODEL), ("", "CustomVoice", "VoiceDesign", "Base")
        )
    ]
    return [client.payload(job, job.text) for job in jobs for client in clients]


def test_every_worker_body_is_a_valid_request(protocol: ModuleType) -> None:
    bodies = worker_bodies()
    keys = set().union(*bodies)
    # every optional field appears in some body, and some body lacks each of them
    assert {"model", "instructions", "task_type"} <= keys
    assert all(any(key not in body for body in bodies) for key in ("model", "instructions"))
    for body in bodies:
        check_body(protocol.OpenAICreateSpeechRequest, body)


@pytest.mark.parametrize(
    ("sent", "real"),
    [("instructions", "instruction"), ("response_format", "format"), ("voice", "speaker_name")],
)
def test_a_renamed_field_fails_the_check(protocol: ModuleType, sent: str, real: str) -> None:
    # What the contract test does when speech.py sends a name the server does not read.
    body = SpeechClient("http://unused").payload(Job(text="Hi.", instructions="Calm."), "Hi.")
    body[real] = body.pop(sent)
    with pytest.raises(AssertionError, match="fields the server ignores"):
        check_body(protocol.OpenAICreateSpeechRequest, body)


def test_the_stand_in_offers_the_real_formats(protocol: ModuleType) -> None:
    field = protocol.OpenAICreateSpeechRequest.model_fields["response_format"]
    assert set(typing.get_args(field.annotation)) == set(speech_server.FORMATS)
    assert protocol.DEFAULT_AUDIO_FORMAT == "wav"


def test_the_stand_in_limits_are_the_servers(omni: Path) -> None:
    serving = (omni / "entrypoints/openai/serving_speech.py").read_text()
    limit = re.search(r"^_TTS_MAX_INSTRUCTIONS_LENGTH = (\d+)$", serving, re.M)
    assert limit and int(limit.group(1)) == speech_server.MAX_INSTRUCTIONS
    for header in ("X-VLLM-OMNI-INPUT-TOKENS", "X-VLLM-OMNI-OUTPUT-TOKENS"):
        assert f'"{header}"' in serving
    adapter = (omni / "entrypoints/openai/tts_adapters/qwen3_tts.py").read_text()
    rates = re.search(r"supported_output_sample_rates = frozenset\(\{([\d, ]+)\}\)", adapter)
    assert rates and {int(r) for r in rates.group(1).split(",")} == set(speech_server.SAMPLE_RATES)
    assert "Instructions too long (max {server._max_instructions_length} characters)" in adapter


def test_the_context_budget_is_the_deployed_one(omni: Path) -> None:
    deploy = yaml.safe_load((omni / "deploy" / "qwen3_tts.yaml").read_text())
    talker = next(stage for stage in deploy["stages"] if stage["stage_id"] == 0)
    assert talker["max_model_len"] == speech_backends.MAX_MODEL_LEN == MAX_MODEL_LEN
    assert talker["default_sampling_params"]["min_tokens"] == speech_backends.MIN_FRAMES


@pytest.mark.parametrize(
    "body",
    [
        {"input": "Hi."},
        {"input": "Hi.", "speaker": "ryan", "response_format": "opus"},
        {"input": "Hi.", "voice": {"id": "ryan"}},
        {"input": "Hi.", "speed": 0.25},
        {"input": "Hi.", "speed": 4.5},
        {"input": "Hi.", "speed": 0.1},
        {"input": "Hi.", "response_format": "ogg"},
        {"input": "Hi.", "task_type": "Clone"},
        {"input": "Hi.", "sample_rate": 0},
        {"input": 5},
        {"voice": "ryan"},
    ],
)
def test_the_stand_in_rejects_what_the_schema_rejects(protocol: ModuleType, body: dict) -> None:
    from pydantic import ValidationError

    try:
        protocol.OpenAICreateSpeechRequest.model_validate(body)
        real_accepts = True
    except ValidationError:
        real_accepts = False
    try:
        speech_server.validate(body, DEFAULT_MODEL)
        ours_accepts = True
    except speech_server.HTTPError as error:
        assert error.status == 400
        ours_accepts = False
    assert ours_accepts == real_accepts


def guarded_bodies() -> list[dict[str, Any]]:
    """What a worker with output checks sends (worker/qa/): every body its speech client posts
    for jobs of each script, speed and length, including a piece long enough that the talker's
    context lowers its ceiling, answered by a server that reads them back."""
    from tests.lib.fake_worker import FaultyTts
    from worker.qa.guard import Guard

    server = FaultyTts()
    texts = ["Hi.", "A sentence of an ordinary length.", "这是一个很长的中文句子。" * 20]
    jobs = [Job(text=text, speed=speed) for text in texts for speed in (0.25, 1.0, 4.0)]
    jobs.append(Job(text="Line after line of a long chapter. " * 50))  # a lowered ceiling
    for job in jobs:
        server.client(Guard(retries=0), chunk_chars=100_000).synthesize(job)
    return server.bodies


def test_every_body_with_output_checks_is_a_valid_request(protocol: ModuleType, omni: Path) -> None:
    bodies = guarded_bodies()
    assert all({"seed", "max_new_tokens"} <= set(body) for body in bodies)
    for body in bodies:
        check_body(protocol.OpenAICreateSpeechRequest, body)
    # Qwen3TTSAdapter.validate refuses a ceiling outside [max_new_tokens_min, _max] (base.py).
    base = (omni / "entrypoints/openai/tts_adapters/base.py").read_text()
    low = re.search(r"^\s+max_new_tokens_min = (\d+)$", base, re.M)
    high = re.search(r"^\s+max_new_tokens_max = (\d+)$", base, re.M)
    assert low and high
    ceilings = [body["max_new_tokens"] for body in bodies]
    assert len(set(ceilings)) > 3 and len({body["seed"] for body in bodies}) > 3
    from worker.qa.checks import max_new_tokens

    assert any(body["max_new_tokens"] < max_new_tokens(body["input"]) for body in bodies)
    assert int(low.group(1)) <= min(ceilings) and max(ceilings) <= int(high.group(1))
    assert max(ceilings) < MAX_MODEL_LEN  # never the whole context: no runaway reaches it
    adapter = (omni / "entrypoints/openai/tts_adapters/qwen3_tts.py").read_text()
    assert 'params["max_new_tokens"] = [request.max_new_tokens]' in adapter  # it is applied


def test_a_seeded_runaway_is_the_answer_the_worker_reads_as_one(omni: Path) -> None:
    # The 500 vLLM-Omni answers when a request with max_new_tokens runs out of it (Base task).
    adapter = (omni / "entrypoints/openai/tts_adapters/qwen3_tts.py").read_text()
    assert "did not emit codec EOS before its token budget" in adapter
    from worker.speech import _NO_END_OF_SPEECH

    assert _NO_END_OF_SPEECH.search("Qwen3-TTS Base did not emit codec EOS before its token")


def test_a_body_asking_for_word_timestamps_is_a_valid_request(protocol: ModuleType) -> None:
    # WORD_TIMESTAMPS=on: the field the real request model reads, with and without the checks.
    job = Job(text="Hello there. Goodbye.", speed=1.5)
    asking = SpeechClient("http://unused", model=DEFAULT_MODEL, word_timestamps=True)
    for body in (
        asking.payload(job, job.text),
        asking.payload(job, job.text, seed=7, max_new_tokens=90),
    ):
        assert body["word_timestamps"] is True
        check_body(protocol.OpenAICreateSpeechRequest, body)
    silent = SpeechClient("http://unused", model=DEFAULT_MODEL)
    assert "word_timestamps" not in silent.payload(job, job.text)


def test_word_timestamps_come_as_the_servers_headers(omni: Path) -> None:
    # The header names, the item keys and the 4 KB cap the worker and the stand-in rely on.
    from worker import timings

    serving = (omni / "entrypoints/openai/serving_speech.py").read_text()
    assert f'headers["{speech_server.WORD_TIMESTAMPS_HEADER}"] = ts_json' in serving
    assert f'headers["{speech_server.WORD_TIMESTAMPS_OMITTED_HEADER}"]' in serving
    assert f"if len(ts_json) <= {speech_server.WORD_TIMESTAMPS_LIMIT}:" in serving
    assert speech_server.WORD_TIMESTAMPS_HEADER.lower() == timings.WORD_TIMESTAMPS_HEADER
    aligner = (omni / "utils/forced_aligner.py").read_text()
    assert '{"word": w, "start_ms": int(p[0]), "end_ms": int(p[1])}' in aligner
    port = (omni / "utils/qwen3_force_align_processor.py").read_text()
    assert "for seg in text.split():" in port  # the segmentation aligner_words follows


# ---- library voices (issue 25) -------------------------------------------------------------


def library_bodies(task_type: str) -> list[dict[str, Any]]:
    """What a Base or VoiceDesign worker sends for jobs naming library voices, with and without
    a seed and instructions."""
    from tests.lib.voices import StubBucket, clip, clone_record, design_record
    from worker.voices import VoiceLibrary

    audio = clip()
    bucket = StubBucket.of(
        (clone_record("narrator", audio), audio), (design_record("elder", "An old man."), None)
    )
    voice = "narrator" if task_type == "Base" else "elder"
    library = VoiceLibrary(bucket, "b", "", task_type)
    bodies = []
    client = SpeechClient("http://unused", model="m", task_type=task_type, voices=library)
    for seed, instructions in itertools.product((None, 7), ("", "Slowly.")):
        job = Job(text="Hello.", voice=voice, seed=seed, instructions=instructions)
        bodies.append(client.payload(job, job.text, seed=job.seed))
    return bodies


def test_a_clone_jobs_requests_are_valid_base_requests(protocol: ModuleType) -> None:
    bodies = library_bodies("Base")
    for body in bodies:
        check_body(protocol.OpenAICreateSpeechRequest, body)
        # Qwen3TTSAdapter.validate's Base rules: a data URL it accepts, a transcript, no name
        # (a name would be looked up among the server's own stored voices).
        assert body["ref_audio"].startswith("data:audio/wav;base64,")
        assert body["ref_text"] == "Hello there." and "voice" not in body
    assert any("seed" in body for body in bodies) and any("seed" not in body for body in bodies)


def test_a_design_jobs_requests_are_valid_voice_design_requests(protocol: ModuleType) -> None:
    bodies = library_bodies("VoiceDesign")
    for body in bodies:
        check_body(protocol.OpenAICreateSpeechRequest, body)
        assert body["instructions"].startswith("An old man.") and "voice" not in body
        assert "ref_text" not in body and "ref_audio" not in body
    assert {body["instructions"] for body in bodies} == {"An old man.", "An old man. Slowly."}


@pytest.mark.parametrize("task_type", ["", "CustomVoice", "VoiceDesign", "Base"])
def test_the_start_up_probe_of_each_task_type_is_a_valid_request(
    protocol: ModuleType, task_type: str
) -> None:
    # A Base or VoiceDesign worker's probe brings its own voice: its jobs name library voices.
    import base64
    import io

    import soundfile  # type: ignore[import-untyped]

    from worker import startup

    body = startup._probe_body(SpeechClient("http://unused", DEFAULT_MODEL, task_type))
    check_body(protocol.OpenAICreateSpeechRequest, body)
    if task_type == "Base":
        assert "voice" not in body and body["ref_text"].strip()
        wav = base64.b64decode(body["ref_audio"].removeprefix("data:audio/wav;base64,"))
        assert soundfile.info(io.BytesIO(wav)).duration == 1.0
    elif task_type == "VoiceDesign":
        assert "voice" not in body and body["instructions"]
    else:
        assert body["voice"] == "Vivian" and "ref_audio" not in body
