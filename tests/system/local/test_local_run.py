"""`tts-fleet local` end to end, as a real subprocess: moto, the speech server (espeak), real
`python -m worker` processes, the local scaler and the stand-in ECS agent.

Each run uses --tick 0.5 (fewer idle seconds) and --jobs-per-worker so that the first tick,
which sees every job already submitted, asks for an exact worker count.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import wave
from pathlib import Path
from typing import Any

import pytest

from tests.lib.local_cli import CLI, RUN_TIMEOUT, alive, child_pids, exports

pytestmark = pytest.mark.processes


def wav_seconds(path: Path) -> float:
    with wave.open(str(path)) as audio:
        assert audio.getnchannels() == 1 and audio.getsampwidth() == 2
        return audio.getnframes() / audio.getframerate()


def decisions(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "decision"]


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_demo_run_produces_audio_and_scales_out_and_back_to_zero(start) -> None:  # type: ignore[no-untyped-def]
    run = start(
        "--demo",
        "12",
        "--max-workers",
        "3",
        "--jobs-per-worker",
        "4",
        "--backend",
        "espeak",
        "--tick",
        "0.5",
        "--json",
    )
    code, stdout, stderr = run.finish()
    assert code == 0, stderr
    wavs = sorted(run.out.glob("*.wav"))
    manifests = sorted(run.out.glob("demo-*.json"))
    assert [p.stem for p in wavs] == [f"demo-{i:03d}" for i in range(1, 13)]
    assert [p.stem for p in manifests] == [p.stem for p in wavs]
    for wav, manifest in zip(wavs, manifests, strict=True):
        seconds = wav_seconds(wav)
        assert seconds > 0.5  # a sentence of espeak speech, not an empty file
        record = json.loads(manifest.read_text())
        assert record["id"] == wav.stem
        assert abs(record["duration_s"] - seconds) < 0.01
        assert record["worker"].startswith("worker-")  # the pool's WORKER_ID reached it
    steps = decisions(run.events())
    # Every job was queued before the first tick: ceil(12 / 4) = 3 at once.
    assert (steps[0]["outstanding"], steps[0]["desired"], steps[0]["running"]) == (12, 3, 3)
    assert max(s["running"] for s in steps) == 3
    assert (steps[-1]["outstanding"], steps[-1]["desired"], steps[-1]["running"]) == (0, 0, 0)
    # The default stack runs the controller (scaling.mode: controller); it says why.
    assert steps[-1]["alarm"] == "controller" and steps[-1]["reason"]
    summary = json.loads(stdout)
    assert (summary["completed"], summary["failed"], summary["unfinished"]) == (12, 0, 0)
    assert summary["peak_workers"] == 3 and summary["ok"] is True
    assert summary["latency_p95_s"] >= summary["latency_p50_s"] > 0
    assert abs(summary["audio_s"] - sum(map(wav_seconds, wavs))) < 0.1
    assert (run.out / "timeline.png").read_bytes().startswith(b"\x89PNG")
    assert not [pid for pid in child_pids(run.events()) if alive(pid)]


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_a_worker_killed_mid_job_loses_nothing(start) -> None:  # type: ignore[no-untyped-def]
    # Slow "model" (1 s a request) so a job is in flight when the worker dies; a short
    # visibility so its messages come back within seconds.
    run = start(
        "--demo",
        "6",
        "--max-workers",
        "2",
        "--jobs-per-worker",
        "3",
        "--speech-latency-ms",
        "1000",
        "--visibility-timeout",
        "8",
        "--tick",
        "0.5",
    )
    busy = run.wait_for(
        lambda e: e["event"] == "decision" and any(w["protected"] for w in e["workers"])
    )
    victim = next(w for w in busy["workers"] if w["protected"])
    os.kill(victim["pid"], signal.SIGKILL)
    code, _, stderr = run.finish()
    assert code == 0, stderr
    assert len(list(run.out.glob("demo-*.wav"))) == 6
    manifests = [json.loads(p.read_text()) for p in run.out.glob("demo-*.json")]
    assert len(manifests) == 6
    # The killed worker's jobs were received again after their visibility ran out.
    assert max(m["attempts"] for m in manifests) >= 2
    exits = [e for e in run.events() if e["event"] == "worker_exited"]
    assert {"worker": victim["id"], "code": -9, "expected": False}.items() <= next(
        e for e in exits if e["worker"] == victim["id"]
    ).items()
    assert decisions(run.events())[-1]["running"] == 0


@pytest.mark.timeout(RUN_TIMEOUT)
def test_ctrl_c_stops_everything_within_ten_seconds(start) -> None:  # type: ignore[no-untyped-def]
    run = start(
        "--demo",
        "12",
        "--max-workers",
        "2",
        "--jobs-per-worker",
        "6",
        "--speech-latency-ms",
        "800",
        "--tick",
        "0.5",
    )
    run.wait_for(lambda e: e["event"] == "decision" and any(w["protected"] for w in e["workers"]))
    pids = child_pids(run.events())
    assert len(pids) >= 2  # the speech server and at least one worker
    sent = time.monotonic()
    run.proc.send_signal(signal.SIGINT)
    code, stdout, stderr = run.finish(timeout=30)
    assert time.monotonic() - sent < 10
    assert code == 130, stderr
    assert [pid for pid in pids if alive(pid)] == []
    assert "interrupted" in stdout
    assert "stopping: draining" in stdout  # said at once, not a frozen screen
    # Nothing acknowledged is lost: each job has audio or is in unfinished.jsonl.
    done = {p.stem for p in run.out.glob("demo-*.wav")}
    unfinished_path = run.out / "unfinished.jsonl"
    left = unfinished_path.read_text().splitlines() if unfinished_path.exists() else []
    left_ids = {json.loads(line)["id"] for line in left}
    assert done | left_ids == {f"demo-{i:03d}" for i in range(1, 13)}
    assert not done & left_ids


def test_invalid_input_is_reported_and_nothing_starts(tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text('{"id": "ok", "text": "fine"}\n{"text": "x", "colour": "red"}\n')
    result = subprocess.run(
        [*CLI, "local", "--input", str(source), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2  # bad input (tts_fleet/exit_codes.py)
    assert f"invalid: {source}:2: colour: unknown field" in result.stderr
    assert "nothing was sent" in result.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_stack_is_one_clear_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [*CLI, "local", "--demo", "1", "--stack", "nosuch"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2  # bad input
    # The one stack-file reader's line, as every command words it.
    assert result.stderr.strip() == (
        "Error: Pulumi.nosuch.yaml: no such stack file (stacks are Pulumi.<stack>.yaml)"
    )


@pytest.mark.timeout(RUN_TIMEOUT)
def test_keep_running_serves_submit_from_another_process(start, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = start("--keep-running", "--tick", "0.5", "--idle-ticks", "2")
    deadline = time.monotonic() + 90
    while "TTS_FLEET_BUCKET=" not in run.stdout():
        assert run.proc.poll() is None and time.monotonic() < deadline, run.stderr_path.read_text()
        time.sleep(0.1)
    env = {**os.environ, **exports(run.stdout())}
    assert env["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
    source = tmp_path / "jobs.jsonl"
    source.write_text('{"id": "k1", "text": "Hello there."}\n{"id": "k2", "text": "Hi."}\n')
    submit = subprocess.run(
        [*CLI, "submit", str(source)], env=env, capture_output=True, text=True, timeout=60
    )
    assert submit.returncode == 0, submit.stderr
    run.wait_for(lambda e: e["event"] == "decision" and e["completed"] == 2)
    run.wait_for(lambda e: e["event"] == "decision" and e["running"] == 0 and e["tick"] > 3)
    pids = child_pids(run.events())
    run.proc.send_signal(signal.SIGTERM)  # a service manager stopping it, not only Ctrl-C
    code, stdout, stderr = run.finish(timeout=30)
    assert code == 0, stderr  # nothing was left, so stopping a --keep-running fleet is success
    assert "2 done of 2 submitted" in stdout  # jobs sent from elsewhere are counted too
    assert sorted(p.name for p in run.out.glob("k*.wav")) == ["k1.wav", "k2.wav"]
    assert [pid for pid in pids if alive(pid)] == []


@pytest.mark.timeout(RUN_TIMEOUT)
def test_children_go_when_the_cli_is_killed_outright(start) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL cannot be handled; the children asked the kernel (PR_SET_PDEATHSIG) to be
    told, so they drain and exit on their own instead of lingering as orphans."""
    run = start("--demo", "4", "--max-workers", "1", "--speech-latency-ms", "500", "--tick", "0.5")
    run.wait_for(lambda e: e["event"] == "decision" and e["running"] == 1)
    pids = child_pids(run.events())
    run.proc.kill()
    run.proc.wait(10)
    deadline = time.monotonic() + 30
    while [pid for pid in pids if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [pid for pid in pids if alive(pid)] == []


@pytest.mark.timeout(RUN_TIMEOUT)
def test_a_dead_speech_server_stops_the_run_with_its_log(start) -> None:  # type: ignore[no-untyped-def]
    run = start("--demo", "8", "--max-workers", "1", "--speech-latency-ms", "500", "--tick", "0.5")
    speech = run.wait_for(lambda e: e["event"] == "speech_server_started")
    run.wait_for(lambda e: e["event"] == "decision")
    os.kill(speech["pid"], signal.SIGKILL)
    code, _, stderr = run.finish(timeout=60)
    assert code == 1
    assert "the speech server exited (code -9); see" in stderr
    assert "speech-server.log" in stderr
    assert [pid for pid in child_pids(run.events()) if alive(pid)] == []
