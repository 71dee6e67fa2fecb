"""Which jobs are done or failed (manifests and failure records) and downloading their outputs.

"Done" means a manifest made from the request that was submitted (`Manifest.made_from` the
request's digest) when that digest is known: an edited job resubmitted under the same id is
pending until its new manifest is swapped in, never reported done with the old audio. Without
digests (ids given by hand, a summary from an older submit) any manifest counts.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.client.aws import Target
from tts_fleet.client.keys import audio_format, inside, is_planted
from worker.jobs import (
    FAILURES_PREFIX,
    OUTPUTS_PREFIX,
    FailureRecord,
    Manifest,
    failure_key,
    is_job_id,
    job_id_of,
    manifest_key,
)

# job id -> the digest of the request submitted under it (None: not known, any manifest will do)
Digests = dict[str, str | None]
READ_ERRORS = (ClientError, BotoCoreError, ValueError)  # ValidationError is a ValueError


def list_objects(s3: Any, bucket: str, prefix: str) -> Iterator[dict[str, Any]]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Contents", [])


def _json_etags(s3: Any, target: Target, folder: str) -> dict[str, str]:
    """id -> ETag of every record (<prefix><folder><id>.json) whose name is a job id."""
    etags = {}
    for item in list_objects(s3, bucket_of(target), f"{target.prefix}{folder}"):
        job_id = job_id_of(item["Key"], target.prefix)
        if job_id is not None:
            etags[job_id] = str(item.get("ETag", ""))
    return etags


@dataclass
class OutcomeCache:
    """What `outcomes` has read, by ETag, so repeated calls (a polling wait, an events wait's
    sweeps) read each manifest and failure record once while its ETag is unchanged."""

    manifests: dict[str, tuple[str, Manifest | None]] = field(default_factory=dict)
    failures: dict[str, tuple[str, FailureRecord | None, str]] = field(default_factory=dict)


def bucket_of(target: Target) -> str:
    """The target's bucket; the commands check for one before they read it."""
    if not target.bucket:
        raise ValueError("the target names no output bucket")
    return target.bucket


def outcomes(
    s3: Any,
    target: Target,
    ids: Sequence[str],
    cache: OutcomeCache | None = None,
    *,
    digests: Digests | None = None,
) -> tuple[set[str], dict[str, str]]:
    """(done ids, failed id -> error) among `ids`. A matching manifest wins over a failure
    record, since a redriven job that then succeeds leaves its old failure record behind; a
    failure record of another request (an earlier version of an edited job) is not this
    job's failure. A cache kept across calls saves reading a manifest or record again while
    its ETag is unchanged."""
    cache = cache if cache is not None else OutcomeCache()
    digests = digests or {}
    wanted = {job_id for job_id in ids if is_job_id(job_id)}
    manifests = _json_etags(s3, target, OUTPUTS_PREFIX)
    done = {
        job_id
        for job_id in wanted & manifests.keys()
        if _made_from(s3, target, job_id, manifests[job_id], digests.get(job_id), cache)
    }
    records = _json_etags(s3, target, FAILURES_PREFIX)
    failed = {}
    for job_id in (wanted - done) & records.keys():
        record, reason = _failure(s3, target, job_id, records[job_id], cache)
        if failure_of(record, job_id, digests.get(job_id)):
            failed[job_id] = reason
    return done, failed


def wait_for_outcomes(
    s3: Any,
    target: Target,
    ids: Sequence[str],
    *,
    timeout: float,
    interval: float,
    digests: Digests | None = None,
    on_settled: Callable[[int], None] = lambda _: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    cache: OutcomeCache | None = None,
) -> tuple[set[str], dict[str, str]]:
    """Lists the bucket every `interval` until every id is settled or `timeout` has passed:
    (done ids, failed id -> reason), as `events.wait_for_completions` returns them. Done means
    a manifest made from the request submitted (its digest), when known. A `cache` given
    keeps the manifests read, for `checks_failed`."""
    started = clock()
    cache = cache if cache is not None else OutcomeCache()
    while True:
        done, failed = outcomes(s3, target, ids, cache, digests=digests)
        on_settled(len(done) + len(failed))
        if len(done) + len(failed) == len(set(ids)) or clock() - started >= timeout:
            return done, failed
        sleep(interval)


