"""The parallel fetch: every file of a snapshot's weights.json from S3 into DEST, verified.

`connections` threads share one S3 client (clients are thread-safe; its pool holds that many
connections). Every file missing or wrong in DEST is cut into parts of `part_bytes`, and each
part is one ranged GET streamed straight to its offset in the file's staging copy
(worker/weights/disk.py), so many files and the parts of one large file download at once: S3
serves each connection at a bounded rate, and the aggregate grows with the connections (S3
performance guidelines, "Use byte-range fetches": typical range sizes are 8 or 16 MB,
https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/use-byte-range-fetches.html).

When a file's last part lands, the thread that wrote it hashes the staged copy; a match is
renamed into place, a mismatch is the object's fault unless the file was resumed from an
earlier run, in which case it is fetched again once from scratch. The first error stops
every thread and is raised; the staging copies stay for the next run.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.settings import WEIGHTS_MANIFEST
from worker.weights.disk import DiskError, Staging, intact, sha256_of
from worker.weights.manifest import (
    MAX_MANIFEST_BYTES,
    Manifest,
    ManifestError,
    WeightFile,
    parse_manifest,
)
from worker.weights.uri import S3Location

MIB = 1024 * 1024
DEFAULT_CONNECTIONS = 16
DEFAULT_PART_MIB = 16
STREAM_CHUNK = 1 * MIB
# A part whose body breaks off mid-stream (a reset, a read timeout) is asked for again this
# many times in all; botocore's own retries cover the request, not the streamed body.
PART_ATTEMPTS = 4


class _Stopped(Exception):
    """Another part failed: this one gives up without recording anything."""


class FetchError(Exception):
    """The fetch failed; `str(error)` is one line, `exit_code` says which way."""

    exit_code = 5  # S3 or DEST


class BadManifest(FetchError):
    exit_code = 3


class CorruptObject(FetchError):
    """An object's bytes are not what weights.json says; names the file."""

    exit_code = 4


@dataclass(frozen=True)
class FetchOptions:
    connections: int = DEFAULT_CONNECTIONS
    part_bytes: int = DEFAULT_PART_MIB * MIB


@dataclass
class FetchReport:
    files: int = 0
    bytes: int = 0
    reused_files: int = 0
    fetched_files: int = 0
    fetched_bytes: int = 0  # bytes downloaded by this run (resumed parts not counted)
    seconds: float = 0.0
    fetched_paths: list[str] = field(default_factory=list)


def read_manifest(s3: Any, where: S3Location) -> Manifest:
    key = where.key(WEIGHTS_MANIFEST)
    try:
        response = s3.get_object(
            Bucket=where.bucket, Key=key, Range=f"bytes=0-{MAX_MANIFEST_BYTES}"
        )
        raw = response["Body"].read()
    except Exception as error:
        code = _error_code(error)
        if code in ("NoSuchKey", "404", "NoSuchBucket"):
            raise BadManifest(
                f"s3://{where.bucket}/{key}: not found (upload it with `tts-fleet weights upload`)"
            ) from None
        raise FetchError(f"s3://{where.bucket}/{key}: {_describe(error)}") from None
    try:
        return parse_manifest(raw)
    except ManifestError as error:
        raise BadManifest(f"s3://{where.bucket}/{key}: {error}") from None


