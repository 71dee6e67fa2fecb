"""The documentation's example commands, run as written (like a doc test).

Every `tts-fleet …` line in a fenced block of README.md and docs/*.md is collected. The cheap
ones run for real from a copy of the project (the stack files are read from it): the
policy tools (`scaling`, `simulate`, `advise`, `cost`) and the `local` runs, with a `--demo`
of at most DEMO_JOBS jobs (every option as written; the count only makes the run longer: a
`--demo 200` took most of a minute). Commands that need
a deployed stack, a running fleet or the Pulumi CLI are checked for the command and options
they name (`--help` appended: click rejects an unknown command or option before printing help).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCRIPT = Path(sys.executable).with_name("tts-fleet")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
_COMMAND = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?(tts-fleet(?: .*)?)$")
RUN_AS_WRITTEN = {"scaling", "simulate", "advise", "cost", "local"}
LOCAL_TIMEOUT_S = 240
DEMO_JOBS = 6
JOBS = '{"id": "doc-1", "text": "Hello from the docs."}\n{"id": "doc-2", "text": "And again."}\n'


def documented_commands() -> list[tuple[str, str]]:
    """(where, command line) for every example, without its trailing comment or redirect:
    the lines of fenced blocks (only the `$ ` lines where a block mixes in output) and
    inline `tts-fleet …` spans without placeholders."""
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        where = doc.relative_to(ROOT).as_posix()
        for block in _FENCE.findall(text):
            # A command continued over lines (`\` at the end) is one command.
            lines = [line.strip() for line in block.replace("\\\n", " ").splitlines()]
            if any(line.startswith("$ ") for line in lines):
                lines = [line for line in lines if line.startswith("$ ")]
            found += [(where, _clean(m.group(1))) for m in map(_COMMAND.match, lines) if m]
        prose = _FENCE.sub("", text)
        for span in _INLINE.findall(prose):
            if not _PLACEHOLDER.search(span) and len(span.split()) > 1:
                found.append((where, _clean(span.removeprefix(".venv/bin/"))))
    first: dict[str, str] = {}
    for where, command in found:
        first.setdefault(command, where)
    return sorted((where, command) for command, where in first.items())


def _clean(command: str) -> str:
    return " ".join(command.split(" # ")[0].split(" > ")[0].split())


_INLINE = re.compile(r"`((?:\.venv/bin/)?tts-fleet [^`]+)`")
_PLACEHOLDER = re.compile(r"[<>…/|]|\.\.\.|\b[A-Z]+\b")  # <TRACE>, S, N, COMMAND, list/redrive


_STACK_HEREDOC = re.compile(r"^cat > (Pulumi\.[\w-]+\.yaml) <<'YAML'\n(.*?)^YAML$", re.M | re.S)
COMMANDS = documented_commands()


def _argv(command: str) -> list[str]:
    words = shlex.split(command)[1:]
    return [str(SCRIPT) if SCRIPT.exists() else sys.executable, *([] if SCRIPT.exists() else
            ["-m", "tts_fleet"]), *words]  # fmt: skip


def _runs_as_written(command: str) -> bool:
    words = shlex.split(command)[1:]
    if len(words) < 2 or words[0] not in RUN_AS_WRITTEN:
        return False  # a bare `tts-fleet local` in prose names the command, it is no example
    # A long-lived fleet or a live CloudWatch trace is not a doc test.
    return "--keep-running" not in words and "cloudwatch" not in words


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stack files beside a jobs file, as in a checkout after `make demo`."""
    root = tmp_path_factory.mktemp("docs")
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml", "Pulumi.prod.yaml"):
        shutil.copy(ROOT / name, root / name)
    (root / "jobs.jsonl").write_text(JOBS, encoding="utf-8")
    # Stack files the docs write themselves before using them (`cat > Pulumi.S.yaml <<'YAML'`).
    for doc in DOCS:
        for name, body in _STACK_HEREDOC.findall(doc.read_text(encoding="utf-8")):
            (root / name).write_text(body, encoding="utf-8")
    (root / "docs").mkdir()  # the docs' --plot examples write there
    return root


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TTS_FLEET_", "AWS_"))}
    return {**env, "COLUMNS": "120"}


def test_the_docs_have_examples_of_every_kind() -> None:
    kinds = {shlex.split(command)[1] for _, command in COMMANDS if len(command.split()) > 1}
    assert {"local", "scaling", "submit", "deploy"} <= kinds
    assert sum(_runs_as_written(command) for _, command in COMMANDS) >= 5


@pytest.mark.timeout(LOCAL_TIMEOUT_S + 60)
@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[c for _, c in COMMANDS])
def test_a_documented_command_runs_as_written(project: Path, where: str, command: str) -> None:
    if _runs_as_written(command):
        argv = _argv(command)
        if "--demo" in argv:
            at = argv.index("--demo") + 1
            argv[at] = str(min(int(argv[at]), DEMO_JOBS))
        done = subprocess.run(
            argv, cwd=project, env=_env(), capture_output=True, text=True,
            timeout=LOCAL_TIMEOUT_S,
        )  # fmt: skip
        assert done.returncode == 0, f"{where}: {command}\n{done.stderr[-1500:]}"
        return
    done = subprocess.run(
        [*_argv(command), "--help"], cwd=project, env=_env(), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, f"{where}: {command}: {done.stderr.strip()}"
    assert "Usage:" in done.stdout
