"""Model snapshots for the weights tests: a directory of random files, uploaded to the
emulator by the real uploader (tts_fleet/client/weights.py), and what DEST holds after."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from tts_fleet.client.weights import snapshot_files, upload_snapshot
from worker.settings import weights_prefix

MODEL = "Org/Tiny-TTS"
REVISION = "0123456789abcdef0123456789abcdef01234567"
BUCKET = "tts-weights-test"


def make_snapshot(root: Path, sizes: dict[str, int], seed: int = 7) -> dict[str, bytes]:
    """Files of the given sizes under `root` (random bytes, reproducible); their contents."""
    rng = random.Random(seed)
    contents = {}
    for path, size in sizes.items():
        data = rng.randbytes(size)
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        contents[path] = data
    return contents


def upload(s3: Any, root: Path, bucket: str = BUCKET) -> str:
    """The snapshot under `root` in `bucket` (created), as the S3 URI the fetch takes."""
    s3.create_bucket(Bucket=bucket)
    upload_snapshot(s3, bucket, MODEL, REVISION, snapshot_files(root))
    return f"s3://{bucket}/{weights_prefix(MODEL, REVISION)}"


def key_of(path: str) -> str:
    return weights_prefix(MODEL, REVISION) + path


def files_in(dest: Path) -> dict[str, bytes]:
    """Every file under `dest` but the fetch's own staging directory, by relative path."""
    return {
        p.relative_to(dest).as_posix(): p.read_bytes()
        for p in sorted(dest.rglob("*"))
        if p.is_file() and ".weights-fetch" not in p.relative_to(dest).parts
    }
