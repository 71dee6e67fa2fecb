"""A model snapshot into a stack's bucket, with its weights.json (`tts-fleet weights upload`).

The snapshot comes from a local directory (`--from`), or from the Hugging Face Hub through
`huggingface_hub.snapshot_download` (its cache directory, whose files are symlinks into the
cache's blobs: they are followed). Hidden entries (`.cache/`, `.git*`, `.huggingface/`) are
the downloader's bookkeeping, not the model's, and are left out.

Every file goes to `weights/<model>/<revision>/<path>` (worker.settings.weights_prefix) with
its sha256 as object metadata; files larger than one part go up as multipart uploads of
PART_BYTES. An object already there with the same size and digest is not sent again, so a
second run after a failure resumes. weights.json (version 1: every file's path, size and
sha256; read by worker/weights/manifest.py, which the contract test feeds it to) is written
last: a fetch that finds it finds every file it lists.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.settings import WEIGHTS_MANIFEST, weights_prefix

MANIFEST_VERSION = 1
MIB = 1024 * 1024
# Multipart parts of 16 MiB: the fetch's default range size, so its GETs align with the parts
# (S3 performance guidelines, "Use byte-range fetches").
PART_BYTES = 16 * MIB
DIGEST_METADATA = "sha256"  # x-amz-meta-sha256
HASH_CHUNK = 4 * MIB
DEFAULT_CONNECTIONS = 8
PARTS_IN_FLIGHT_PER_FILE = 4  # × connections files stays within the shared client's pool


class WeightsError(Exception):
    """The snapshot cannot be read or uploaded; `str(error)` is one line."""


@dataclass(frozen=True)
class SnapshotFile:
    path: str  # relative, "/"-separated
    source: Path
    size: int
    sha256: str


@dataclass
class UploadReport:
    bucket: str
    prefix: str
    model: str
    revision: str
    files: int = 0
    bytes: int = 0
    uploaded_files: int = 0
    uploaded_bytes: int = 0
    skipped: list[str] = field(default_factory=list)  # already there, same size and digest

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _relative_paths(root: Path) -> list[tuple[str, Path]]:
    found = []
    for directory, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            source = Path(directory) / name
            relative = source.relative_to(root).as_posix()
            if "\\" in relative or any(ord(c) < 32 for c in relative):
                raise WeightsError(f"{source}: a name the fetch would refuse")
            if not source.is_file():
                raise WeightsError(f"{source}: not a regular file (a broken symlink?)")
            found.append((relative, source))
    return found


def snapshot_files(root: Path, threads: int = DEFAULT_CONNECTIONS) -> list[SnapshotFile]:
    """Every file under `root` (hidden entries left out) with its size and sha256."""
    if not root.is_dir():
        raise WeightsError(f"{root}: not a directory")
    paths = _relative_paths(root)
    if not paths:
        raise WeightsError(f"{root}: no files")

    def describe(item: tuple[str, Path]) -> SnapshotFile:
        relative, source = item
        return SnapshotFile(relative, source, source.stat().st_size, sha256_file(source))

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(describe, paths))


def manifest_document(files: list[SnapshotFile], model: str, revision: str) -> dict[str, Any]:
    return {
        "version": MANIFEST_VERSION,
        "model": model,
        "revision": revision,
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in files],
    }


def _already_there(s3: Any, bucket: str, key: str, entry: SnapshotFile) -> bool:
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except Exception as error:
        code = getattr(error, "response", {}).get("Error", {}).get("Code", "")
        if code in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    same_size = head.get("ContentLength") == entry.size
    return bool(same_size and head.get("Metadata", {}).get(DIGEST_METADATA) == entry.sha256)


def upload_snapshot(
    s3: Any,
    bucket: str,
    model: str,
    revision: str,
    files: list[SnapshotFile],
    *,
    connections: int = DEFAULT_CONNECTIONS,
    progress: Callable[[int], None] | None = None,
) -> UploadReport:
    """Every file, then weights.json, under `weights/<model>/<revision>/` of `bucket`.
    `progress` is called with the size of each file once it is there."""
    from boto3.s3.transfer import TransferConfig

    prefix = weights_prefix(model, revision)
    report = UploadReport(bucket, prefix, model, revision, len(files), sum(f.size for f in files))
    transfer = TransferConfig(
        multipart_threshold=PART_BYTES,
        multipart_chunksize=PART_BYTES,
        max_concurrency=PARTS_IN_FLIGHT_PER_FILE,
    )
    lock = threading.Lock()

    def send(entry: SnapshotFile) -> None:
        key = prefix + entry.path
        if _already_there(s3, bucket, key, entry):
            with lock:
                report.skipped.append(entry.path)
        else:
            s3.upload_file(
                str(entry.source),
                bucket,
                key,
                ExtraArgs={"Metadata": {DIGEST_METADATA: entry.sha256}},
                Config=transfer,
            )
            with lock:
                report.uploaded_files += 1
                report.uploaded_bytes += entry.size
        if progress is not None:
            progress(entry.size)

    with ThreadPoolExecutor(connections) as pool:
        list(pool.map(send, files))  # re-raises the first failure
    document = manifest_document(files, model, revision)
    s3.put_object(
        Bucket=bucket,
        Key=prefix + WEIGHTS_MANIFEST,
        Body=json.dumps(document, indent=1).encode(),
        ContentType="application/json",
    )
    return report


def hub_snapshot(model: str, revision: str) -> Path:
    """The model at `revision` from the Hugging Face Hub, in the local Hub cache."""
    try:
        # Optional: only this path needs it (mypy sees no stubs for an absent package).
        hub = importlib.import_module("huggingface_hub")
    except ImportError:
        raise WeightsError(
            "huggingface_hub is not installed: `pip install 'tts-fleet[hub]'`, or pass "
            "--from DIR with a downloaded snapshot"
        ) from None
    try:
        return Path(hub.snapshot_download(model, revision=revision))
    except Exception as error:  # offline, gated, unknown revision: one line
        raise WeightsError(f"{model}@{revision} from the Hugging Face Hub: {error}") from None
