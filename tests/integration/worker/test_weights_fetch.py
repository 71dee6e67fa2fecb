"""`python -m worker.weights fetch` against the emulator (moto over HTTP), in process.

The snapshot is written by the real uploader (`tts-fleet weights upload`'s client), so these
also hold the two sides of weights.json together. What the tests look at is DEST on disk, the
exit code and the stderr line: a corrupted object fails naming the file and leaves nothing at
its final name; a complete copy is kept as it is (same inode: not downloaded and renamed
again); an interrupted fetch resumes with only the parts it had not written.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.lib.weights_snapshot import BUCKET, files_in, key_of, make_snapshot, upload
from worker.weights.__main__ import main
from worker.weights.fetch import FetchOptions, fetch
from worker.weights.uri import parse_s3_uri

KIB = 1024
SIZES = {
    "config.json": 300,
    "model.safetensors": 700 * KIB,  # 11 parts of 64 KiB
    "speech_tokenizer/model.safetensors": 200 * KIB,
    "speech_tokenizer/config.json": 120,
    "empty.txt": 0,
}
OPTIONS = ["--connections", "4", "--part-mib", "1"]
SMALL_PARTS = FetchOptions(connections=4, part_bytes=64 * KIB)


@pytest.fixture
def snapshot(tmp_path: Path, s3: Any) -> tuple[str, dict[str, bytes]]:
    contents = make_snapshot(tmp_path / "snapshot", SIZES)
    return upload(s3, tmp_path / "snapshot"), contents


def run(uri: str, dest: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["fetch", uri, str(dest), *OPTIONS, *extra])
    return code, capsys.readouterr().err


class CountingS3:
    """The emulator's client, counting the ranged GETs per key (the client, not the fetch,
    is what is wrapped); `fail_after` GETs, it raises as a dropped connection would."""

    def __init__(self, s3: Any, fail_after: int | None = None) -> None:
        self.s3, self.fail_after = s3, fail_after
        self.gets: list[tuple[str, str]] = []

    def get_object(self, **kwargs: Any) -> Any:
        if self.fail_after is not None and len(self.gets) >= self.fail_after:
            raise ConnectionResetError("dropped")
        self.gets.append((kwargs["Key"], kwargs.get("Range", "")))
        return self.s3.get_object(**kwargs)


def test_every_file_arrives_verified(
    snapshot: tuple[str, dict[str, bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, contents = snapshot
    dest = tmp_path / "dest"
    code, err = run(uri, dest, capsys)
    assert code == 0, err
    assert files_in(dest) == contents
    assert not (dest / ".weights-fetch").exists()  # staging removed once all is in place
    assert err.count("\n") == 1 and "0 already there, 5 fetched" in err


def test_json_report_counts_what_was_fetched(
    snapshot: tuple[str, dict[str, bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, contents = snapshot
    code = main(["fetch", uri, str(tmp_path / "dest"), *OPTIONS, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (report["files"], report["fetched_files"], report["reused_files"]) == (5, 5, 0)
    assert report["fetched_bytes"] == report["bytes"] == sum(map(len, contents.values()))


def test_a_complete_copy_is_used_without_a_download(
    snapshot: tuple[str, dict[str, bytes]], s3: Any, tmp_path: Path
) -> None:
    uri, contents = snapshot
    dest = tmp_path / "dest"
    fetch(s3, parse_s3_uri(uri), dest, SMALL_PARTS)
    inodes = {p: os.stat(dest / p).st_ino for p in contents}
    counting = CountingS3(s3)
    report = fetch(counting, parse_s3_uri(uri), dest, SMALL_PARTS)
    assert counting.gets == [(key_of("weights.json"), counting.gets[0][1])]  # the manifest only
    assert {p: os.stat(dest / p).st_ino for p in contents} == inodes
    assert (report.reused_files, report.fetched_files, report.fetched_bytes) == (5, 0, 0)


def test_a_wrong_or_missing_file_on_disk_is_fetched_again_alone(
    snapshot: tuple[str, dict[str, bytes]], s3: Any, tmp_path: Path
) -> None:
    uri, contents = snapshot
    dest = tmp_path / "dest"
    fetch(s3, parse_s3_uri(uri), dest, SMALL_PARTS)
    (dest / "config.json").write_bytes(b"x" * SIZES["config.json"])  # same size, wrong bytes
    (dest / "speech_tokenizer/config.json").unlink()
    counting = CountingS3(s3)
    fetch(counting, parse_s3_uri(uri), dest, SMALL_PARTS)
    fetched = {key for key, _ in counting.gets} - {key_of("weights.json")}
    assert fetched == {key_of("config.json"), key_of("speech_tokenizer/config.json")}
    assert files_in(dest) == contents


@pytest.mark.parametrize(
    "replacement",
    [
        pytest.param(lambda data: bytes(b ^ 0xFF for b in data[:10]) + data[10:], id="flipped"),
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
    ],
)
def test_a_corrupted_object_fails_with_one_line_naming_the_file(
    snapshot: tuple[str, dict[str, bytes]],
    s3: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    replacement: Any,
) -> None:
    uri, contents = snapshot
    path = "speech_tokenizer/model.safetensors"
    s3.put_object(Bucket=BUCKET, Key=key_of(path), Body=replacement(contents[path]))
    dest = tmp_path / "dest"
    code, err = run(uri, dest, capsys)
    assert code == 4
    [line] = err.splitlines()
    assert line.startswith(f"weights: {path}: ")
    assert not (dest / path).exists()
    # Whatever else made it is whole: nothing partial is ever at a final name.
    assert all(contents[p] == data for p, data in files_in(dest).items())


def test_an_interrupted_fetch_resumes_with_the_parts_it_had_not_written(
    snapshot: tuple[str, dict[str, bytes]], s3: Any, tmp_path: Path
) -> None:
    uri, contents = snapshot
    dest = tmp_path / "dest"
    options = FetchOptions(connections=1, part_bytes=64 * KIB)  # one GET at a time: in order
    first = CountingS3(s3, fail_after=6)  # the manifest, then 5 parts, then the link drops
    with pytest.raises(Exception, match="dropped"):
        fetch(first, parse_s3_uri(uri), dest, options)
    done_before = first.gets[1:]
    second = CountingS3(s3)
    fetch(second, parse_s3_uri(uri), dest, options)
    again = [get for get in second.gets[1:] if get in done_before]
    assert again == []  # not one part fetched twice
    parts = sum(-(-size // (64 * KIB)) for size in SIZES.values())  # 1 + 11 + 4 + 1 + 0
    assert len(done_before) + len(second.gets[1:]) == parts == 17
    assert files_in(dest) == contents


def test_no_manifest_is_exit_3_with_one_line(
    s3: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s3.create_bucket(Bucket=BUCKET)
    code, err = run(f"s3://{BUCKET}/weights/none/", tmp_path / "dest", capsys)
    assert code == 3
    assert err == (
        f"weights: s3://{BUCKET}/weights/none/weights.json: not found "
        "(upload it with `tts-fleet weights upload`)\n"
    )


def put_manifest(s3: Any, files: list[dict[str, Any]]) -> str:
    s3.create_bucket(Bucket=BUCKET)
    body = json.dumps({"version": 1, "files": files})
    s3.put_object(Bucket=BUCKET, Key="evil/weights.json", Body=body)
    return f"s3://{BUCKET}/evil/"


@pytest.mark.parametrize("path", ["../escape.bin", "/etc/escape.bin", "a/../../escape.bin"])
def test_a_manifest_path_outside_dest_writes_nothing(
    s3: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str
) -> None:
    digest = hashlib.sha256(b"boo").hexdigest()
    uri = put_manifest(s3, [{"path": path, "size": 3, "sha256": digest}])
    dest = tmp_path / "inner" / "dest"
    code, err = run(uri, dest, capsys)
    assert code == 3
    assert path in err and err.count("\n") == 1
    assert not dest.exists() and sorted(tmp_path.rglob("*")) == []


def test_a_symlink_inside_dest_is_not_written_through(
    snapshot: tuple[str, dict[str, bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, _ = snapshot
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (dest / "speech_tokenizer").symlink_to(outside)
    code, err = run(uri, dest, capsys)
    assert code == 5
    assert "speech_tokenizer: a symlink inside DEST" in err and err.count("\n") == 1
    assert list(outside.iterdir()) == []
