"""Every exit code the `tts-fleet` command uses, in one table (documented in docs/cli.md).

Kept at the package root, not under `cli/`, because the deploy driver (a library layer below
the command line) reports its outcome as one of these codes too.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # jobs failed, or the work is incomplete (Pulumi reported an error, drift)
    BAD_INPUT = 2  # usage error, bad flag, bad stack config or job file (click uses 2 too)
    MISSING_TOOL = 3  # a required tool is missing (the Pulumi CLI)
    TIMED_OUT = 4  # `wait` gave up with jobs still pending
    INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for Ctrl-C


def table() -> list[tuple[int, str]]:
    """(code, meaning) rows for help text and docs."""
    meanings = {
        ExitCode.OK: "ok",
        ExitCode.FAILED: "jobs failed or work incomplete",
        ExitCode.BAD_INPUT: "usage error or bad input",
        ExitCode.MISSING_TOOL: "a required tool is missing (Pulumi CLI)",
        ExitCode.TIMED_OUT: "timed out",
        ExitCode.INTERRUPTED: "interrupted",
    }
    return [(int(code), meanings[code]) for code in ExitCode]
