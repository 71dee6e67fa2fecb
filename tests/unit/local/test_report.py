"""Summary statistics, the timeline PNG, the sparkline and the config a local run uses."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tts_fleet.cli.local import exit_code
from tts_fleet.config.models import ConfigError
from tts_fleet.local.demo import VOICES, demo_jobs
from tts_fleet.local.finish import unfinished_bodies, write_unfinished
from tts_fleet.local.report import (
    Summary,
    audio_seconds,
    idle_firings,
    latency,
    read_manifests,
    write_timeline,
)
from tts_fleet.local.run import LocalOptions, jobs_for, resolve_config
from tts_fleet.local.scaler import Tick
from tts_fleet.local.view import idle_countdown, shown_outstanding, sparkline, status_line
from worker.jobs import Manifest

REPO = Path(__file__).resolve().parents[3]


def manifest(
    job_id: str, duration_s: float | None, wait: float = 0.0, synth: float = 0.0
) -> Manifest:
    return Manifest(
        id=job_id, request={}, audio_key=f"outputs/{job_id}.wav", duration_s=duration_s,
        sample_rate=22_050, model="m", voice="v", synth_s=synth, queue_wait_s=wait, attempts=1,
        pieces=1, worker="w", finished_at="2026-01-01T00:00:10.000+00:00",
    )  # fmt: skip


def test_latency_is_the_workers_own_measurements() -> None:
    assert latency(manifest("a", 1.0, wait=1.5, synth=0.25)) == 1.75


def test_manifests_and_audio_seconds(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_bytes(manifest("a", 1.5).to_json())
    (tmp_path / "b.json").write_bytes(manifest("b", 2.25).to_json())
    (tmp_path / "c.json").write_bytes(manifest("c", None).to_json())
    (tmp_path / "a.wav").write_bytes(b"RIFF")
    manifests = read_manifests(sorted(tmp_path.iterdir()))
    assert [m.id for m in manifests] == ["a", "b", "c"]
    assert audio_seconds(manifests) == 3.75


def test_sparkline_scales_to_the_maximum() -> None:
    assert sparkline([0, 4, 8]) == "▁▅█"
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline(list(range(100)), width=10) == sparkline(list(range(90, 100)), width=10)
    assert len(sparkline(list(range(100)), width=10)) == 10


def tick(n: int, outstanding: int, desired: int, running: int) -> Tick:
    return Tick(n, n * 1.0, outstanding, 0, outstanding, 0, 12 - outstanding, "ok",
                desired, running, 0, 0)  # fmt: skip


def test_status_line_names_every_count() -> None:
    line = status_line(tick(3, 8, 2, 1), submitted=12)
    expected = (
        "tick 3 outstanding 8 in flight 0 workers 1/2 (pending 0, stopping 0) "
        "done 4/12 failed 0 alarm ok"
    )
    assert " ".join(line.split()) == expected


def test_timeline_is_a_png(tmp_path: Path) -> None:
    samples = [tick(1, 12, 3, 3), tick(2, 8, 2, 2), tick(3, 0, 0, 0)]
    path = write_timeline(samples, tmp_path / "sub" / "timeline.png", "test")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000  # two panels with axes and legends, not an empty canvas


def test_unfinished_jobs_are_saved_for_resubmission(tmp_path: Path) -> None:
    jobs = demo_jobs(3)
    queued = [jobs[2].body(), '{"id": "other", "text": "from submit"}', "not json"]
    bodies = unfinished_bodies(jobs, {"demo-002"}, queued)
    path = tmp_path / "unfinished.jsonl"
    assert write_unfinished(bodies, path) == 4
    lines = path.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines[:3]] == ["demo-001", "demo-003", "other"]
    assert lines[3] == "not json"  # kept as it was sent: nothing acknowledged is lost
    all_done = unfinished_bodies(jobs, {"demo-001", "demo-002", "demo-003"}, [])
    assert write_unfinished(all_done, path) == 0
    assert not path.exists()  # no stale list from an earlier run


def test_demo_jobs_cycle_voices_with_stable_ids() -> None:
    jobs = demo_jobs(6)
    assert [job.job_id for job in jobs][:2] == ["demo-001", "demo-002"]
    assert [job.voice for job in jobs] == [*VOICES, *VOICES][:6]
    assert len({job.job_id for job in demo_jobs(40)}) == 40


def test_config_defaults_and_overrides() -> None:
    cfg = resolve_config(LocalOptions(demo=1))
    assert (cfg.scaling.max_workers, cfg.scaling.jobs_per_worker, cfg.scaling.idle_minutes) == (
        4,
        8,
        5,
    )
    cfg = resolve_config(LocalOptions(demo=1, max_workers=3, jobs_per_worker=4, idle_ticks=2))
    assert (cfg.scaling.max_workers, cfg.scaling.jobs_per_worker, cfg.scaling.idle_minutes) == (
        3,
        4,
        2,
    )


def test_stack_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.t.yaml").write_text(
        "config:\n  tts-fleet:scaling:\n    maxWorkers: 7\n    minWorkers: 2\n"
        "  tts-fleet:queue:\n    maxReceiveCount: 3\n"
    )
    cfg = resolve_config(LocalOptions(demo=1, stack="t", project_dir=tmp_path))
    assert (cfg.scaling.max_workers, cfg.scaling.min_workers, cfg.queue.max_receive_count) == (
        7,
        2,
        3,
    )
    with pytest.raises(ConfigError) as error:
        resolve_config(LocalOptions(demo=1, stack="t", project_dir=tmp_path, max_workers=1))
    assert error.value.problems == ["tts-fleet:scaling.maxWorkers: must be >= minWorkers (1 < 2)"]


def test_the_repos_dev_stack_loads() -> None:
    cfg = resolve_config(LocalOptions(demo=1, stack="dev", project_dir=REPO))
    assert cfg.scaling.max_workers >= 1


def test_input_lines_are_validated(tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text('{"id": "a", "text": "hi"}\n{"text": ""}\n{"id": "b", "text": "yo"}\n')
    cfg = resolve_config(LocalOptions(input=str(source)))
    jobs, invalid = jobs_for(LocalOptions(input=str(source)), cfg)
    assert [job.job_id for job in jobs] == ["a", "b"]
    assert len(invalid) == 1 and invalid[0].startswith(f"{source}:2:")


def summary(**changes: object) -> Summary:
    base = Summary(
        submitted=4, completed=4, failed=0, invalid_lines=0, unfinished=0, latency_p50_s=1.0,
        latency_p95_s=2.0, audio_s=8.0, worker_s=9.0, wall_s=10.0, peak_workers=2, ticks=12,
        interrupted=False, out_dir="out", timeline="out/timeline.png",
    )  # fmt: skip
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "keep_running", "code"),
    [
        ({}, False, 0),
        ({"failed": 1, "completed": 3}, False, 1),
        ({"invalid_lines": 1}, False, 1),
        ({"interrupted": True, "unfinished": 2}, False, 130),
        ({"interrupted": True}, False, 130),  # stopped before the fleet settled
        ({"interrupted": True}, True, 0),  # Ctrl-C is how --keep-running ends
        ({"interrupted": True, "unfinished": 1}, True, 130),
    ],
)
def test_exit_codes(changes: dict[str, object], keep_running: bool, code: int) -> None:
    assert exit_code(summary(**changes), keep_running) == code


def test_summary_rows_say_what_happened() -> None:
    rows = dict(summary(interrupted=True, unfinished=2, invalid_lines=1).rows())
    assert rows["jobs"] == "4 done of 4 submitted"
    assert rows["unfinished"] == "2, saved to out/unfinished.jsonl (use --input)"
    assert rows["invalid input lines (skipped)"] == "1"
    assert rows["latency p50 / p95"] == "1.00 s / 2.00 s"
    assert rows["worker-seconds used"] == "9.0 s (peak 2 workers)"
    assert "interrupted" in rows["stopped"]


def test_outstanding_never_shows_more_than_the_runs_own_jobs() -> None:
    raced = tick(2, 41, 4, 4)  # SQS counted a message twice while it was being received
    raced = dataclasses.replace(raced, completed=0)
    assert shown_outstanding(raced, submitted=40) == 40
    assert "outstanding   40" in status_line(raced, submitted=40)
    # --keep-running with nothing submitted here: SQS's count as is, and no "/0"
    assert shown_outstanding(raced, submitted=0) == 41
    assert "done 0 " in status_line(raced, submitted=0) + " "


def test_idle_countdown_runs_while_the_queue_is_empty_and_the_fleet_is_up() -> None:
    up = tick(7, 0, 1, 1)
    assert idle_countdown(3, 5, up) == "idle 3 of 5 ticks"
    assert idle_countdown(0, 5, up) == ""
    assert idle_countdown(3, 5, tick(8, 0, 0, 0)) == ""  # at zero there is nothing to count down
    controller = dataclasses.replace(up, reason="warm-one")
    assert idle_countdown(2, 5, controller) == "idle 2 ticks"  # its window is its own


def test_every_idle_alarm_firing_is_found_not_only_the_first() -> None:
    states = ["scale-out", "idle", "idle", "scale-out", "ok", "idle", "ok", "idle"]
    samples = [dataclasses.replace(tick(i + 1, 0, 0, 0), alarm=s) for i, s in enumerate(states)]
    assert idle_firings(samples) == [2, 6, 8]
