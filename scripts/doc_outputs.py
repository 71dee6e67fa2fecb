"""The command outputs quoted in docs/*.md, rerun and compared with the code's.

A fenced block that shows what `tts-fleet simulate`, `advise`, `cost` or `scaling` prints is
introduced by a marker line naming the command, as the config-keys table is by its markers:

    <!-- output: tts-fleet scaling --stack prod -->
    ```
    $ tts-fleet scaling --stack prod
    prod: minWorkers 0, maxWorkers 40, ...
    ```

The block is the command's stdout, optionally after a `$ ` prompt line, which must then
name the marker's command. Each command runs in process (click's test runner) from the
repository root, so `--stack S` reads the checked-in stack files; these commands are
deterministic and read nothing else. A plot (`--plot`) is a file, not quoted output, so the
marker names the command without it.

    python scripts/doc_outputs.py --check   # exit 1 naming every stale block
    python scripts/doc_outputs.py --write   # rewrite the stale blocks
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

# The commands whose output depends only on the code and the stack files.
RERUNNABLE = frozenset({"simulate", "advise", "cost", "scaling"})
MARKER = re.compile(r"^<!-- output: (tts-fleet .+?) -->$")
FENCE = re.compile(r"^(```|~~~)")
PROMPT = "$ "
# Wide enough that no line is wrapped for a narrow terminal (the tests use the same).
ENV_COLUMNS = "120"


@dataclass(frozen=True)
class Block:
    """One quoted output: the marker's command and the lines of its fenced block."""

    path: str  # relative to the root, e.g. "docs/scaling.md"
    line: int  # the marker's line number (1-based)
    command: str  # "tts-fleet scaling --stack prod"
    first: int  # index of the block's first body line in the file's lines
    body: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}: {self.command}"


def doc_paths(root: Path) -> list[Path]:
    return sorted((root / "docs").glob("*.md"))


def blocks(root: Path, path: Path) -> list[Block]:
    """Every marked block in one file; a marker not followed by a fenced block is an error."""
    lines = path.read_text().split("\n")
    rel = path.relative_to(root).as_posix()
    found: list[Block] = []
    for index, line in enumerate(lines):
        match = MARKER.match(line)
        if match is None:
            continue
        where = f"{rel}:{index + 1}"
        command = match.group(1)
        words = shlex.split(command)
        if len(words) < 2 or words[1] not in RERUNNABLE:
            raise ValueError(f"{where}: {command!r} is not one of tts-fleet {sorted(RERUNNABLE)}")
        if index + 1 >= len(lines) or not FENCE.match(lines[index + 1]):
            raise ValueError(f"{where}: the marker is not followed by a fenced block")
        end = next((j for j in range(index + 2, len(lines)) if FENCE.match(lines[j])), None)
        if end is None:
            raise ValueError(f"{where}: the fenced block is not closed")
        found.append(Block(rel, index + 1, command, index + 2, tuple(lines[index + 2 : end])))
    return found


def unmarked(root: Path) -> list[str]:
    """Fenced blocks that open with a rerunnable command's prompt line (`$ tts-fleet cost`)
    but have no marker, so no check would see them go stale."""
    found: list[str] = []
    for path in doc_paths(root):
        lines = path.read_text().split("\n")
        opening = False  # the next fence line opens a block
        for index, line in enumerate(lines):
            if not FENCE.match(line):
                continue
            opening = not opening
            quoted = opening and index + 1 < len(lines) and _quotes_a_rerun(lines[index + 1])
            if quoted and (index == 0 or not MARKER.match(lines[index - 1])):
                found.append(f"{path.relative_to(root).as_posix()}:{index + 2}")
    return found


def _quotes_a_rerun(line: str) -> bool:
    words = line.removeprefix(PROMPT).split() if line.startswith(PROMPT) else []
    return len(words) > 1 and words[0] == "tts-fleet" and words[1] in RERUNNABLE


def all_blocks(root: Path) -> list[Block]:
    return [block for path in doc_paths(root) for block in blocks(root, path)]


def run(command: str, root: Path) -> str:
    """The command's stdout, run in process from `root`; a failure is an error."""
    from tts_fleet.cli.main import cli

    # Settings from the caller's shell must not leak into the docs' outputs.
    env: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith(("TTS_FLEET_", "AWS_"))
    }
    env["COLUMNS"] = ENV_COLUMNS
    with contextlib.chdir(root):
        result = CliRunner().invoke(cli, shlex.split(command)[1:], env=env)
    if result.exit_code != 0:
        raise RuntimeError(f"{command} exited {result.exit_code}: {result.output[-1000:]}")
    return result.stdout


def expected(block: Block, root: Path) -> tuple[str, ...]:
    """What the block should hold: the prompt line if it has one, then the output."""
    output = tuple(run(block.command, root).rstrip("\n").split("\n"))
    if block.body and block.body[0].startswith(PROMPT):
        return (PROMPT + block.command, *output)
    return output


def stale(root: Path) -> list[Block]:
    """The blocks whose text differs from what their command prints today."""
    return [block for block in all_blocks(root) if block.body != expected(block, root)]


def write(root: Path) -> list[Block]:
    """Rewrites every stale block in place; returns them."""
    changed = stale(root)
    for rel in sorted({block.path for block in changed}):
        path = root / rel
        lines = path.read_text().split("\n")
        # Bottom up, so an earlier block's new length does not move a later one.
        for block in sorted((b for b in changed if b.path == rel), key=lambda b: -b.first):
            end = block.first + len(block.body)
            lines[block.first : end] = expected(block, root)
        path.write_text("\n".join(lines))
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/doc_outputs.py")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite the stale blocks")
    action.add_argument("--check", action="store_true", help="exit 1 when a block is stale")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository root")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if args.write:
        for block in write(root):
            print(f"rewrote {block.where}")
        return 0
    outdated = stale(root)
    for block in outdated:
        print(f"{block.where}: stale; run python scripts/doc_outputs.py --write")
    missing = unmarked(root)
    for where in missing:
        print(f"{where}: a quoted command output without an <!-- output: ... --> marker")
    return 1 if outdated or missing else 0


if __name__ == "__main__":
    sys.exit(main())
