"""What `tts-fleet weights upload` takes from a snapshot directory (tts_fleet/client/weights.py):
every file with its size and sha256, through the Hugging Face cache's symlinks, without the
downloader's hidden bookkeeping; and the manifest it writes of them."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tts_fleet.client.weights import WeightsError, manifest_document, snapshot_files


def hub_cache_snapshot(root: Path) -> Path:
    """The layout `snapshot_download` leaves: snapshots/<rev>/<path> -> ../../blobs/<digest>."""
    blobs, snapshot = root / "blobs", root / "snapshots" / "abc123"
    (snapshot / "speech_tokenizer").mkdir(parents=True)
    blobs.mkdir()
    for path, data in {"config.json": b"{}", "speech_tokenizer/model.bin": b"\x00" * 1000}.items():
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        (snapshot / path).symlink_to(Path("../" * (path.count("/") + 2)) / "blobs" / digest)
    (snapshot / ".gitattributes").write_text("*.bin filter=lfs\n")
    (snapshot / ".cache").mkdir()
    (snapshot / ".cache" / "lock").write_text("")
    return snapshot


def test_the_hub_caches_symlinks_are_followed_and_hidden_entries_left_out(tmp_path: Path) -> None:
    files = snapshot_files(hub_cache_snapshot(tmp_path))
    assert [(f.path, f.size, f.sha256) for f in files] == [
        ("config.json", 2, hashlib.sha256(b"{}").hexdigest()),
        ("speech_tokenizer/model.bin", 1000, hashlib.sha256(b"\x00" * 1000).hexdigest()),
    ]


def test_the_manifest_lists_every_file_with_its_size_and_digest(tmp_path: Path) -> None:
    files = snapshot_files(hub_cache_snapshot(tmp_path))
    assert manifest_document(files, "Org/M", "r" * 40) == {
        "version": 1,
        "model": "Org/M",
        "revision": "r" * 40,
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in files],
    }


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: (root / "gone").symlink_to(root / "nowhere"), "not a regular file"),
        (lambda root: (root / "a\\b").write_text("x"), "a name the fetch would refuse"),
        (lambda root: None, "no files"),
    ],
)
def test_a_snapshot_the_fetch_could_not_take_is_refused(
    tmp_path: Path, make: Callable[[Path], object], message: str
) -> None:
    root = tmp_path / "snapshot"
    root.mkdir()
    make(root)
    with pytest.raises(WeightsError, match=message):
        snapshot_files(root)


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="not a directory"):
        snapshot_files(tmp_path / "absent")