def _error_code(error: Exception) -> str:
    response = getattr(error, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _describe(error: Exception) -> str:
    code = _error_code(error)
    return f"{code}: {error}" if code and code not in str(error) else str(error) or repr(error)


class _File:
    """One file being fetched: its open staging copy and the parts still to come."""

    def __init__(self, entry: WeightFile, fd: int, todo: list[int], resumed: bool) -> None:
        self.entry = entry
        self.fd = fd
        self.remaining = len(todo)
        self.todo = todo
        self.resumed = resumed
        self.lock = threading.Lock()


class Fetcher:
    def __init__(self, s3: Any, where: S3Location, dest: Path, options: FetchOptions) -> None:
        self.s3 = s3
        self.where = where
        self.staging = Staging(dest)
        self.options = options
        self.failed = threading.Event()
        self.report = FetchReport()
        self._counter = threading.Lock()

    def run(self, manifest: Manifest) -> FetchReport:
        started = time.monotonic()
        self.report.files, self.report.bytes = len(manifest.files), manifest.total_bytes
        with self.staging.locked(), ThreadPoolExecutor(self.options.connections) as pool:
            present = list(pool.map(lambda e: intact(self.staging.dest, e), manifest.files))
            missing = [e for e, ok in zip(manifest.files, present, strict=True) if not ok]
            self.report.reused_files = len(manifest.files) - len(missing)
            self._check_space(missing)
            files = [self._open(entry) for entry in missing]
            try:
                self._download(pool, files)
            finally:
                for f in files:
                    os.close(f.fd)
        self.staging.clear()
        self.report.fetched_files = len(missing)
        self.report.fetched_paths = [e.path for e in missing]
        self.report.seconds = time.monotonic() - started
        return self.report

    def _check_space(self, missing: list[WeightFile]) -> None:
        needed = sum(e.size - min(e.size, self.staging.staged_bytes(e)) for e in missing)
        free = self.staging.free_bytes()
        if needed > free:
            raise FetchError(
                f"{self.staging.dest}: {needed} bytes still to fetch, only {free} free"
            )

    def _parts(self, entry: WeightFile) -> int:
        return -(-entry.size // self.options.part_bytes)

    def _open(self, entry: WeightFile) -> _File:
        done = self.staging.done_parts(entry, self.options.part_bytes)
        todo = [i for i in range(self._parts(entry)) if i not in done]
        return _File(entry, self.staging.open_part(entry), todo, resumed=bool(done))

    def _download(self, pool: ThreadPoolExecutor, files: list[_File]) -> None:
        futures = [pool.submit(self._finish, f) for f in files if not f.todo]
        futures += [pool.submit(self._part, f, i) for f in files for i in f.todo]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        errors = [e for e in (f.exception() for f in done) if isinstance(e, Exception)]
        if errors:
            self.failed.set()
            wait(futures)
            first = next((e for e in errors if isinstance(e, CorruptObject)), errors[0])
            raise first if isinstance(first, FetchError) else FetchError(_describe(first))

    def _part(self, f: _File, index: int) -> None:
        if self.failed.is_set():
            return
        start = index * self.options.part_bytes
        end = min(f.entry.size, start + self.options.part_bytes) - 1
        for attempt in range(1, PART_ATTEMPTS + 1):
            try:
                self._get_range(f, start, end)
                break
            except _Stopped:
                return
            except (CorruptObject, DiskError):
                raise
            except Exception as error:
                if attempt == PART_ATTEMPTS or self.failed.is_set():
                    raise FetchError(
                        f"{f.entry.path}: bytes {start}-{end}: {_describe(error)}"
                    ) from None
                time.sleep(0.2 * attempt)
        self.staging.record(f.entry, index)
        with f.lock:
            f.remaining -= 1
            last = f.remaining == 0
        if last:
            self._finish(f)

    def _get_range(self, f: _File, start: int, end: int) -> None:
        key = self.where.key(f.entry.path)
        try:
            response = self.s3.get_object(
                Bucket=self.where.bucket, Key=key, Range=f"bytes={start}-{end}"
            )
        except Exception as error:
            if _error_code(error) in ("NoSuchKey", "404", "InvalidRange", "416"):
                raise CorruptObject(
                    f"{f.entry.path}: s3://{self.where.bucket}/{key} is missing or shorter "
                    f"than weights.json's {f.entry.size} bytes"
                ) from None
            raise
        total = str(response.get("ContentRange", "")).rpartition("/")[2]
        if total != str(f.entry.size):
            raise CorruptObject(
                f"{f.entry.path}: s3://{self.where.bucket}/{key} is {total or '?'} bytes, "
                f"weights.json says {f.entry.size}"
            )
        body, offset = response["Body"], start
        try:
            while offset <= end:
                if self.failed.is_set():
                    raise _Stopped
                chunk = body.read(min(STREAM_CHUNK, end + 1 - offset))
                if not chunk:
                    raise ConnectionError(f"body ended at byte {offset}")
                os.pwrite(f.fd, chunk, offset)
                offset += len(chunk)
        finally:
            body.close()
        with self._counter:
            self.report.fetched_bytes += end + 1 - start

    def _finish(self, f: _File) -> None:
        """Every part is on disk: verify the whole file, then put it in place."""
        if self.failed.is_set():
            return
        got = sha256_of(f.fd, f.entry.size)
        if got == f.entry.sha256:
            self.staging.place(f.entry)
            return
        self.staging.discard(f.entry)
        if f.resumed:
            # The earlier run's parts may be stale (the object changed, or a part was cut
            # short by the kill): fetch the whole file again, once, before blaming the object.
            fresh = self._open(f.entry)
            os.close(f.fd)
            f.fd, f.todo, f.remaining, f.resumed = fresh.fd, fresh.todo, len(fresh.todo), False
            for index in list(f.todo):
                self._part(f, index)
            if not f.todo:
                self._finish(f)
            return
        raise CorruptObject(
            f"{f.entry.path}: sha256 {got[:16]}… does not match weights.json's "
            f"{f.entry.sha256[:16]}…"
        )


def fetch(s3: Any, where: S3Location, dest: Path, options: FetchOptions) -> FetchReport:
    """DEST holds every file of the snapshot at `where`, verified; raises FetchError."""
    manifest = read_manifest(s3, where)
    try:
        return Fetcher(s3, where, dest, options).run(manifest)
    except DiskError as error:
        raise FetchError(str(error)) from None
    except OSError as error:
        raise FetchError(f"{dest}: {error}") from None
