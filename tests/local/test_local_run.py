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
import sys
import time
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.processes

SCRIPT = Path(sys.executable).with_name("tts-fleet")
CLI = (
    [str(SCRIPT)]
    if SCRIPT.exists()
    else [sys.executable, "-c", "from tts_fleet.cli.main import main; main()"]
)
# Generous: two loaded cores, several engineers' suites at once.
RUN_TIMEOUT = 180


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def child_pids(events: list[dict[str, Any]]) -> set[int]:
    """Every process the run started: the speech server and each worker."""
    kinds = {"speech_server_started", "worker_started"}
    return {e["pid"] for e in events if e["event"] in kinds}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Run:
    """The CLI as a subprocess; its output goes to files so a test can read it mid-run."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.out = tmp_path / "out"
        self.events_path = tmp_path / "events.jsonl"
        self.stdout_path = tmp_path / "stdout.txt"
        self.stderr_path = tmp_path / "stderr.txt"
        argv = [*CLI, "local", "--out", str(self.out), "--events", str(self.events_path), *args]
        with self.stdout_path.open("w") as stdout, self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(argv, cwd=tmp_path, stdout=stdout, stderr=stderr, env=env)

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.events_path)

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 120
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if predicate(event):
                    return event
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no such event; exit {self.proc.poll()}; {self.events()[-3:]}")

    def finish(self, timeout: float = RUN_TIMEOUT) -> tuple[int, str, str]:
        self.proc.wait(timeout=timeout)
        return self.proc.returncode, self.stdout(), self.stderr_path.read_text()

    def stdout(self) -> str:
        return self.stdout_path.read_text()

    def cleanup(self) -> None:
        """A failed test must not leave the CLI or its children running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in child_pids(self.events()):
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def make(*args: str, env: dict[str, str] | None = None) -> Run:
        run = Run(tmp_path, *args, env=env)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.cleanup()


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
    assert steps[-1]["alarm"] == "idle"
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
    assert result.returncode == 1
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
    assert result.returncode == 1
    assert result.stderr.strip() == "Error: no stack file: Pulumi.nosuch.yaml"


def exports(text: str) -> dict[str, str]:
    pairs = [line.strip().removeprefix("export ") for line in text.splitlines()]
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair and pair[:1].isupper())


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
