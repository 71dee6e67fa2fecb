"""Every bad input, through the real `tts-fleet` console script: one `Error: …` line on stderr,
no traceback, and the documented exit code (tts_fleet/exit_codes.py: 2 bad input or usage,
3 a missing tool).

The table runs in process through `tts_fleet.cli.main.main`, the console script's own entry
point (it maps every exception to its line and exit code), with the case's environment, working
directory and argv, and no boto3 client left from an earlier call. One case of each kind of
failure (a usage error, a command's bad input, a missing tool) also runs as a subprocess, as a
user runs it."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tts_fleet.cli.main import main
from tts_fleet.client.aws import aws_client
from tts_fleet.exit_codes import ExitCode

BAD, TOOL = ExitCode.BAD_INPUT, ExitCode.MISSING_TOOL

GOOD_STACK = "config:\n  tts-fleet:scaling:\n    maxWorkers: 4\n"
FILES: dict[str, str] = {
    "Pulumi.yaml": "name: tts-fleet\nruntime: python\n",
    "Pulumi.dev.yaml": GOOD_STACK,
    "Pulumi.broken.yaml": "config:\n  tts-fleet:scaling:\n    maxWorkers: [1\n",
    "Pulumi.list.yaml": "- just\n- a list\n",
    "Pulumi.zero.yaml": "config:\n  tts-fleet:scaling:\n    maxWorkers: 0\n",
    "Pulumi.typo.yaml": "config:\n  tts-fleet:scaling:\n    maxWorker: 3\n",
    "Pulumi.text.yaml": "config:\n  tts-fleet:scaling:\n    idleMinutes: soon\n",
    "jobs.jsonl": '{"id": "a", "text": "fine"}\n{"text": "x", "speed": 9}\n',
    "notjson.jsonl": "{nope\n",
    "empty.jsonl": "",
    "long.jsonl": '{"id": "long", "text": "' + "word " * 5000 + '"}\n',
    "trace.csv": "not,a,trace\n",
    "a-file": "x",
}


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    code: int
    says: str  # a phrase the one line must contain
    env: dict[str, str] | None = None
    before: Callable[[Path], object] | None = None


NO_PULUMI = {"PATH": os.path.dirname(sys.executable)}  # this venv's scripts only
NO_AWS = {"AWS_REGION": "", "AWS_DEFAULT_REGION": "", "AWS_ENDPOINT_URL": ""}
# No key in the environment, no files, and no instance metadata to fall back on.
NO_CREDENTIALS = {
    "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_EC2_METADATA_DISABLED": "true",
}  # fmt: skip

CASES = [
    Case("unknown command", ("nosuch",), BAD, "No such command"),
    Case("unknown option", ("submit", "--colour", "x"), BAD, "No such option"),
    Case("threads out of range", ("submit", "--threads", "0", "jobs.jsonl"), BAD, "--threads"),
    Case("submit without a queue", ("submit", "jobs.jsonl"), BAD, "--queue-url"),
    Case(
        "submit a missing file",
        ("submit", "nope.jsonl", "--queue-url", "https://q/x"),
        BAD,
        "no such file",
    ),
    Case(
        "submit invalid lines",
        ("submit", "jobs.jsonl", "--queue-url", "https://q/x"),
        BAD,
        "invalid",
    ),
    Case(
        "submit a line that is not JSON",
        ("submit", "notjson.jsonl", "--queue-url", "https://q/x"),
        BAD,
        "invalid",
    ),
    Case(
        "submit a text over the limit",
        ("submit", "long.jsonl", "--queue-url", "https://q/x", "--max-text-chars", "1000"),
        BAD,
        "invalid",
    ),
    Case(
        "split size below the floor",
        ("submit", "jobs.jsonl", "--split-chars", "10"),
        BAD,
        "--split-chars",
    ),
    Case("wait with no ids", ("wait", "empty.jsonl", "--bucket", "b"), BAD, "no job ids"),
    Case("wait without a bucket", ("wait", "jobs.jsonl"), BAD, "--bucket"),
    Case("wait negative timeout", ("wait", "jobs.jsonl", "--timeout", "-1"), BAD, "--timeout"),
    Case("results without --out", ("results", "--bucket", "b"), BAD, "--out"),
    Case("results into a file", ("results", "--bucket", "b", "--out", "a-file"), BAD, "a-file"),
    Case("status without a queue", ("status",), BAD, "--queue-url"),
    Case(
        "stack outputs without the pulumi CLI",
        ("status", "--stack", "dev"),
        TOOL,
        "pulumi CLI",
        env=NO_PULUMI,
    ),
    Case("dlq list without a queue", ("dlq", "list"), BAD, "--dlq-url"),
    Case("local with nothing to do", ("local",), BAD, "nothing to do"),
    Case(
        "local demo and input", ("local", "--demo", "2", "--input", "jobs.jsonl"), BAD, "not both"
    ),
    Case(
        "local zero workers", ("local", "--demo", "2", "--max-workers", "0"), BAD, "--max-workers"
    ),
    Case(
        "local missing stack file",
        ("local", "--demo", "2", "--stack", "nope"),
        BAD,
        "Pulumi.nope.yaml",
    ),
    Case(
        "local YAML syntax error",
        ("local", "--demo", "2", "--stack", "broken"),
        BAD,
        "Pulumi.broken.yaml:4:1",
    ),
    Case(
        "local stack file that is a list",
        ("local", "--demo", "2", "--stack", "list"),
        BAD,
        "mapping",
    ),
    Case(
        "local bad value",
        ("local", "--demo", "2", "--stack", "zero"),
        BAD,
        "tts-fleet:scaling.maxWorkers",
    ),
    Case("local invalid input", ("local", "--input", "jobs.jsonl"), BAD, "invalid"),
    Case(
        "scaling YAML syntax error", ("scaling", "--stack", "broken"), BAD, "Pulumi.broken.yaml:4:1"
    ),
    Case("scaling missing stack file", ("scaling", "--stack", "nope"), BAD, "Pulumi.nope.yaml"),
    Case("scaling unknown key", ("scaling", "--stack", "typo"), BAD, "did you mean"),
    Case("cost wrong type", ("cost", "--stack", "text"), BAD, "tts-fleet:scaling.idleMinutes"),
    Case("simulate unknown trace", ("simulate", "--trace", "bogus"), BAD, "bogus"),
    Case("simulate bad burst size", ("simulate", "--trace", "burst:abc"), BAD, "burst"),
    Case("simulate a missing CSV", ("simulate", "--trace", "missing.csv"), BAD, "missing.csv"),
    Case(
        "simulate cloudwatch without a queue",
        ("simulate", "--trace", "cloudwatch"),
        BAD,
        "--queue-name",
    ),
    Case(
        "simulate cloudwatch without a region",
        ("simulate", "--trace", "cloudwatch", "--queue-name", "q"),
        BAD,
        "no AWS region",
    ),
    Case(
        "simulate cloudwatch without credentials",
        ("simulate", "--trace", "cloudwatch", "--queue-name", "q"),
        BAD,
        "no AWS credentials",
        env={**NO_CREDENTIALS, "AWS_REGION": "eu-west-1"},
    ),
    Case(
        "status with an unknown profile",
        ("status", "--queue-url", "https://q/x", "--profile", "nosuch"),
        BAD,
        "nosuch",
        env=NO_CREDENTIALS,
    ),
    Case("advise unknown trace", ("advise", "--trace", "bogus"), BAD, "bogus"),
    Case("preflight missing stack file", ("preflight", "--stack", "nope"), BAD, "Pulumi.nope.yaml"),
    Case(
        "preflight without credentials",
        ("preflight", "--stack", "dev"),
        BAD,
        "no AWS credentials",
        env={**NO_CREDENTIALS, "AWS_REGION": "us-east-1"},
    ),
    Case("deploy without a stack", ("deploy", "preview"), BAD, "--stack"),
    Case(
        "deploy a bad --set",
        ("deploy", "preview", "--stack", "dev", "--set", "maxWorkers=3"),
        BAD,
        "scaling.maxWorkers",
    ),
    Case(
        "deploy without the pulumi CLI",
        ("deploy", "preview", "--stack", "dev"),
        TOOL,
        "Pulumi CLI",
        env=NO_PULUMI,
    ),
]


def _busy_port_case() -> Case:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    _HELD.append(holder)
    return Case("speech server on a busy port", ("speech-server", "--port", str(port)), BAD,
                f"port {port}")  # fmt: skip


_HELD: list[socket.socket] = []


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project")
    for name, text in FILES.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def clean_env(case: Case) -> dict[str, str]:
    """This environment without the tool's own and AWS's variables, then the case's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TTS_FLEET_", "AWS_"))}
    return {**env, **NO_AWS, **(case.env or {})}


def run_in_process(
    project: Path, case: Case, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """`main()` as the console script calls it: its exit code and its stderr."""
    env = clean_env(case)
    for key in list(os.environ):
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "argv", ["tts-fleet", *case.argv])
    aws_client.cache_clear()  # a fresh process has no client with earlier credentials
    with pytest.raises(SystemExit) as exited:
        main()
    code = exited.value.code
    assert isinstance(code, int), code
    return code, capsys.readouterr().err


def assert_one_error_line(case: Case, code: int, stderr: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1, stderr  # exactly one error line (invalid lines may precede)
    assert lines[-1] == errors[0], stderr  # and it is the last word
    assert case.says in errors[0], errors[0]
    assert code == case.code, stderr


@pytest.mark.parametrize("case", [*CASES, _busy_port_case()], ids=lambda case: case.name)
def test_a_bad_input_is_one_error_line_with_its_exit_code(
    project: Path, case: Case, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_one_error_line(case, *run_in_process(project, case, monkeypatch, capsys))


def test_the_table_covers_every_command() -> None:
    from tts_fleet.cli.main import cli

    covered = {case.argv[0] for case in [*CASES, _busy_port_case()]}
    assert set(cli.commands) <= covered
    assert len(CASES) + 1 >= 30
