"""One text limit for submit, wait and results: the deployed stack's `maxTextChars` output.

A job longer than the worker's default (20,000) but within the stack's limit is sent by
`submit`, waited for by `wait` and downloaded by `results`, given the same JSONL and the same
target, whether the outputs come from a saved file or from the Pulumi CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lib.client_stack import Stack, finish, run, run_json
from tts_fleet.client.stack import StackError, text_limit
from tts_fleet.config import outputs
from tts_fleet.exit_codes import ExitCode
from worker.jobs import DEFAULT_MAX_TEXT_CHARS

STACK_LIMIT = 50_000
LONG_TEXT = ("A long chapter, read aloud. " * 1100)[:30_000]


def stack_outputs(stack: Stack, **extra: object) -> dict[str, object]:
    return {outputs.QUEUE_URL: stack.queue_url, outputs.BUCKET_NAME: stack.bucket, **extra}


@pytest.fixture
def jobs(stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A short job and a 30,000-character one; the target comes from the outputs alone."""
    assert DEFAULT_MAX_TEXT_CHARS < len(LONG_TEXT) < STACK_LIMIT
    for name in ("TTS_FLEET_QUEUE_URL", "TTS_FLEET_BUCKET"):
        monkeypatch.delenv(name)
    source = tmp_path / "jobs.jsonl"
    source.write_text(
        json.dumps({"id": "short", "text": "Hello."})
        + "\n"
        + json.dumps({"id": "long", "text": LONG_TEXT})
        + "\n"
    )
    return source


def submit_wait_results(stack: Stack, source: Path, out: Path, *target: str) -> None:
    code, receipt = run_json("submit", str(source), *target)
    assert code == 0, receipt
    assert (receipt["sent"], receipt["invalid"]) == (2, [])
    finish(stack, "short", text="Hello.")
    finish(stack, "long", text=LONG_TEXT)  # what the stack's worker leaves for it
    code, waited = run_json("wait", str(source), "--timeout", "5", "--interval", "0.1", *target)
    assert code == 0 and (waited["total"], waited["done"], waited["pending"]) == (2, 2, [])
    code, got = run_json("results", str(source), "--out", str(out), *target)
    assert code == 0 and (got["downloaded"], got["missing"]) == (4, [])
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "long.json", "long.wav", "short.json", "short.wav",
    ]  # fmt: skip


def test_an_outputs_file_limit_holds_for_submit_wait_and_results(
    stack: Stack, jobs: Path, tmp_path: Path
) -> None:
    saved = tmp_path / "outputs.json"
    saved.write_text(json.dumps(stack_outputs(stack, **{outputs.MAX_TEXT_CHARS: STACK_LIMIT})))
    submit_wait_results(stack, jobs, tmp_path / "audio", "--outputs-file", str(saved))


def test_a_target_without_the_output_takes_the_workers_default(
    stack: Stack, jobs: Path, tmp_path: Path
) -> None:
    # A target given by URL, or a stack deployed before it exported maxTextChars.
    saved = tmp_path / "outputs.json"
    saved.write_text(json.dumps(stack_outputs(stack)))
    refused = run("submit", str(jobs), "--outputs-file", str(saved))
    assert refused.exit_code == ExitCode.BAD_INPUT
    assert refused.stderr.startswith(f"invalid: {jobs}:2: text:")
    by_url = ("--queue-url", stack.queue_url, "--bucket", stack.bucket)
    assert run("submit", str(jobs), *by_url).exit_code == ExitCode.BAD_INPUT
    # The flag gives the limit where no output does, for the three commands alike.
    assert run("submit", str(jobs), *by_url, "--max-text-chars", "30000").exit_code == 0


@pytest.mark.parametrize("value", [0, -5, "50000", True, 1.5])
def test_a_malformed_limit_output_is_one_clear_line(value: object) -> None:
    with pytest.raises(StackError, match="maxTextChars is not a positive integer"):
        text_limit({outputs.MAX_TEXT_CHARS: value})
