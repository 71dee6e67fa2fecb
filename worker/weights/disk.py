"""DEST on disk: which files are already there and intact, the staging area where downloads
grow, and the rename that puts a verified file at its final name.

No partial file is ever at a final name: a download is written to
`DEST/.weights-fetch/<key>.part` and renamed into place only after its sha256 matched. A
journal beside it (`<key>.parts`: a JSON header naming the file, size, digest and part size,
then one finished part index per line) lets a rerun after a kill fetch only the parts that
were not written; a header that does not match the manifest entry starts the file over.

Nothing here follows a symlink inside DEST: a component in the way that is a symlink (or a
file where a directory belongs) stops the fetch rather than letting a write land outside.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from worker.weights.manifest import STAGING_DIR, WeightFile

HASH_CHUNK = 4 * 1024 * 1024


class DiskError(OSError):
    """DEST cannot hold the snapshot; `str(error)` is one line."""


def sha256_of(fd: int, size: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(HASH_CHUNK, size - offset), offset)
        if not chunk:
            break
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def _no_symlink_dirs(dest: Path, path: str, *, create: bool) -> Path:
    """DEST/path's parent, every component a real directory (created when `create`)."""
    current = dest
    for segment in path.split("/")[:-1]:
        current = current / segment
        if current.is_symlink():
            raise DiskError(f"{current}: a symlink inside DEST; refusing to write through it")
        if not current.exists():
            if not create:
                return current
            current.mkdir()
        elif not current.is_dir():
            raise DiskError(f"{current}: a file where {path} needs a directory")
    return current


def intact(dest: Path, entry: WeightFile) -> bool:
    """Whether DEST holds `entry` at its final name, as a regular file of the right size and
    digest (read without following a symlink)."""
    parent = _no_symlink_dirs(dest, entry.path, create=False)
    if not parent.is_dir():
        return False
    try:
        fd = os.open(dest / entry.path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not (info.st_mode & 0o170000 == 0o100000 and info.st_size == entry.size):
            return False
        return sha256_of(fd, entry.size) == entry.sha256
    finally:
        os.close(fd)


class Staging:
    """DEST/.weights-fetch: one fetch at a time (an flock), the parts of unfinished files."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.root = dest / STAGING_DIR

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.dest.mkdir(parents=True, exist_ok=True)
        if self.root.is_symlink():
            raise DiskError(f"{self.root}: a symlink; refusing to stage through it")
        self.root.mkdir(exist_ok=True)
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DiskError(f"{self.dest}: another fetch is writing here") from None
            yield
        finally:
            os.close(fd)

    def key(self, entry: WeightFile) -> str:
        return hashlib.sha256(entry.path.encode()).hexdigest()[:40]

    def part_path(self, entry: WeightFile) -> Path:
        return self.root / f"{self.key(entry)}.part"

    def journal_path(self, entry: WeightFile) -> Path:
        return self.root / f"{self.key(entry)}.parts"

    def done_parts(self, entry: WeightFile, part_bytes: int) -> set[int]:
        """The parts of `entry` a previous run finished with the same part size, or none."""
        header = {"path": entry.path, "size": entry.size, "sha256": entry.sha256}
        header["part_bytes"] = part_bytes
        try:
            lines = self.journal_path(entry).read_text().splitlines()
            size = os.lstat(self.part_path(entry)).st_size
        except (OSError, UnicodeDecodeError):
            lines, size = [], -1
        try:
            matches = bool(lines) and json.loads(lines[0]) == header and size == entry.size
            done = {int(line) for line in lines[1:] if line.strip()} if matches else set()
        except ValueError:
            matches, done = False, set()
        if not matches:
            self.discard(entry)
            self.journal_path(entry).write_text(json.dumps(header) + "\n")
        return done

    def open_part(self, entry: WeightFile) -> int:
        fd = os.open(self.part_path(entry), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        os.ftruncate(fd, entry.size)
        return fd

    def record(self, entry: WeightFile, index: int) -> None:
        """Part `index` is on disk (called after its bytes were written)."""
        with open(self.journal_path(entry), "a") as journal:
            journal.write(f"{index}\n")

    def staged_bytes(self, entry: WeightFile) -> int:
        try:
            return os.lstat(self.part_path(entry)).st_blocks * 512
        except OSError:
            return 0

    def discard(self, entry: WeightFile) -> None:
        for path in (self.part_path(entry), self.journal_path(entry)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def place(self, entry: WeightFile) -> None:
        """Rename the verified part to DEST/path (replacing whatever was there, never
        following it), then drop its journal."""
        _no_symlink_dirs(self.dest, entry.path, create=True)
        final = self.dest / entry.path
        if final.is_dir() and not final.is_symlink():
            raise DiskError(f"{final}: a directory where {entry.path} goes")
        os.replace(self.part_path(entry), final)
        with contextlib.suppress(FileNotFoundError):
            self.journal_path(entry).unlink()

    def clear(self) -> None:
        """The staging directory removed, once every file is in place."""
        shutil.rmtree(self.root, ignore_errors=True)

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.dest).free