def failure_of(record: FailureRecord | None, job_id: str, digest: str | None) -> bool:
    """Whether the record is this submit's failure. A waiter that knows the digest of what it
    submitted takes only a record of that very request: any producer can have a record
    without a digest written for any id (an unreadable body carrying a valid id), so such a
    record, or an unreadable one, leaves the job pending. Without a digest any record of the
    job counts, as before digests."""
    if digest is not None:
        return record is not None and record.id == job_id and record.request_digest == digest
    return record is None or record.id == job_id


def _made_from(
    s3: Any, target: Target, job_id: str, etag: str, digest: str | None, cache: OutcomeCache
) -> bool:
    if digest is None:
        return True
    seen = cache.manifests.get(job_id)
    if seen is None or seen[0] != etag:
        seen = (etag, read_manifest(s3, target, job_id))
        cache.manifests[job_id] = seen
    return seen[1] is not None and seen[1].made_from(digest)


def read_manifest(s3: Any, target: Target, job_id: str) -> Manifest | None:
    """The job's manifest, or None when it is missing, unreadable or not the job's own (its
    `id` or `audio_key` is not this job's, `keys.audio_format`): not done."""
    manifest = _read_any_manifest(s3, target, job_id)
    if manifest is None or audio_format(manifest, job_id, target.prefix) is None:
        return None
    return manifest


def _read_any_manifest(s3: Any, target: Target, job_id: str) -> Manifest | None:
    try:
        body = s3.get_object(Bucket=bucket_of(target), Key=manifest_key(job_id, target.prefix))
        return Manifest.model_validate_json(body["Body"].read())
    except READ_ERRORS:
        return None


def _failure(
    s3: Any, target: Target, job_id: str, etag: str, cache: OutcomeCache
) -> tuple[FailureRecord | None, str]:
    seen = cache.failures.get(job_id)
    if seen is None or seen[0] != etag:
        seen = (etag, *read_failure(s3, target, job_id))
        cache.failures[job_id] = seen
    return seen[1], seen[2]


def read_failure(s3: Any, target: Target, job_id: str) -> tuple[FailureRecord | None, str]:
    """The job's failure record and its one-line reason (the record may be unreadable)."""
    try:
        body = s3.get_object(Bucket=bucket_of(target), Key=failure_key(job_id, target.prefix))
        record = FailureRecord.model_validate_json(body["Body"].read())
    except READ_ERRORS as error:
        return None, f"failure record unreadable: {error}"
    return record, record.reason()


# ---------------------------------------------------------------------- output checks


def checks_failed(cache: OutcomeCache, done: Sequence[str]) -> dict[str, str]:
    """Done jobs stored although a piece failed its checks (the worker's QA_ON_FAIL=keep: the
    manifest's `qa.passed` is false), id -> the checks' reason, among the manifests a wait has
    read (every done job's when it knows the submitted digests): no request of its own, so a
    wait costs what it did."""
    kept: dict[str, str] = {}
    for job_id in sorted(done):
        seen = cache.manifests.get(job_id)
        manifest = seen[1] if seen is not None else None
        if manifest is not None and manifest.qa is not None and not manifest.qa.passed:
            kept[job_id] = manifest.qa.reason or "a check failed"
    return kept


def checks_failed_in(qa: dict[str, Any]) -> dict[str, str]:
    """`checks_failed` for manifests' `qa` already read (`result_objects`), id -> reason."""
    return {
        job_id: record.get("reason") or "a check failed"
        for job_id, record in sorted(qa.items())
        if isinstance(record, dict) and record.get("passed") is False
    }


def quality_failures(
    s3: Any, target: Target, ids: Sequence[str] | None, id_prefix: str = ""
) -> dict[str, str]:
    """Jobs that failed on quality (a failure record carrying the checks' `qa`: every attempt
    of a piece failed, QA_ON_FAIL=fail), id -> the record's reason, which starts `quality:`.
    Among `ids`, or every failed job whose id starts with `id_prefix`."""
    listed = _json_etags(s3, target, FAILURES_PREFIX)
    wanted = set(ids) if ids is not None else {i for i in listed if i.startswith(id_prefix)}
    failed: dict[str, str] = {}
    for job_id in sorted(wanted & listed.keys()):
        record, reason = read_failure(s3, target, job_id)
        if record is not None and record.id == job_id and record.qa is not None:
            failed[job_id] = reason
    return failed


