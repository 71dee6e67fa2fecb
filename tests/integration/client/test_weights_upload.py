"""`tts-fleet weights upload` against the emulator: the snapshot and its weights.json under
weights/<model>/<revision>/, large files in multipart, a rerun sending nothing twice, and the
manifest the fetch reads back into the same files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from tests.lib.weights_snapshot import files_in, make_snapshot
from tts_fleet.cli.main import cli
from worker.weights.fetch import FetchOptions, fetch
from worker.weights.uri import parse_s3_uri

BUCKET = "tts-weights-upload"
MODEL, REVISION = "Org/Small-TTS", "fedcba9876543210fedcba9876543210fedcba98"
PREFIX = f"weights/{MODEL}/{REVISION}/"
MIB = 1024 * 1024
SIZES = {
    "config.json": 321,
    "model.safetensors": 17 * MIB,  # over one 16 MiB part: a multipart upload
    "speech_tokenizer/config.json": 99,
}


@pytest.fixture
def s3(aws_env: dict[str, str]) -> Any:
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def snapshot(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path / "snapshot"
    contents = make_snapshot(root, SIZES)
    (root / ".cache" / "huggingface").mkdir(parents=True)  # a downloader's bookkeeping
    (root / ".cache" / "huggingface" / "download.lock").write_text("x")
    (root / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    return root, contents


def upload(root: Path, *extra: str) -> Any:
    args = ["weights", "upload", "--bucket", BUCKET, "--model", MODEL, "--revision", REVISION]
    return CliRunner().invoke(cli, [*args, "--from", str(root), *extra], catch_exceptions=False)


def test_the_snapshot_and_its_manifest_land_under_model_and_revision(
    s3: Any, snapshot: tuple[Path, dict[str, bytes]]
) -> None:
    root, contents = snapshot
    result = upload(root)
    assert result.exit_code == 0, result.output
    assert result.output == (
        f"uploaded s3://{BUCKET}/{PREFIX}: 3 files, 0.02 GB (3 sent, 0 already there); "
        "deploy with --set worker.weights=s3\n"
    )
    listed = s3.list_objects_v2(Bucket=BUCKET)["Contents"]
    assert sorted(o["Key"] for o in listed) == sorted(
        [PREFIX + p for p in SIZES] + [PREFIX + "weights.json"]
    )
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=PREFIX + "weights.json")["Body"].read())
    assert manifest == {
        "version": 1,
        "model": MODEL,
        "revision": REVISION,
        "files": [
            {"path": p, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for p, data in sorted(contents.items())
        ],
    }
    big = s3.head_object(Bucket=BUCKET, Key=PREFIX + "model.safetensors")
    assert big["ETag"].strip('"').endswith("-2")  # two parts: a multipart upload
    assert big["Metadata"] == {"sha256": hashlib.sha256(contents["model.safetensors"]).hexdigest()}


def test_a_rerun_sends_nothing_already_there_and_replaces_what_changed(
    s3: Any, snapshot: tuple[Path, dict[str, bytes]]
) -> None:
    root, _ = snapshot
    assert upload(root).exit_code == 0
    (root / "config.json").write_text('{"changed": true}')
    report = json.loads(upload(root, "--json").output)
    assert (report["uploaded_files"], sorted(report["skipped"])) == (
        1,
        ["model.safetensors", "speech_tokenizer/config.json"],
    )
    body = s3.get_object(Bucket=BUCKET, Key=PREFIX + "config.json")["Body"].read()
    assert body == b'{"changed": true}'


def test_the_fetch_reads_the_upload_back_into_the_same_files(
    s3: Any, snapshot: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    root, contents = snapshot
    assert upload(root).exit_code == 0
    where = parse_s3_uri(f"s3://{BUCKET}/{PREFIX}")
    fetch(s3, where, tmp_path / "dest", FetchOptions(connections=4, part_bytes=4 * MIB))
    assert files_in(tmp_path / "dest") == contents


def test_another_model_without_its_revision_is_refused_before_any_upload(
    s3: Any, snapshot: tuple[Path, dict[str, bytes]]
) -> None:
    root, _ = snapshot
    args = ["weights", "upload", "--bucket", BUCKET, "--model", MODEL, "--from", str(root)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "tts-fleet:worker.modelRevision: is the default model's commit" in result.output
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)


def test_no_bucket_is_a_usage_error_naming_the_ways_to_give_one(
    aws_env: dict[str, str], snapshot: tuple[Path, dict[str, bytes]], monkeypatch: Any
) -> None:
    monkeypatch.delenv("TTS_FLEET_BUCKET", raising=False)
    root, _ = snapshot
    args = ["weights", "upload", "--model", MODEL, "--revision", REVISION, "--from", str(root)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "no bucket: pass --bucket, set TTS_FLEET_BUCKET, or --stack S" in result.output
