"""`weights.json`: what a model snapshot in S3 holds, read as untrusted input.

The uploader (`tts-fleet weights upload`) writes it beside the snapshot's files; the fetch
trusts nothing in it that it has not checked here. Every path must name a file strictly
inside the destination (no absolute path, no `..`, no empty or `.` segment, no backslash or
control character, no path that is both a file and another's directory), every size must be
a non-negative integer within the bounds below, every digest 64 lowercase hex digits, and the
whole document small. A manifest that breaks any rule is refused as a whole, with one line
naming the entry.

    {"version": 1, "model": "Qwen/…", "revision": "0c0e…",
     "files": [{"path": "config.json", "size": 4096, "sha256": "…"}, …]}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

MANIFEST_VERSION = 1
# A 100,000-file manifest is about 15 MB of JSON; no model snapshot comes near that.
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_FILES = 100_000
# The largest S3 object is 5 TiB (S3 user guide, "Uploading objects"); a TTS snapshot is a few
# GB. One bound for a single file and the whole snapshot keeps a hostile manifest from asking
# for more disk than any model needs; the fetch also checks the free space before it starts.
MAX_TOTAL_BYTES = 1024**4  # 1 TiB
# Linux NAME_MAX and a conservative PATH_MAX share for the part under DEST.
MAX_SEGMENT_BYTES = 255
MAX_PATH_CHARS = 1024
# The fetch's own working directory inside DEST (worker/weights/disk.py): no file may go there.
STAGING_DIR = ".weights-fetch"

_SHA256 = re.compile(r"[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")
_FILE_KEYS = {"path", "size", "sha256"}
_TOP_KEYS = {"version", "model", "revision", "files"}


class ManifestError(ValueError):
    """weights.json is unusable; `str(error)` is one line naming the entry and the rule."""


@dataclass(frozen=True)
class WeightFile:
    path: str  # relative, "/"-separated, checked by `safe_path`
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    files: tuple[WeightFile, ...]
    model: str = ""
    revision: str = ""

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def safe_path(path: object) -> str:
    """`path` when it names a file strictly inside a directory, else ManifestError."""
    if not isinstance(path, str) or not path:
        raise ManifestError(f"path {path!r}: must be a non-empty string")
    if len(path) > MAX_PATH_CHARS:
        raise ManifestError(f"path {path[:60]!r}…: longer than {MAX_PATH_CHARS} characters")
    if path.startswith("/"):
        raise ManifestError(f"path {path!r}: must be relative")
    if _CONTROL.search(path):
        raise ManifestError(f"path {path!r}: control character or backslash")
    segments = path.split("/")
    for segment in segments:
        if segment in ("", ".", ".."):
            raise ManifestError(f"path {path!r}: empty, '.' or '..' segment")
        if len(segment.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
            raise ManifestError(f"path {path!r}: a segment longer than {MAX_SEGMENT_BYTES} bytes")
    if segments[0] == STAGING_DIR:
        raise ManifestError(f"path {path!r}: {STAGING_DIR}/ is the fetch's own directory")
    return path


def _file(index: int, entry: object) -> WeightFile:
    if not isinstance(entry, dict):
        raise ManifestError(f"files[{index}]: must be an object")
    if set(entry) != _FILE_KEYS:
        raise ManifestError(f"files[{index}]: keys must be exactly {sorted(_FILE_KEYS)}")
    path = safe_path(entry["path"])
    size, digest = entry["size"], entry["sha256"]
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_TOTAL_BYTES:
        raise ManifestError(f"{path}: size {size!r} must be an integer 0..{MAX_TOTAL_BYTES}")
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise ManifestError(f"{path}: sha256 must be 64 lowercase hex digits")
    return WeightFile(path, size, digest)


def _no_overlaps(files: list[WeightFile]) -> None:
    seen: set[str] = set()
    for f in files:
        if f.path in seen:
            raise ManifestError(f"{f.path}: listed twice")
        seen.add(f.path)
    directories = {f.path.rsplit("/", 1)[0] for f in files if "/" in f.path}
    parents = {d[:i] for d in directories for i in range(len(d)) if d[i] == "/"} | directories
    clash = sorted(seen & parents)
    if clash:
        raise ManifestError(f"{clash[0]}: both a file and a directory")


def parse_manifest(raw: bytes) -> Manifest:
    """The manifest in `raw`, checked whole; ManifestError with one line otherwise."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        document: Any = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as error:
        raise ManifestError(f"not JSON: {error}") from None
    if not isinstance(document, dict) or not set(document) <= _TOP_KEYS:
        raise ManifestError(f"must be an object with keys among {sorted(_TOP_KEYS)}")
    if document.get("version") != MANIFEST_VERSION:
        raise ManifestError(f"version must be {MANIFEST_VERSION}, not {document.get('version')!r}")
    entries = document.get("files")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_FILES:
        raise ManifestError(f"files must be a list of 1..{MAX_FILES} entries")
    files = [_file(i, entry) for i, entry in enumerate(entries)]
    _no_overlaps(files)
    total = sum(f.size for f in files)
    if total > MAX_TOTAL_BYTES:
        raise ManifestError(f"files total {total} bytes, more than {MAX_TOTAL_BYTES}")
    labels = {k: document.get(k, "") for k in ("model", "revision")}
    for key, value in labels.items():
        if not isinstance(value, str) or len(value) > MAX_PATH_CHARS:
            raise ManifestError(f"{key} must be a string")
    return Manifest(tuple(files), labels["model"], labels["revision"])
