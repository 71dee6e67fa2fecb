"""`tts-fleet local` with a long book (--split-chars, joined at the end) and a closed terminal
(SIGHUP mid-run): real subprocesses, as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import wave
from pathlib import Path

import pytest

from tests.lib.local_cli import CLI, RUN_TIMEOUT, exports
from tests.lib.procs import wait_for
from tts_fleet.client.books import split_text

pytestmark = pytest.mark.processes

PARAGRAPH = (
    "It was a bright cold day in April, and the clocks were striking thirteen. "
    "Winston slipped quickly through the glass doors of Victory Mansions. "
    "The hallway smelt of boiled cabbage and old rag mats.\n\n"
)
# Long enough to come out in 40+ parts: the cutting, the part order and the join are the
# point, not hours of tone audio (a 200,000-character book took most of a minute).
BOOK_CHARS = 40_000
SPLIT_CHARS = "1000"


def frames(path: Path) -> int:
    with wave.open(str(path)) as audio:
        frame_count: int = audio.getnframes()
        return frame_count


@pytest.mark.timeout(RUN_TIMEOUT * 2)
def test_a_long_book_round_trips_as_parts_and_one_joined_file(  # type: ignore[no-untyped-def]
    start, tmp_path: Path
) -> None:
    books = tmp_path / "books"
    books.mkdir()
    text = PARAGRAPH * (BOOK_CHARS // len(PARAGRAPH) + 1)
    assert len(text) >= BOOK_CHARS
    (books / "novel.txt").write_text(text, encoding="utf-8")
    run = start(
        "--input", str(books), "--split-chars", SPLIT_CHARS, "--backend", "tone",
        "--max-workers", "4", "--jobs-per-worker", "10", "--tick", "0.3", "--json",
    )  # fmt: skip
    code, stdout, stderr = run.finish(timeout=RUN_TIMEOUT * 2)
    assert code == 0, stderr[-2000:]
    summary = json.loads(stdout)
    parts = sorted(run.out.glob("novel.p*.json"))
    assert summary["completed"] == len(parts) == len(split_text(text, int(SPLIT_CHARS))) >= 40
    listing = json.loads((run.out / "novel.json").read_text())
    assert listing["parts"] == [p.stem for p in parts]  # every part, in order
    joined = frames(run.out / "novel.wav")
    assert joined == sum(frames(run.out / f"{p.stem}.wav") for p in parts)
    texts = [json.loads(p.read_text())["request"]["text"] for p in parts]
    assert "".join(texts) == text  # the parts are the whole book, nothing lost or repeated


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_sighup_mid_run_keeps_finished_outputs_and_saves_the_rest(start) -> None:  # type: ignore[no-untyped-def]
    # Two workers take 8 jobs at a time and each round takes seconds: when the third job is
    # done, the last rounds still have seconds to go, a margin for a loaded machine (at 400 ms
    # every job was once done before the hangup arrived).
    run = start(
        "--demo", "30", "--max-workers", "2", "--jobs-per-worker", "15",
        "--speech-latency-ms", "1500", "--tick", "0.3",
    )  # fmt: skip
    # Wait until some outputs are already in --out mid-run (they are fetched as jobs finish,
    # a moment after the decision that counts them).
    run.wait_for(lambda e: e["event"] == "decision" and e.get("completed", 0) >= 3)
    deadline_files = wait_for(lambda: list(run.out.glob("demo-*.json")), 60, 0.1, "an output")
    run.proc.send_signal(signal.SIGHUP)  # the terminal closed
    code, _, stderr = run.finish(timeout=60)
    assert code == 130, stderr[-2000:]
    assert deadline_files, "no output was in --out before the hangup"
    done = {p.stem for p in run.out.glob("demo-*.json")}
    assert {p.stem for p in run.out.glob("demo-*.wav")} == done  # audio beside each manifest
    unfinished = run.out / "unfinished.jsonl"
    assert unfinished.exists(), "every job was done before the hangup: nothing was saved"
    left = {json.loads(line)["id"] for line in unfinished.read_text().splitlines()}
    assert done | left == {f"demo-{i:03d}" for i in range(1, 31)} and not done & left


@pytest.mark.timeout(RUN_TIMEOUT * 2)
def test_after_a_sigkill_resume_runs_only_what_is_not_in_out(start) -> None:  # type: ignore[no-untyped-def]
    args = ("--demo", "16", "--max-workers", "2", "--jobs-per-worker", "8", "--tick", "0.3")
    killed = start(*args, "--speech-latency-ms", "400")
    killed.wait_for(lambda e: e["event"] == "decision" and e.get("completed", 0) >= 3)
    wait_for(lambda: list(killed.out.glob("demo-*.json")), 60, 0.1, "an output in --out")
    killed.proc.send_signal(signal.SIGKILL)  # no drain, no unfinished.jsonl: only --out is left
    killed.proc.wait(timeout=30)
    before = {p.stem for p in killed.out.glob("demo-*.json")}
    assert before and not (killed.out / "unfinished.jsonl").exists()
    resumed = start(*args, "--resume", "--json")
    code, stdout, stderr = resumed.finish()
    assert code == 0, stderr[-2000:]
    assert f"resuming: {len(before)} done already" in stderr
    assert json.loads(stdout)["completed"] == 16 - len(before)  # nothing done twice
    assert {p.stem for p in resumed.out.glob("demo-*.json")} == {
        f"demo-{i:03d}" for i in range(1, 17)
    }


@pytest.mark.timeout(RUN_TIMEOUT * 3)
def test_a_long_book_round_trips_through_submit_wait_and_results_join(  # type: ignore[no-untyped-def]
    start, tmp_path: Path
) -> None:
    """The user's flow against a long-lived local fleet: submit --split-chars, wait for the
    parts, results --join puts them back into one file per source."""
    run = start("--keep-running", "--backend", "tone", "--max-workers", "4", "--tick", "0.3")
    deadline = time.monotonic() + 90
    while "TTS_FLEET_BUCKET=" not in run.stdout():
        assert run.proc.poll() is None and time.monotonic() < deadline, run.stderr_path.read_text()
        time.sleep(0.1)
    env = {**os.environ, **exports(run.stdout())}
    books = tmp_path / "books"
    books.mkdir()
    text = PARAGRAPH * (BOOK_CHARS // len(PARAGRAPH) + 1)
    (books / "novel.txt").write_text(text, encoding="utf-8")
    split = ("--split-chars", SPLIT_CHARS)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT)  # fmt: skip

    sent = cli("submit", str(books), *split, "--json")
    assert sent.returncode == 0, sent.stderr
    parts = json.loads(sent.stdout)["ids"]
    assert len(parts) == len(split_text(text, int(SPLIT_CHARS))) >= 40
    waited = cli("wait", str(books), *split, "--timeout", str(RUN_TIMEOUT), "--interval", "1")
    assert waited.returncode == 0, waited.stderr
    out = tmp_path / "audio"
    got = cli("results", str(books), *split, "--join", "--out", str(out), "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["joined"] == ["novel"]
    listing = json.loads((out / "novel.json").read_text())
    assert listing["parts"] == sorted(parts)
    assert frames(out / "novel.wav") == sum(frames(out / f"{p}.wav") for p in parts)
    run.proc.send_signal(signal.SIGINT)
    run.finish(timeout=60)
