"""`python -m worker.weights fetch`'s arguments: flags over WEIGHTS_CONNECTIONS and
WEIGHTS_PART_MIB over the defaults, and a bad value or URI exit 2 with one line before any
AWS call (no emulator here: a call would fail differently)."""

from __future__ import annotations

import pytest

from worker.weights.__main__ import _parser, main, options_from
from worker.weights.fetch import DEFAULT_CONNECTIONS, DEFAULT_PART_MIB, MIB, FetchOptions


def options(argv: list[str], env: dict[str, str]) -> FetchOptions:
    return options_from(_parser().parse_args(["fetch", "s3://bucket-1/w/", "/tmp/d", *argv]), env)


def test_defaults() -> None:
    assert options([], {}) == FetchOptions(DEFAULT_CONNECTIONS, DEFAULT_PART_MIB * MIB)
    assert (DEFAULT_CONNECTIONS, DEFAULT_PART_MIB) == (16, 16)


def test_the_environment_over_the_defaults_and_flags_over_both() -> None:
    env = {"WEIGHTS_CONNECTIONS": "32", "WEIGHTS_PART_MIB": "8"}
    assert options([], env) == FetchOptions(32, 8 * MIB)
    assert options(["--connections", "4"], env) == FetchOptions(4, 8 * MIB)
    assert options(["--part-mib", "64"], env) == FetchOptions(32, 64 * MIB)


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (["--connections", "0"], {}, "weights: --connections=0: must be between 1 and 256\n"),
        (
            [],
            {"WEIGHTS_CONNECTIONS": "many"},
            "weights: --connections='many': must be an integer\n",
        ),
        (["--part-mib", "2048"], {}, "weights: --part-mib=2048: must be between 1 and 1024\n"),
    ],
)
def test_a_bad_value_is_exit_2_with_one_line(
    argv: list[str], env: dict[str, str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fetch", "s3://bucket-1/w/", "/tmp/d", *argv], env) == 2
    assert capsys.readouterr().err == line


def test_a_bad_uri_is_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fetch", "https://bucket-1/w/", "/tmp/d"], {}) == 2
    assert capsys.readouterr().err == "weights: 'https://bucket-1/w/': must start with s3://\n"


def test_a_missing_argument_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["fetch", "s3://bucket-1/w/"], {})
    assert stopped.value.code == 2
