"""An EPUB through the local fleet to an M4B (issue 25): `tts-fleet local --keep-running`
with espeak speech, then `submit BOOK.epub`, `wait` and `results --book --subtitles srt` as a
user runs them. The M4B is read back with mutagen (chapters, tags, cover) and measured with
pyloudnorm and scipy's 8× resampler (not the code that normalised it)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pyloudnorm  # type: ignore[import-untyped]
import pytest
from mutagen.mp4 import MP4
from scipy.signal import resample_poly  # type: ignore[import-untyped]

from tests.lib.audiobook import srt_times
from tests.lib.epubs import AUTHOR, COVER_PNG, TITLE, chapter_title, make_book
from tests.lib.local_cli import CLI, RUN_TIMEOUT, exports
from tts_fleet.client import m4b
from tts_fleet.client.book_record import chapter_id, parse_book_record, record_key
from worker.jobs import Manifest, manifest_key

pytestmark = pytest.mark.processes

BOOK = "tale"
PARAGRAPH_PAUSE, CHAPTER_PAUSE = 0.4, 1.0


@pytest.mark.timeout(RUN_TIMEOUT * 2)
def test_an_epub_becomes_five_jobs_and_one_m4b_with_chapters_at_their_starts(  # type: ignore[no-untyped-def]
    start, tmp_path: Path
) -> None:
    run = start("--keep-running", "--backend", "espeak", "--max-workers", "2", "--tick", "0.3")
    deadline = time.monotonic() + 90
    while "TTS_FLEET_BUCKET=" not in run.stdout():
        assert run.proc.poll() is None and time.monotonic() < deadline, run.stderr_path.read_text()
        time.sleep(0.1)
    env = {**os.environ, **exports(run.stdout())}
    epub = make_book(tmp_path / f"{BOOK}.epub")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT)  # fmt: skip

    sent = cli("submit", str(epub), "--json")
    assert sent.returncode == 0, sent.stderr
    ids = json.loads(sent.stdout)["ids"]
    assert ids == [chapter_id(BOOK, n) for n in range(1, 6)]  # nav, cover, notes: no job
    waited = cli("wait", str(epub), "--timeout", str(RUN_TIMEOUT), "--interval", "1")
    assert waited.returncode == 0, waited.stderr
    out = tmp_path / "audio"
    pauses = ("--paragraph-pause", str(PARAGRAPH_PAUSE), "--chapter-pause", str(CHAPTER_PAUSE))
    made = cli("results", "--book", BOOK, "--out", str(out), "--subtitles", "srt", *pauses)
    assert made.returncode == 0, made.stderr

    # Where each chapter should start: the chapters before it, each its audio plus a pause per
    # paragraph boundary (the record's paragraph count), and a chapter pause after each.
    s3 = boto3.client(
        "s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env.get("AWS_REGION", "us-east-1"),
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID", "testing"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY", "testing"),
    )  # fmt: skip
    bucket = env["TTS_FLEET_BUCKET"]
    record = parse_book_record(
        s3.get_object(Bucket=bucket, Key=record_key(BOOK))["Body"].read(), BOOK
    )
    lengths = []
    for chapter in record.chapters:
        (job,) = chapter.jobs
        body = s3.get_object(Bucket=bucket, Key=manifest_key(job.id))["Body"].read()
        seconds = Manifest.model_validate_json(body).duration_s or 0.0
        lengths.append(seconds + PARAGRAPH_PAUSE * (job.paragraphs - 1))
    starts = [sum(lengths[:i]) + CHAPTER_PAUSE * i for i in range(len(lengths))]

    book = MP4(out / f"{BOOK}.m4b")
    assert book.chapters is not None and book.tags is not None and book.info is not None
    found: list[Any] = list(book.chapters)
    assert [c.title for c in found] == [chapter_title(n) for n in range(1, 6)]
    assert [c.start for c in found] == pytest.approx(starts, abs=0.3)
    assert book.tags["\xa9nam"] == [TITLE] and book.tags["\xa9ART"] == [AUTHOR]
    assert bytes(book.tags["covr"][0]) == COVER_PNG
    assert sorted(p.name for p in out.glob("*.m4a")) == [f"{i}.m4a" for i in ids]

    heard = m4b.decode(out / f"{BOOK}.m4b", 24_000).astype(np.float64)
    assert pyloudnorm.Meter(24_000).integrated_loudness(heard) == pytest.approx(-18, abs=1.0)
    assert 20 * math.log10(float(np.abs(resample_poly(heard, 8, 1)).max())) <= -1.5

    cues = srt_times((out / f"{BOOK}.srt").read_text())
    sentences = sum(len(re.findall(r"[.!?](?:\s|$)", t)) for t in (c.title for c in found))
    assert len(cues) >= 5 * 2 + sentences  # at least the two paragraphs' sentences a chapter
    assert cues == sorted(cues) and all(0 <= a <= b <= book.info.length + 0.05 for a, b in cues)
    run.proc.send_signal(signal.SIGINT)
    run.finish(timeout=60)
