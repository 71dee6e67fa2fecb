"""The job message contract (DESIGN §3.2) and the output keys (§3.3)."""

from __future__ import annotations

import hashlib
import json

import pytest

from worker.jobs import (
    CUSTOM_VOICE_SPEAKERS,
    FailureRecord,
    InvalidJob,
    Job,
    Manifest,
    audio_key,
    derive_id,
    failure_key,
    job_id_of,
    manifest_key,
    parse_job,
    validate_job,
    voice_name_of,
    voice_record_key,
)


def test_only_text_is_required_and_defaults_apply() -> None:
    job = parse_job('{"text": "Hello."}')
    assert job.request() == {
        "text": "Hello.",
        "voice": "Vivian",
        "language": "Auto",  # vLLM-Omni's default: the model tells the language by the text
        "instructions": "",
        "format": "wav",
        "speed": 1.0,
    }


def test_derived_id_is_the_sha256_of_the_canonical_request() -> None:
    job = parse_job('{"text": "Hello.", "voice": "Ryan"}')
    same = parse_job('{"voice": "Ryan", "text": "Hello."}')  # key order does not matter
    canonical = json.dumps(job.request(), sort_keys=True, separators=(",", ":"))
    assert job.job_id == same.job_id == hashlib.sha256(canonical.encode()).hexdigest()[:32]
    assert derive_id(job.request()) == job.job_id
    assert parse_job('{"text": "Hello.", "voice": "Eric"}').job_id != job.job_id
    assert json.loads(job.body())["id"] == job.job_id  # the body makes the id explicit


@pytest.mark.parametrize(
    ("body", "reason", "job_id"),
    [
        ("[1, 2]", "body must be a JSON object, got list", None),
        ("{", "body is not JSON", None),
        ('{"id": "a b", "text": "x"}', "id: String should match pattern", None),
        ('{"id": "' + "a" * 129 + '", "text": "x"}', "id: String should match pattern", None),
        ('{"id": "ok", "text": "   "}', "text: Value error, text is blank", "ok"),
        ('{"id": "ok", "text": "x", "format": "ogg"}', "format: Input should be", "ok"),
        ('{"id": "ok", "text": "x", "speed": 5}', "speed: Input should be less", "ok"),
        ('{"id": "ok", "text": "x", "extra": 1}', "extra: unknown field", "ok"),
        ('{"id": "ok", "text": "' + "x" * 11 + '"}', "more than the limit of 10", "ok"),
        ('{"id": "ok", "text": "x", "language": "Klingon"}', "unknown language 'Klingon'", "ok"),
        ('{"id": "ok", "text": "x", "instructions": "' + "y" * 501 + '"}', "at most 500", "ok"),
        ('{"id": "ok", "text": "x", "speed": 0.2}', "speed: Input should be greater", "ok"),
        # JSON's decoder raises RecursionError and ValueError besides JSONDecodeError.
        ("[" * 100_000, "body is not JSON: nested too deeply", None),
        ('{"id": "ok", "text": "x", "speed": ' + "1" * 5_000 + "}", "body is not JSON", None),
        # The id is matched whole: `$` alone would admit a trailing newline.
        ('{"id": "ok\\n", "text": "x"}', "id: String should match pattern", None),
        # Zero-width space, joiners, word joiner, BOM, bidi mark: format characters, no speech.
        ('{"id": "ok", "text": "\\u200b\\u200c\\u200d"}', "text is blank", "ok"),
        ('{"id": "ok", "text": " \\u2060\\ufeff\\n\\u200e\\t"}', "text is blank", "ok"),
    ],
)
def test_invalid_jobs_say_why(body: str, reason: str, job_id: str | None) -> None:
    with pytest.raises(InvalidJob) as error:
        parse_job(body, max_text_chars=10)
    assert reason in error.value.reason
    assert error.value.job_id == job_id


def test_format_characters_inside_a_text_with_words_are_kept() -> None:
    text = "Hi\u200b there \U0001f44b\u200d\U0001f9d1"  # a zero-width space, an emoji's ZWJ
    assert parse_job(json.dumps({"text": text})).text == text


def test_submit_rejects_a_blank_text_and_an_id_with_a_newline_like_the_worker() -> None:
    # `tts-fleet submit` validates each line with validate_job and the CustomVoice speakers.
    for data in ({"id": "ok", "text": "\u200b" * 10}, {"id": "ok\n", "text": "Hello."}):
        with pytest.raises(InvalidJob):
            validate_job(data, voices=CUSTOM_VOICE_SPEAKERS)


def test_language_is_title_cased_like_the_server_and_instructions_stop_at_500() -> None:
    assert Job(text="x", language="chinese").language == "Chinese"
    assert Job(text="x", language="chinese").job_id == Job(text="x", language="Chinese").job_id
    assert len(Job(text="x", instructions="y" * 500).instructions) == 500


def test_voices_are_checked_only_when_the_caller_names_them() -> None:
    assert validate_job({"text": "x", "voice": "Bob"}).voice == "Bob"  # the worker's server
    assert validate_job({"text": "x", "voice": "ryan"}, voices=CUSTOM_VOICE_SPEAKERS).voice
    with pytest.raises(InvalidJob, match="unknown voice 'Bob'"):
        validate_job({"text": "x", "voice": "Bob"}, voices=CUSTOM_VOICE_SPEAKERS)


def test_request_hash_covers_every_field_and_the_model() -> None:
    base = Job(id="a", text="Hello.")
    hashes = {base.request_hash("m1"), base.request_hash("m2")}
    for change in ({"text": "Hello!"}, {"voice": "Ryan"}, {"language": "English"},
                   {"instructions": "Calm."}, {"format": "mp3"}, {"speed": 1.5}):  # fmt: skip
        hashes.add(base.model_copy(update=change).request_hash("m1"))
    assert len(hashes) == 8
    assert Job(id="b", text="Hello.").request_hash("m1") == base.request_hash("m1")  # not the id
    assert base.digest()[:32] == derive_id(base.request())


