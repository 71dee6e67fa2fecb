"""The weights fetch's speed-up with connections, against moto behind a per-connection
throttle (as S3 serves each connection at a bounded rate).

    .venv/bin/python benchmarks/weights_fetch.py [--size-mib 1024] [--rate-mib 4] [--connections 8]

A snapshot of many files (a few large shards, many mid-size ones, small configs; `--size-mib`
in all) is uploaded to the emulator by `tts-fleet weights upload`'s client, then fetched
twice by `python -m worker.weights fetch` as its own process, through a ThrottleProxy that
serves each connection at `--rate-mib` MiB/s: once with 1 connection, once with
`--connections`, each into an empty directory. Both fetches verify every file against
weights.json; the benchmark then hashes every fetched file again against the snapshot. It
prints one JSON object: both times, the speed-up and the goal (speed-up >= 0.7 × N), and
exits 1 when the goal is missed or a file differs. moto and the proxy run in this process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3

from tts_fleet.client.weights import snapshot_files, upload_snapshot
from tts_fleet.local.emulator import Emulator, emulator_env
from tts_fleet.local.throttle import ThrottleProxy
from worker.settings import weights_prefix

MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]
BUCKET = "tts-weights-bench"
MODEL, REVISION = "Bench/Snapshot", "0" * 40
GOAL = 0.7  # the bar: N connections at least 0.7 × N times faster than one


def layout(total_mib: int) -> dict[str, int]:
    """A snapshot shaped like a TTS model's: half in 64 MiB shards, half in 16 MiB files (a
    codec, embeddings), plus small JSON; `total_mib` MiB in all."""
    shards = total_mib // 2 // 64
    mids = (total_mib - 64 * shards) // 16
    sizes = {f"model-{i:03d}-of-{shards:03d}.safetensors": 64 * MIB for i in range(shards)}
    sizes |= {f"speech_tokenizer/part-{i:03d}.safetensors": 16 * MIB for i in range(mids)}
    sizes |= {f"{name}.json": 2_000 + 97 * i for i, name in enumerate(("config", "tokenizer"))}
    return sizes


def write_snapshot(root: Path, sizes: dict[str, int]) -> dict[str, str]:
    """Random files (seeded) under root; their sha256 by path."""
    rng, digests = random.Random(24), {}
    for path, size in sizes.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(size)
        target.write_bytes(data)
        digests[path] = hashlib.sha256(data).hexdigest()
    return digests


def timed_fetch(uri: str, dest: Path, connections: int, env: dict[str, str]) -> dict[str, Any]:
    argv = [sys.executable, "-m", "worker.weights", "fetch", uri, str(dest), "--json"]
    argv += ["--connections", str(connections)]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"fetch with {connections} connection(s) failed: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    return {"connections": connections, "seconds": round(seconds, 1), "files": report["files"]}


def differing(dest: Path, digests: dict[str, str]) -> list[str]:
    bad = []
    for path, digest in digests.items():
        with (dest / path).open("rb") as handle:
            if hashlib.file_digest(handle, "sha256").hexdigest() != digest:
                bad.append(path)
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rate-mib", type=float, default=4.0, help="per connection, MiB/s")
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tts-weights-bench-"))
    emulator = Emulator()
    try:
        endpoint = emulator.start()
        os.environ.update(emulator_env(endpoint))
        sizes = layout(args.size_mib)
        digests = write_snapshot(work / "snapshot", sizes)
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        upload_snapshot(s3, BUCKET, MODEL, REVISION, snapshot_files(work / "snapshot"))
        uri = f"s3://{BUCKET}/{weights_prefix(MODEL, REVISION)}"
        shutil.rmtree(work / "snapshot")
        with ThrottleProxy(endpoint, bytes_per_second=args.rate_mib * MIB) as proxy:
            env = {**os.environ, "AWS_ENDPOINT_URL": proxy.url}
            runs = []
            for connections in (1, args.connections):
                dest = work / f"dest-{connections}"
                runs.append(timed_fetch(uri, dest, connections, env))
                runs[-1]["differing_files"] = differing(dest, digests)
                shutil.rmtree(dest)
        speedup = runs[0]["seconds"] / runs[1]["seconds"]
        result = {
            "bytes": sum(sizes.values()),
            "files": len(sizes),
            "rate_mib_per_connection": args.rate_mib,
            "runs": runs,
            "speedup": round(speedup, 2),
            "goal": round(GOAL * args.connections, 2),
            "met": speedup >= GOAL * args.connections
            and not any(r["differing_files"] for r in runs),
        }
        print(json.dumps(result, indent=1))
        return 0 if result["met"] else 1
    finally:
        emulator.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
