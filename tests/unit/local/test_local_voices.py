"""`tts-fleet local --task-type --library-voice` before anything starts: the config a task
type gives the run, and the library voices its jobs may name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lib.voices import clip
from tts_fleet.client.voices import VoiceError
from tts_fleet.local.run import LocalOptions, jobs_for, resolve_config
from worker.settings import DEFAULT_MODEL


@pytest.mark.parametrize(
    ("task_type", "model"),
    [
        (None, DEFAULT_MODEL),
        ("Base", "Qwen/Qwen3-TTS-12Hz-1.7B-Base"),
        ("VoiceDesign", "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign"),
    ],
)
def test_a_task_type_serves_its_checkpoint(task_type: str | None, model: str) -> None:
    worker = resolve_config(LocalOptions(task_type=task_type)).worker
    assert (worker.task_type, worker.model) == (task_type or "CustomVoice", model)


def test_jobs_may_name_the_runs_library_voices(tmp_path: Path) -> None:
    (tmp_path / "ann.wav").write_bytes(clip())
    (tmp_path / "ann.txt").write_text("A tone for a voice.\n")
    (tmp_path / "elder.txt").write_text("An old man.")
    lines = [{"id": v, "text": "Hi.", "voice": v} for v in ("ann", "elder", "stranger")]
    (tmp_path / "jobs.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    voices = (f"ann={tmp_path / 'ann.wav'}", f"elder={tmp_path / 'elder.txt'}")
    options = LocalOptions(
        input=str(tmp_path / "jobs.jsonl"), task_type="Base", library_voices=voices
    )
    jobs, invalid = jobs_for(options, resolve_config(options))
    assert [job.voice for job in jobs] == ["ann", "elder"]
    assert len(invalid) == 1 and "'stranger'" in invalid[0]
    (tmp_path / "ann.txt").unlink()
    with pytest.raises(VoiceError, match=r"ann\.txt"):
        jobs_for(options, resolve_config(options))
