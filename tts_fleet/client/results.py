"""Which jobs are done or failed (manifests and failure records) and downloading their outputs."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.client.aws import Target
from worker.jobs import FAILURES_PREFIX, OUTPUTS_PREFIX, FailureRecord, failure_key


def list_keys(s3: Any, bucket: str, prefix: str) -> Iterator[dict[str, Any]]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Contents", [])


def _ids_with_json(s3: Any, bucket: str, prefix: str) -> set[str]:
    return {
        item["Key"][len(prefix) : -len(".json")]
        for item in list_keys(s3, bucket, prefix)
        if item["Key"].endswith(".json")
    }


def outcomes(
    s3: Any, target: Target, ids: Sequence[str], known_failures: dict[str, str] | None = None
) -> tuple[set[str], dict[str, str]]:
    """(done ids, failed id -> error) among `ids`. A manifest wins over a failure record, since
    a redriven job that then succeeds leaves its old failure record behind."""
    wanted = set(ids)
    done = wanted & _ids_with_json(s3, target.bucket, f"{target.prefix}{OUTPUTS_PREFIX}")
    failures = f"{target.prefix}{FAILURES_PREFIX}"
    failed_ids = (wanted - done) & _ids_with_json(s3, target.bucket, failures)
    cache = known_failures if known_failures is not None else {}
    for job_id in failed_ids - cache.keys():
        cache[job_id] = _failure_reason(s3, target, job_id)
    return done, {job_id: cache[job_id] for job_id in failed_ids}


def _failure_reason(s3: Any, target: Target, job_id: str) -> str:
    try:
        body = s3.get_object(Bucket=target.bucket, Key=failure_key(job_id, target.prefix))
        record = FailureRecord.model_validate_json(body["Body"].read())
    except (ClientError, BotoCoreError, ValueError) as error:  # ValidationError is a ValueError
        return f"failure record unreadable: {error}"
    return record.reason()


# ---------------------------------------------------------------------------- results

ETAG_SIDECAR = ".tts-fleet-etags.json"


@dataclass
class ResultsReport:
    downloaded: list[str] = field(default_factory=list)  # local file names
    skipped: list[str] = field(default_factory=list)  # already present with the same ETag
    failed: dict[str, str] = field(default_factory=dict)  # key -> reason
    missing: list[str] = field(default_factory=list)  # requested ids with no manifest yet
    bytes: int = 0


def result_objects(
    s3: Any, target: Target, ids: Sequence[str] | None, id_prefix: str = ""
) -> tuple[list[dict[str, Any]], list[str]]:
    """The audio and manifest objects of done jobs (manifest present), and missing ids."""
    base = f"{target.prefix}{OUTPUTS_PREFIX}"
    by_id: dict[str, list[dict[str, Any]]] = {}
    for item in list_keys(s3, target.bucket, base + id_prefix):
        job_id = item["Key"][len(base) :].rsplit(".", 1)[0]
        by_id.setdefault(job_id, []).append(item)
    done = {job_id for job_id, items in by_id.items() if any(_is_json(i) for i in items)}
    wanted = set(ids) if ids is not None else done
    objects = [item for job_id in sorted(wanted & done) for item in by_id[job_id]]
    return objects, sorted(wanted - done)


def _is_json(item: dict[str, Any]) -> bool:
    return item["Key"].endswith(".json")


def download_results(
    s3: Any,
    target: Target,
    objects: Sequence[dict[str, Any]],
    directory: Path,
    *,
    threads: int = 8,
    progress: Callable[[int], None] | None = None,
) -> ResultsReport:
    """Downloads in parallel; skips a file whose ETag matches the sidecar or, for a
    single-part upload (ETag = MD5), the file's own MD5. Writes are atomic (temp + rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    etags = _read_sidecar(directory)
    report = ResultsReport()
    lock = threading.Lock()

    def fetch(item: dict[str, Any]) -> None:
        name = item["Key"].rsplit("/", 1)[-1]
        try:
            outcome = _fetch_one(s3, target.bucket, item, directory / name, etags.get(name))
        except (ClientError, BotoCoreError, OSError) as error:
            with lock:
                report.failed[item["Key"]] = str(error)
        else:
            with lock:
                getattr(report, outcome).append(name)
                report.bytes += item.get("Size", 0) if outcome == "downloaded" else 0
                etags[name] = item["ETag"].strip('"')
        if progress is not None:
            progress(1)

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        list(pool.map(fetch, objects))
    _write_sidecar(directory, etags)
    return report


def _fetch_one(
    s3: Any, bucket: str, item: dict[str, Any], local: Path, recorded: str | None
) -> str:
    """ "skipped" when the local copy has the object's ETag, else downloads: "downloaded"."""
    if local.exists() and _same_etag(local, item["ETag"].strip('"'), recorded):
        return "skipped"
    temp = local.with_name(f".{local.name}.part")
    s3.download_file(bucket, item["Key"], str(temp))
    temp.replace(local)
    return "downloaded"


def _same_etag(local: Path, etag: str, recorded: str | None) -> bool:
    if recorded is not None:
        return recorded == etag
    if "-" in etag:  # multipart ETag is not an MD5 of the content; no sidecar, so fetch again
        return False
    return hashlib.md5(local.read_bytes(), usedforsecurity=False).hexdigest() == etag


def _read_sidecar(directory: Path) -> dict[str, str]:
    try:
        data = json.loads((directory / ETAG_SIDECAR).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_sidecar(directory: Path, etags: dict[str, str]) -> None:
    temp = directory / f".{ETAG_SIDECAR}.part"
    temp.write_text(json.dumps(etags, sort_keys=True, indent=0))
    temp.replace(directory / ETAG_SIDECAR)
