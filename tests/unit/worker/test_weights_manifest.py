"""weights.json as untrusted input (worker/weights/manifest.py) and the S3 URI of a snapshot
(worker/weights/uri.py): every path stays inside DEST, every size is bounded, and a manifest
that breaks a rule is refused whole with one line naming the entry."""

from __future__ import annotations

import json
from typing import Any

import pytest

from worker.weights.manifest import (
    MAX_FILES,
    MAX_MANIFEST_BYTES,
    MAX_TOTAL_BYTES,
    ManifestError,
    WeightFile,
    parse_manifest,
    safe_path,
)
from worker.weights.uri import S3Location, parse_s3_uri

DIGEST = "ab" * 32


def manifest(*files: Any, **top: Any) -> bytes:
    return json.dumps({"version": 1, "files": list(files), **top}).encode()


def entry(path: Any = "model.safetensors", size: Any = 10, sha256: Any = DIGEST) -> dict:
    return {"path": path, "size": size, "sha256": sha256}


@pytest.mark.parametrize(
    "path",
    [
        "config.json",
        "speech_tokenizer/model.safetensors",
        "a/b/c/d.bin",
        ".gitattributes",  # a dotfile inside DEST is still inside DEST
        "dir.with.dots/..hidden",
        "ünïcode/файл",
    ],
)
def test_paths_inside_dest_are_accepted(path: str) -> None:
    assert safe_path(path) == path


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("../escape", "'..' segment"),
        ("a/../../escape", "'..' segment"),
        ("a/..", "'..' segment"),
        ("..", "'..' segment"),
        ("/etc/passwd", "must be relative"),
        ("//host/share", "must be relative"),
        ("a//b", "empty"),
        ("a/./b", "'.'"),
        (".", "'.'"),
        ("a/", "empty"),
        ("", "non-empty"),
        ("a\\..\\b", "backslash"),
        ("a\x00b", "control character"),
        ("a\nb", "control character"),
        ("x" * 256, "longer than 255 bytes"),
        ("é" * 128, "longer than 255 bytes"),  # 256 bytes in UTF-8
        ("a/" * 600 + "b", "longer than 1024"),
        (".weights-fetch/x.part", "the fetch's own directory"),
        (None, "non-empty string"),
        (7, "non-empty string"),
    ],
)
def test_paths_that_leave_dest_or_hit_its_staging_are_refused(path: Any, rule: str) -> None:
    with pytest.raises(ManifestError, match=rule.replace(".", r"\.").replace("(", r"\(")):
        safe_path(path)


def test_a_valid_manifest_is_read_whole() -> None:
    parsed = parse_manifest(
        manifest(entry("a/b.bin", 5), entry("c.json", 0), model="Org/M", revision="abc")
    )
    assert parsed.files == (WeightFile("a/b.bin", 5, DIGEST), WeightFile("c.json", 0, DIGEST))
    assert (parsed.model, parsed.revision, parsed.total_bytes) == ("Org/M", "abc", 5)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[]", "must be an object"),
        (manifest(entry(), extra=1), "must be an object with keys among"),
        (json.dumps({"version": 2, "files": [entry()]}).encode(), "version must be 1, not 2"),
        (json.dumps({"files": [entry()]}).encode(), "version must be 1, not None"),
        (manifest(), "files must be a list of 1..100000 entries"),
        (json.dumps({"version": 1, "files": {}}).encode(), "files must be a list"),
        (manifest("model.bin"), r"files\[0\]: must be an object"),
        (manifest({"path": "a", "size": 1}), r"files\[0\]: keys must be exactly"),
        (manifest({**entry(), "mode": 0o777}), r"files\[0\]: keys must be exactly"),
        (manifest(entry(size=-1)), "model.safetensors: size -1 must be an integer"),
        (manifest(entry(size=1.5)), "size 1.5 must be an integer"),
        (manifest(entry(size="10")), "size '10' must be an integer"),
        (manifest(entry(size=True)), "size True must be an integer"),
        (manifest(entry(size=MAX_TOTAL_BYTES + 1)), "must be an integer 0.."),
        (manifest(entry(sha256="AB" * 32)), "sha256 must be 64 lowercase hex digits"),
        (manifest(entry(sha256="ab" * 31)), "sha256 must be 64 lowercase hex digits"),
        (manifest(entry(sha256=None)), "sha256 must be 64 lowercase hex digits"),
        (manifest(entry("../x")), r"path '\.\./x'"),
        (manifest(entry("a"), entry("a")), "a: listed twice"),
        (manifest(entry("a"), entry("a/b")), "a: both a file and a directory"),
        (manifest(entry("x/y/z"), entry("x/y")), "x/y: both a file and a directory"),
        (
            manifest(entry("a", MAX_TOTAL_BYTES), entry("b", 1)),
            f"files total {MAX_TOTAL_BYTES + 1} bytes",
        ),
        (manifest(entry(), model=3), "model must be a string"),
    ],
)
def test_a_manifest_breaking_a_rule_is_refused_with_its_reason(raw: bytes, message: str) -> None:
    with pytest.raises(ManifestError, match=message) as error:
        parse_manifest(raw)
    assert "\n" not in str(error.value)


def test_a_manifest_larger_than_the_bound_is_refused_before_parsing() -> None:
    with pytest.raises(ManifestError, match=f"larger than {MAX_MANIFEST_BYTES} bytes"):
        parse_manifest(b" " * (MAX_MANIFEST_BYTES + 1))


def test_more_files_than_the_bound_are_refused() -> None:
    raw = manifest(*(entry(f"f{i}", 0) for i in range(MAX_FILES + 1)))
    with pytest.raises(ManifestError, match=r"files must be a list of 1\.\.100000 entries"):
        parse_manifest(raw)


@pytest.mark.parametrize(
    ("uri", "location"),
    [
        ("s3://bucket-1/weights/Org/M/abc/", S3Location("bucket-1", "weights/Org/M/abc/")),
        ("s3://bucket-1/weights/Org/M/abc", S3Location("bucket-1", "weights/Org/M/abc/")),
        ("s3://my.bucket", S3Location("my.bucket", "")),
        ("s3://my.bucket/", S3Location("my.bucket", "")),
    ],
)
def test_s3_uris_name_a_bucket_and_a_directory_prefix(uri: str, location: S3Location) -> None:
    assert parse_s3_uri(uri) == location
    assert location.key("weights.json") == location.prefix + "weights.json"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("https://bucket/x", "must start with s3://"),
        ("s3://", "is not an S3 bucket name"),
        ("s3://Bucket/x", "is not an S3 bucket name"),
        ("s3://b/x", "is not an S3 bucket name"),
        ("s3://bucket/a//b", "empty, '.' or '..' segment"),
        ("s3://bucket/a/../b", "empty, '.' or '..' segment"),
    ],
)
def test_bad_s3_uris_are_refused(uri: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        parse_s3_uri(uri)
