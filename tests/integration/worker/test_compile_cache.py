"""vLLM's compile caches saved and restored per GPU type (worker/compile_cache.py) against moto
S3 in process: the first start on a GPU type saves, later ones restore, two first starts write
once, and an archive that reaches out of the cache root is refused."""

from __future__ import annotations

import io
import logging
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from worker.compile_cache import (
    ARCHIVE,
    RESTORED_MARK,
    archive_location,
    cache_uri,
    gpu_name,
    gpu_slug,
    main,
    restore,
    save,
)

BUCKET = "tts-cache-test"
URI = f"s3://{BUCKET}/cache/Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice/0c0e3051/"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def compiled(root: Path, text: str = "kernels") -> None:
    (root / "torch_compile_cache" / "abc").mkdir(parents=True)
    (root / "torch_compile_cache" / "abc" / "graph.bin").write_text(text)
    (root / "triton").mkdir()
    (root / "triton" / "kernel.cubin").write_text("cubin")


def test_the_key_names_model_revision_and_gpu_type() -> None:
    assert gpu_slug("NVIDIA L40S") == "nvidia-l40s"
    assert archive_location(URI, "NVIDIA A10G") == (
        BUCKET,
        f"cache/Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice/0c0e3051/nvidia-a10g/{ARCHIVE}",
    )
    assert archive_location(f"s3://{BUCKET}/c", "L4") == (BUCKET, f"c/l4/{ARCHIVE}")
    with pytest.raises(ValueError, match="not an s3:// URI"):
        archive_location("https://example.com/", "L4")


def test_the_gpu_name_comes_from_nvidia_smi_unless_given() -> None:
    class Answer:
        returncode, stdout = 0, "NVIDIA L4\nNVIDIA L4\n"

    assert gpu_name({}, run=lambda *a, **k: Answer()) == "NVIDIA L4"
    assert gpu_name({"GPU_NAME": "NVIDIA A10G"}, run=lambda *a, **k: Answer()) == "NVIDIA A10G"

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise FileNotFoundError("nvidia-smi")

    assert gpu_name({}, run=missing) == ""


def test_the_first_start_saves_and_the_next_restores(s3: Any, tmp_path: Path) -> None:
    bucket, key = archive_location(URI, "NVIDIA L4")
    first = tmp_path / "first"
    assert restore(s3, bucket, key, first) is False  # nothing saved yet: a miss
    compiled(first)
    assert save(s3, bucket, key, first) is True
    later = tmp_path / "later"
    assert restore(s3, bucket, key, later) is True
    assert (later / "torch_compile_cache" / "abc" / "graph.bin").read_text() == "kernels"
    assert (later / "triton" / "kernel.cubin").read_text() == "cubin"
    assert (later / RESTORED_MARK).read_text() == key
    assert save(s3, bucket, key, later) is False  # restored: nothing new to write
    # Another GPU type has its own archive.
    other = archive_location(URI, "NVIDIA A10G")
    assert restore(s3, *other, tmp_path / "a10g") is False


def test_two_first_starts_write_the_archive_once(s3: Any, tmp_path: Path) -> None:
    bucket, key = archive_location(URI, "NVIDIA L4")
    one, two = tmp_path / "one", tmp_path / "two"
    compiled(one, "one's")
    compiled(two, "two's")
    assert save(s3, bucket, key, one) is True
    assert save(s3, bucket, key, two) is False  # 412: the archive is never replaced
    assert restore(s3, bucket, key, tmp_path / "three") is True
    assert (tmp_path / "three" / "torch_compile_cache" / "abc" / "graph.bin").read_text() == (
        "one's"
    )


def test_an_archive_that_escapes_the_root_is_refused(s3: Any, tmp_path: Path) -> None:
    bucket, key = archive_location(URI, "NVIDIA L4")
    body = io.BytesIO()
    with tarfile.open(fileobj=body, mode="w:") as archive:
        data = b"planted"
        member = tarfile.TarInfo("../outside.txt")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    s3.put_object(Bucket=bucket, Key=key, Body=body.getvalue())
    with pytest.raises(tarfile.OutsideDestinationError):
        restore(s3, bucket, key, tmp_path / "root")
    assert not (tmp_path / "outside.txt").exists()


def test_the_command_never_fails_a_start(
    s3: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "worker.compile_cache")
    env = {"CACHE_URI": URI, "VLLM_CACHE_ROOT": str(tmp_path / "root"), "GPU_NAME": "NVIDIA L4"}
    assert main(["restore"], env) == 0
    assert "no archive yet" in caplog.text
    compiled(tmp_path / "root")
    assert main(["save"], env) == 0
    assert "saved s3://" in caplog.text
    other = {**env, "GPU_NAME": "NVIDIA A10G"}
    s3.put_object(Bucket=BUCKET, Key=archive_location(URI, "NVIDIA A10G")[1], Body=b"not a tar")
    assert main(["restore"], other) == 0
    assert "restore failed, going on without" in caplog.text
    assert main(["restore"], {**env, "CACHE_URI": ""}) == 0  # e.g. a local run
    assert "restore skipped" in caplog.text
    assert main(["bogus"], env) == 2


def test_the_cache_lives_beside_the_weights_unless_told() -> None:
    weights = "s3://b/weights/Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice/0c0e3051/"
    assert cache_uri({"WEIGHTS_URI": weights}) == (
        "s3://b/cache/Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice/0c0e3051/"
    )
    assert cache_uri({"WEIGHTS_URI": weights, "CACHE_URI": "s3://c/x/"}) == "s3://c/x/"
    assert cache_uri({"WEIGHTS_URI": "s3://b/elsewhere/"}) == ""
    assert cache_uri({}) == ""  # baked weights: no cache/ grant, no cache
