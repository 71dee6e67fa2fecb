"""What the client accepts from the bucket: job ids, manifests and the local paths made of them.

The bucket is untrusted input (issue 20): the worker's task role, and any principal in the
account with broad S3 write, can put any key under `outputs/`, including `outputs/../../x.json`
or a manifest whose `audio_key` names another file. Every id the client turns into a local
path or an S3 key passes `worker.jobs.is_job_id` (the id pattern matched whole), every
manifest `audio_format`, every write `inside`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from worker.jobs import (
    RECORD_SUFFIX,
    Manifest,
    audio_format_of,
    is_job_id,
    job_id_of,
)


def is_planted(key: str, prefix: str = "") -> bool:
    """A key laid out like a manifest or failure record (`<folder>….json`) whose name is no job
    id: someone other than the worker wrote it. Audio keys and other prefixes are not."""
    return key.endswith(RECORD_SUFFIX) and job_id_of(key, prefix) is None


def audio_format(manifest: Manifest, job_id: str, prefix: str = "") -> str | None:
    """The format of the job's audio when `manifest` is the job's own (its `id` is `job_id`)
    and its `audio_key` is one the output store writes for that job; None otherwise."""
    if manifest.id != job_id:
        return None
    return audio_format_of(manifest.audio_key, job_id, prefix)


def inside(directory: Path, name: str) -> Path | None:
    """`directory / name` when it resolves to a file inside `directory` (symlinks followed),
    else None: the last check before anything is written."""
    path = directory / name
    base = directory.resolve()
    resolved = path.resolve()
    return path if resolved != base and resolved.is_relative_to(base) else None


def untrusted_ids(ids: Iterable[str]) -> dict[str, str]:
    """id -> why, for every id (from `--id` or a submit receipt) that is no job id."""
    return {job_id: "no job id" for job_id in ids if not is_job_id(job_id)}
