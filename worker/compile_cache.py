"""vLLM's compile caches kept in S3 per model, revision and GPU type (issue 24), so only the
first healthy start on a GPU type pays for torch.compile, Inductor and Triton.

`python -m worker.compile_cache restore|save`, run by worker/entrypoint.sh:

- `restore` before `vllm serve`: downloads `<CACHE_URI><gpu>/vllm-cache.tar` and unpacks it
  into VLLM_CACHE_ROOT (vLLM's root for `torch_compile_cache/`; TRITON_CACHE_DIR is set
  beneath it by the entrypoint, as vLLM's AOT path leaves Triton's default). No archive yet
  is a miss, not an error.
- `save` after the first healthy start on a GPU type that had no archive: packs the root
  and writes it with `If-None-Match: *`, so of two first workers one writes and the other's
  412 is a success; an archive is never replaced, only written once.

The key carries the GPU's name (`nvidia-smi`; GPU_NAME overrides it), because compiled
kernels are specific to the GPU architecture; the model and revision are in CACHE_URI
(`s3://<bucket>/cache/<model>/<revision>/`), which is WEIGHTS_URI's snapshot location with
`cache/` for `weights/` unless set: the task role may read and write `cache/*` exactly when
the weights come from S3 (`worker.weights: s3`, components/service_policies.py). CUDA graphs
themselves are captured again at every start; what is cached is what produces them.
https://docs.vllm.ai/en/latest/design/torch_compile.html

The archive is untrusted input (anyone who may write `cache/` chose its bytes): members are
unpacked with tarfile's `data` filter, which refuses absolute paths, `..`, links out of the
root and device files. Exit 0 whatever happens: a cache is an optimisation, never a reason
for a task not to start.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from worker.settings import CACHE_PREFIX, WEIGHTS_PREFIX, WEIGHTS_URI_ENV

log = logging.getLogger("worker.compile_cache")

CACHE_URI_ENV = "CACHE_URI"
CACHE_ROOT_ENV = "VLLM_CACHE_ROOT"
GPU_NAME_ENV = "GPU_NAME"
ARCHIVE = "vllm-cache.tar"
# A restore that found an archive leaves this file, so `save` knows the root is not new.
RESTORED_MARK = ".restored-from-s3"
_SLUG = re.compile(r"[^a-z0-9]+")


def gpu_slug(name: str) -> str:
    """`NVIDIA L4` → `nvidia-l4`: one S3 path segment per GPU type."""
    return _SLUG.sub("-", name.lower()).strip("-")


def gpu_name(environ: Mapping[str, str], run: Callable[..., Any] = subprocess.run) -> str:
    """GPU_NAME, else the first GPU `nvidia-smi` names; empty when neither answers."""
    if environ.get(GPU_NAME_ENV):
        return environ[GPU_NAME_ENV]
    try:
        answer = run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = answer.stdout.strip().splitlines() if answer.returncode == 0 else []
    return lines[0].strip() if lines else ""


def cache_uri(environ: Mapping[str, str]) -> str:
    """CACHE_URI, else `s3://<bucket>/cache/<model>/<revision>/` beside WEIGHTS_URI's
    `weights/<model>/<revision>/`; empty when neither says where."""
    if environ.get(CACHE_URI_ENV):
        return environ[CACHE_URI_ENV]
    weights = environ.get(WEIGHTS_URI_ENV, "")
    bucket, _, key = weights.removeprefix("s3://").partition("/")
    if not weights.startswith("s3://") or not key.startswith(WEIGHTS_PREFIX):
        return ""
    return f"s3://{bucket}/{CACHE_PREFIX}{key.removeprefix(WEIGHTS_PREFIX)}"


def archive_location(cache_uri: str, gpu: str) -> tuple[str, str]:
    """(bucket, key) of the archive for this GPU under `s3://bucket/prefix/`."""
    if not cache_uri.startswith("s3://"):
        raise ValueError(f"{CACHE_URI_ENV}={cache_uri!r} is not an s3:// URI")
    bucket, _, prefix = cache_uri[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"{CACHE_URI_ENV}={cache_uri!r} names no bucket")
    prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    return bucket, f"{prefix}{gpu_slug(gpu)}/{ARCHIVE}"


def restore(s3: Any, bucket: str, key: str, root: Path) -> bool:
    """Unpacks the archive into `root`; False when there is none."""
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as spool:
        try:
            s3.download_fileobj(bucket, key, spool)
        except Exception as error:
            if _not_found(error):
                return False
            raise
        spool.seek(0)
        with tarfile.open(fileobj=spool, mode="r:") as archive:
            archive.extractall(root, filter="data")
    (root / RESTORED_MARK).write_text(key)
    return True


def save(s3: Any, bucket: str, key: str, root: Path) -> bool:
    """Packs `root` and writes it once; False when there is nothing new to save (the root
    came from S3, or is empty) or another worker wrote the archive first."""
    if (root / RESTORED_MARK).exists() or not root.is_dir() or not any(root.iterdir()):
        return False
    with tempfile.TemporaryFile() as spool:
        with tarfile.open(fileobj=spool, mode="w:") as archive:
            for path in sorted(root.iterdir()):
                archive.add(path, arcname=path.name)
        spool.seek(0)
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=spool, IfNoneMatch="*")
        except Exception as error:
            if _status(error) == 412:  # a peer on the same GPU type saved first
                return False
            raise
    return True


def _status(error: Exception) -> int | None:
    response = getattr(error, "response", None) or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _not_found(error: Exception) -> bool:
    response = getattr(error, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound") or _status(error) == 404


def main(argv: list[str], environ: Mapping[str, str] = os.environ) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    if len(argv) != 1 or argv[0] not in ("restore", "save"):
        log.error("usage: python -m worker.compile_cache restore|save")
        return 2
    action = argv[0]
    uri, root = cache_uri(environ), environ.get(CACHE_ROOT_ENV, "")
    gpu = gpu_name(environ)
    if not (uri and root and gpu):
        log.info(
            "%s skipped: %s, %s and a GPU name are needed", action, CACHE_URI_ENV, CACHE_ROOT_ENV
        )
        return 0
    started = time.monotonic()
    try:
        import boto3

        bucket, key = archive_location(uri, gpu)
        s3 = boto3.client("s3", region_name=environ.get("AWS_REGION") or None)
        done = (restore if action == "restore" else save)(s3, bucket, key, Path(root))
    except Exception as error:  # never a reason not to start: log it and go on
        log.warning("%s failed, going on without: %s", action, error)
        return 0
    what = {"restore": ("restored", "no archive yet"), "save": ("saved", "nothing new to save")}
    log.info(
        "%s s3://%s/%s in %.1fs",
        what[action][0] if done else what[action][1],
        bucket,
        key,
        time.monotonic() - started,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
