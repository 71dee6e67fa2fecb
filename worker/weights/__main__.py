"""`python -m worker.weights fetch S3_URI DEST [--connections N] [--part-mib M] [--json]`

Makes DEST hold every file that `S3_URI/weights.json` lists, each verified against its size
and sha256, before vLLM starts (worker/entrypoint.sh runs it when WEIGHTS_URI is set).
Files already in DEST and intact are kept without a download; the rest are fetched with
parallel ranged GETs into DEST/.weights-fetch and renamed into place once verified, so a
file at its final name is always complete. A rerun after a kill fetches only what is
missing or wrong (and, of a half-fetched file, only the parts not yet written).

Options (each also read from the environment; a flag wins):
  --connections N   WEIGHTS_CONNECTIONS   parallel GETs (1..256, default 16)
  --part-mib M      WEIGHTS_PART_MIB      size of one ranged GET in MiB (1..1024, default 16)
  --json            print the report as one JSON object on stdout
AWS settings come from the standard variables (AWS_REGION, AWS_ENDPOINT_URL, credentials).

Progress and errors go to stderr, one line each. Exit codes:
  0  DEST holds the whole snapshot, verified
  2  bad arguments or environment
  3  weights.json missing or invalid (an unsafe path, a size out of bounds, bad JSON)
  4  an object does not match weights.json (size or sha256): the line names the file
  5  S3 or DEST failed (access denied, network after retries, no space, a symlink in DEST)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from worker.weights.fetch import (
    DEFAULT_CONNECTIONS,
    DEFAULT_PART_MIB,
    MIB,
    FetchError,
    FetchOptions,
    FetchReport,
    fetch,
)
from worker.weights.uri import S3Location, parse_s3_uri

EXIT_OK = 0
EXIT_USAGE = 2
CONNECTIONS_ENV = "WEIGHTS_CONNECTIONS"
PART_MIB_ENV = "WEIGHTS_PART_MIB"
MAX_CONNECTIONS = 256
MAX_PART_MIB = 1024


class UsageError(ValueError):
    pass


def _bounded(name: str, raw: str, high: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r}: must be an integer") from None
    if not 1 <= value <= high:
        raise UsageError(f"{name}={value}: must be between 1 and {high}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m worker.weights", add_help=True)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("fetch", help="fetch and verify a snapshot into DEST")
    run.add_argument("uri", metavar="S3_URI")
    run.add_argument("dest", metavar="DEST", type=Path)
    run.add_argument("--connections")
    run.add_argument("--part-mib")
    run.add_argument("--json", action="store_true")
    return parser


def options_from(args: argparse.Namespace, env: Mapping[str, str]) -> FetchOptions:
    """Flags first, then the environment, then the defaults."""
    connections = args.connections or env.get(CONNECTIONS_ENV, "").strip()
    part_mib = args.part_mib or env.get(PART_MIB_ENV, "").strip()
    return FetchOptions(
        connections=_bounded("--connections", connections, MAX_CONNECTIONS)
        if connections
        else DEFAULT_CONNECTIONS,
        part_bytes=(
            _bounded("--part-mib", part_mib, MAX_PART_MIB) if part_mib else DEFAULT_PART_MIB
        )
        * MIB,
    )


def s3_client(connections: int, env: Mapping[str, str]) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        max_pool_connections=connections + 2,
        retries={"mode": "standard", "max_attempts": 5},
        connect_timeout=10,
        read_timeout=60,
    )
    # botocore reads AWS_DEFAULT_REGION only; ECS and the worker's contract name AWS_REGION.
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
    return boto3.client("s3", region_name=region, config=config)


def _summary(where: S3Location, dest: Path, report: FetchReport) -> str:
    return (
        f"weights: {report.files} files, {report.bytes / 1e9:.2f} GB from {where} in {dest}: "
        f"{report.reused_files} already there, {report.fetched_files} fetched "
        f"({report.fetched_bytes / 1e9:.2f} GB downloaded) in {report.seconds:.1f}s"
    )


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    environ = os.environ if env is None else env
    args = _parser().parse_args(argv)  # exits 2 on bad arguments, like the errors below
    try:
        where = parse_s3_uri(args.uri)
        options = options_from(args, environ)
    except ValueError as error:
        print(f"weights: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = fetch(s3_client(options.connections, environ), where, args.dest, options)
    except FetchError as error:
        print(f"weights: {error}", file=sys.stderr)
        return error.exit_code
    print(_summary(where, args.dest, report), file=sys.stderr)
    if args.json:
        print(json.dumps(asdict(report)))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