def test_a_manifest_knows_the_request_it_was_made_from() -> None:
    job = Job(id="a", text="Hello.")
    made = Manifest.model_validate({**MANIFEST_BEFORE, "request_hash": job.request_hash("m")})
    assert not made.made_from(job.digest())  # MANIFEST_BEFORE's model is not "m"
    assert made.model_copy(update={"model": "m"}).made_from(job.digest())
    assert not Manifest.model_validate(MANIFEST_BEFORE).made_from(job.digest())  # no hash: old


def test_every_format_is_accepted() -> None:
    assert [Job(text="x", format=f).format for f in ("wav", "flac", "mp3", "pcm")] == [
        "wav",
        "flac",
        "mp3",
        "pcm",
    ]


def test_output_keys() -> None:
    assert audio_key("a1", "wav") == "outputs/a1.wav"
    assert audio_key("a1", "wav", "", "0123456789abcdef0123") == "outputs/a1.0123456789abcdef.wav"
    assert manifest_key("a1") == "outputs/a1.json"
    assert failure_key("a1") == "failures/a1.json"
    assert audio_key("a1", "mp3", "team/") == "team/outputs/a1.mp3"


@pytest.mark.parametrize("job_id", ["a1", "v1.2_final-take", "0" * 32])
@pytest.mark.parametrize("prefix", ["", "team/"])
def test_a_records_key_gives_back_its_job_id(job_id: str, prefix: str) -> None:
    assert job_id_of(manifest_key(job_id, prefix), prefix) == job_id
    assert job_id_of(failure_key(job_id, prefix), prefix) == job_id


@pytest.mark.parametrize(
    ("key", "prefix"),
    [
        ("outputs/a1.wav", ""),  # audio, not a record
        ("outputs/a1.0123456789abcdef.wav", ""),
        ("team/outputs/a1.json", ""),  # another prefix's
        ("outputs/a1.json", "team/"),
        ("outputs/sub/a1.json", ""),  # no job id has a slash
        ("outputs/.json", ""),
        ("elsewhere/a1.json", ""),
        ("outputs/a1\n.json", ""),  # an id is matched whole
        ("failures/a1\n.json", ""),
    ],
)
def test_any_other_key_has_no_job_id(key: str, prefix: str) -> None:
    assert job_id_of(key, prefix) is None


# As worker/loop.py wrote them before the models: existing outputs must parse, and a new
# worker must write the same bytes (field order, floats, non-ASCII kept).
MANIFEST_BEFORE = {
    "id": "j1",
    "request": {"text": "Grüße", "voice": "Vivian", "language": "German", "instructions": "",
                "format": "wav", "speed": 1.0},
    "audio_key": "team/outputs/j1.wav",
    "duration_s": 2.5,
    "sample_rate": 24000,
    "model": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
    "voice": "Vivian",
    "synth_s": 1.234,
    "queue_wait_s": 0.5,
    "attempts": 2,
    "pieces": 1,
    "worker": "w-1",
    "finished_at": "2026-01-01T00:00:00.123+00:00",
}  # fmt: skip
FAILURE_BEFORE = {
    "id": "j2",
    "error": "invalid job",
    "detail": "text: Field required",
    "attempts": 1,
    "message_id": "m-2",
    "worker": "w-1",
    "failed_at": "2026-01-01T00:00:00.123+00:00",
}


@pytest.mark.parametrize(
    ("model", "before"),
    [
        (Manifest, MANIFEST_BEFORE),
        (Manifest, {**MANIFEST_BEFORE, "duration_s": None, "sample_rate": None}),
        (FailureRecord, FAILURE_BEFORE),
    ],
)
def test_records_keep_the_json_workers_already_wrote(
    model: type[Manifest | FailureRecord], before: dict
) -> None:
    # The fields added since (request_hash, sent_at_ms, message_id; request_digest) come last,
    # None.
    body = json.dumps(before, ensure_ascii=False).encode()
    written = json.loads(model.model_validate_json(body).to_json())
    added = list(written)[len(before) :]
    assert list(written)[: len(before)] == list(before)
    assert {key: written[key] for key in before} == before
    assert added and all(written[key] is None for key in added)


def test_records_ignore_a_field_a_newer_worker_adds() -> None:
    body = json.dumps({**FAILURE_BEFORE, "trace_id": "t"})
    assert FailureRecord.model_validate_json(body).reason() == "invalid job: text: Field required"


# ---- the per-job seed and the voice library's names (issue 25) ----------------------------


def test_an_unset_seed_leaves_the_request_and_its_digest_as_they_were() -> None:
    plain = Job(text="Hello.", voice="Ryan")
    assert "seed" not in plain.request() and "seed" not in json.loads(plain.body())
    seeded = Job(text="Hello.", voice="Ryan", seed=7)
    assert seeded.request()["seed"] == 7 and json.loads(seeded.body())["seed"] == 7
    assert seeded.digest() != plain.digest()
    assert parse_job(seeded.body()) == seeded.with_id()
    with pytest.raises(InvalidJob, match="seed"):
        parse_job(json.dumps({"text": "Hi.", "seed": -1}))


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("voices/narrator.json", "narrator"),
        ("p/voices/a-b_1.json", None),  # another prefix
        ("voices/narrator.wav", None),
        ("voices/a.b.json", None),
        ("voices/../x.json", None),
    ],
)
def test_a_voice_records_key_and_its_name(key: str, name: str | None) -> None:
    assert voice_name_of(key) == name
    if name is not None:
        assert voice_record_key(name) == key
