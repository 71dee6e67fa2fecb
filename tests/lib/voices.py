"""Voice-library helpers for the tests: a reference clip, and a bucket stub that serves records
to worker/voices.py in unit tests (the integration tests use the emulator)."""

from __future__ import annotations

import hashlib
import io
from typing import Any

import numpy as np
import soundfile  # type: ignore[import-untyped]

from worker.jobs import VoiceRecord, voice_audio_key, voice_record_key

ADDED_BY = "arn:aws:sts::123456789012:assumed-role/Producer/ann"
CONSENT = "Ann Lee agreed to this voice's use for narration."


def clip(seconds: float = 2.0, rate: int = 16_000, hz: float = 180.0) -> bytes:
    """A WAV reference clip: a tone of `hz`."""
    t = np.arange(int(seconds * rate)) / rate
    with io.BytesIO() as buffer:
        soundfile.write(buffer, 0.3 * np.sin(2 * np.pi * hz * t), rate, format="WAV")
        return buffer.getvalue()


def clone_record(name: str, audio: bytes, ref_text: str = "Hello there.") -> VoiceRecord:
    return VoiceRecord(
        name=name, kind="clone", ref_text=ref_text, audio_key=voice_audio_key(name),
        sha256=hashlib.sha256(audio).hexdigest(), duration_s=2.0, sample_rate=16_000,
        consent=CONSENT, added_by=ADDED_BY, added_at="2026-12-01T00:00:00Z",
    )  # fmt: skip


def design_record(name: str, description: str) -> VoiceRecord:
    return VoiceRecord(
        name=name, kind="design", description=description, consent=CONSENT,
        added_by=ADDED_BY, added_at="2026-12-01T00:00:00Z",
    )  # fmt: skip


class StubBucket:
    """`get_object` over a dict of keys, counting the GETs (a client stub, no moto)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects, self.gets = objects, 0

    @classmethod
    def of(cls, *records: tuple[VoiceRecord, bytes | None]) -> StubBucket:
        objects: dict[str, bytes] = {}
        for record, audio in records:
            objects[voice_record_key(record.name)] = record.to_json()
            if audio is not None:
                objects[voice_audio_key(record.name)] = audio
        return cls(objects)

    def get_object(self, Bucket: str, Key: str, Range: str = "") -> dict[str, Any]:
        self.gets += 1
        if Key not in self.objects:
            error = Exception("NoSuchKey")
            error.response = {"Error": {"Code": "NoSuchKey"}}  # type: ignore[attr-defined]
            raise error
        return {"Body": io.BytesIO(self.objects[Key])}