# ---------------------------------------------------------------------------- results

ETAG_SIDECAR = ".tts-fleet-etags.json"


@dataclass
class ResultsReport:
    downloaded: list[str] = field(default_factory=list)  # local file names
    skipped: list[str] = field(default_factory=list)  # already present with the same ETag
    failed: dict[str, str] = field(default_factory=dict)  # key -> reason
    missing: list[str] = field(default_factory=list)  # requested ids with no manifest yet
    bytes: int = 0
    # A key or id not followed because it is not the worker's (tts_fleet/client/keys.py), or
    # a file it would name outside the directory -> why
    untrusted: dict[str, str] = field(default_factory=dict)


def result_objects(
    s3: Any,
    target: Target,
    ids: Sequence[str] | None,
    id_prefix: str = "",
    digests: Digests | None = None,
    untrusted: dict[str, str] | None = None,
    qa: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The manifest and the audio it names of each done job, and the ids not done.

    Each object carries "Local", its file name: <id>.json and <id>.<format>, whatever key the
    audio has in the bucket (a re-made job's is <id>.<hash>.<format>). An id that is no job id,
    a listed record whose name is none (when every done job is wanted) and a manifest that is
    not its job's own are left out and recorded in `untrusted`, key (or id) -> why. Each
    done job's output checks (its manifest's `qa`, when it has one) go into `qa`, id -> qa."""
    untrusted = untrusted if untrusted is not None else {}
    base = f"{target.prefix}{OUTPUTS_PREFIX}"
    listed = {item["Key"]: item for item in list_objects(s3, bucket_of(target), base + id_prefix)}
    present = {job_id for key in listed if (job_id := job_id_of(key, target.prefix))}
    if ids is None:
        for key in listed:
            if is_planted(key, target.prefix):
                untrusted[key] = "its name is no job id"
    digests = digests or {}
    objects: list[dict[str, Any]] = []
    missing = []
    for job_id in sorted(set(ids) if ids is not None else present):
        if not is_job_id(job_id):
            untrusted[job_id] = "no job id"
            continue
        manifest = _read_any_manifest(s3, target, job_id) if job_id in present else None
        fmt = audio_format(manifest, job_id, target.prefix) if manifest is not None else None
        if manifest is not None and fmt is None:
            untrusted[manifest_key(job_id, target.prefix)] = (
                f"the manifest's id {manifest.id!r} or audio_key {manifest.audio_key!r} "
                "is not this job's"
            )
            continue
        digest = digests.get(job_id)
        audio = listed.get(manifest.audio_key) if manifest is not None else None
        if manifest is None or audio is None or (digest and not manifest.made_from(digest)):
            missing.append(job_id)
            continue
        objects.append({**listed[manifest_key(job_id, target.prefix)], "Local": f"{job_id}.json"})
        objects.append({**audio, "Local": f"{job_id}.{fmt}"})
        if qa is not None and manifest.qa is not None:
            qa[job_id] = manifest.qa.model_dump()
    return objects, missing


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
    bucket = bucket_of(target)
    directory.mkdir(parents=True, exist_ok=True)
    etags = _read_sidecar(directory)
    report = ResultsReport()
    lock = threading.Lock()

    def fetch(item: dict[str, Any]) -> None:
        name = item.get("Local") or item["Key"].rsplit("/", 1)[-1]
        local = inside(directory, name)
        try:
            outcome = _fetch_one(s3, bucket, item, local, etags.get(name)) if local else None
        except (ClientError, BotoCoreError, OSError) as error:
            with lock:
                report.failed[item["Key"]] = str(error)
        else:
            with lock:
                if outcome is None:  # a name from the bucket that climbs out of the directory
                    report.untrusted[item["Key"]] = f"its file {name!r} would be outside OUT"
                else:
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
