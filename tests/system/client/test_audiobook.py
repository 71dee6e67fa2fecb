"""`results --book` against the emulator: chapters rendered by an in-process worker (the real
speech client, espeak speech from the local stand-in), a book record built directly, then the
M4B read back with mutagen and measured with pyloudnorm and an independent true-peak meter.
Spawns the packaged ffmpeg."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyloudnorm  # type: ignore[import-untyped]
import pytest
from click.testing import CliRunner
from mutagen.mp4 import MP4
from scipy.signal import resample_poly  # type: ignore[import-untyped]

from tests.lib.audiobook import png, srt_times
from tests.lib.fake_worker import make_worker, run_until
from tests.lib.procs import make_queues_and_bucket, visible_and_in_flight
from tts_fleet.cli.main import cli
from tts_fleet.client import m4b
from tts_fleet.client.book_record import (
    BookRecord,
    Chapter,
    ChapterJob,
    chapter_id,
    cover_key,
    record_key,
)
from tts_fleet.local.speech_server import serve_in_thread
from worker.jobs import Job, Manifest, manifest_key
from worker.speech import SpeechClient

pytestmark = pytest.mark.processes

BOOK = "tale"
TITLE, AUTHOR = "A Small Tale", "Ann Writer"


COVER = png()
TEXTS = [
    "The ship left at dawn. Nobody waved.\n\nThe sea was calm that day. Gulls followed us.",
    "At noon the wind rose! We reefed the sails.\n\nBy evening the storm had passed.",
    "We saw land on the third day. It was an island.\n\nWe went ashore. The end.",
]
PARAGRAPH_PAUSE, CHAPTER_PAUSE = 0.7, 1.5


@pytest.fixture
def rendered(aws_env: dict[str, str], sqs: Any, s3: Any) -> dict[str, Any]:
    """Three chapters rendered by a worker, and the book record and cover submit would write."""
    names = make_queues_and_bucket(sqs, s3, visibility_timeout=30)
    jobs = [Job(id=chapter_id(BOOK, n), text=t, voice="Ryan") for n, t in enumerate(TEXTS, 1)]
    for job in jobs:
        sqs.send_message(QueueUrl=names["queue_url"], MessageBody=job.body())
    with serve_in_thread("espeak") as server:
        speech = SpeechClient(server.url, chunk_chars=60)  # several pieces per chapter
        worker = make_worker(names, sqs, s3, speech, qa_mode="off")
        run_until(worker, lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 60)
    listed = [
        Chapter(number=n, title=f"Day {n}", jobs=[ChapterJob(id=job.job_id, digest=job.digest(),
                characters=len(job.text), paragraphs=2)])
        for n, job in enumerate(jobs, 1)
    ]  # fmt: skip
    record = BookRecord(book=BOOK, title=TITLE, author=AUTHOR, language="en",
                        cover_key=cover_key(BOOK, "png"), chapters=listed)  # fmt: skip
    s3.put_object(Bucket=names["bucket"], Key=record_key(BOOK), Body=record.to_json())
    s3.put_object(Bucket=names["bucket"], Key=cover_key(BOOK, "png"), Body=COVER)
    manifests = []
    for job in jobs:
        body = s3.get_object(Bucket=names["bucket"], Key=manifest_key(job.job_id))["Body"].read()
        manifests.append(Manifest.model_validate_json(body))
    return {"names": names, "jobs": jobs, "manifests": manifests}


def results(bucket: str, out: Path, *args: str) -> Any:
    return CliRunner().invoke(
        cli, ["results", "--book", BOOK, "--out", str(out), "--bucket", bucket, *args]
    )


def chapters(book: MP4) -> list[Any]:
    assert book.chapters is not None, "the file has no chapters"
    return list(book.chapters)


def length(book: MP4) -> float:
    assert book.info is not None
    return float(book.info.length)


def true_peak_8x(samples: np.ndarray) -> float:
    """Not the code under test: scipy's polyphase resampler at 8×."""
    return 20 * math.log10(float(np.abs(resample_poly(samples, 8, 1)).max()))


@pytest.mark.timeout(120)
def test_the_book_is_one_m4b_with_its_chapters_tags_cover_and_loudness(
    rendered: dict[str, Any], tmp_path: Path
) -> None:
    manifests: list[Manifest] = rendered["manifests"]
    assert all(m.segments and m.segments[-1].paragraph == 1 for m in manifests)
    run = results(rendered["names"]["bucket"], tmp_path, "--paragraph-pause", str(PARAGRAPH_PAUSE),
                  "--chapter-pause", str(CHAPTER_PAUSE), "--loudness", "-20")  # fmt: skip
    assert run.exit_code == 0, run.output
    # Each chapter is its audio plus one paragraph pause (one paragraph boundary in each).
    lengths = [float(m.duration_s or 0) + PARAGRAPH_PAUSE for m in manifests]
    starts = [sum(lengths[:i]) + CHAPTER_PAUSE * i for i in range(len(lengths))]
    book = MP4(tmp_path / f"{BOOK}.m4b")
    assert [c.title for c in chapters(book)] == ["Day 1", "Day 2", "Day 3"]
    assert [c.start for c in chapters(book)] == pytest.approx(starts, abs=0.3)
    assert book.tags is not None
    assert book.tags["\xa9nam"] == [TITLE] and book.tags["\xa9ART"] == [AUTHOR]
    assert bytes(book.tags["covr"][0]) == COVER
    assert length(book) == pytest.approx(sum(lengths) + 2 * CHAPTER_PAUSE, abs=0.3)
    heard = m4b.decode(tmp_path / f"{BOOK}.m4b", 24_000).astype(np.float64)
    assert pyloudnorm.Meter(24_000).integrated_loudness(heard) == pytest.approx(-20, abs=1.0)
    assert true_peak_8x(heard) <= -1.5
    for number, seconds in enumerate(lengths, 1):
        chapter = MP4(tmp_path / f"{chapter_id(BOOK, number)}.m4a")
        assert length(chapter) == pytest.approx(seconds, abs=0.2)
        assert chapter.tags is not None and chapter.tags["\xa9nam"] == [f"Day {number}"]


@pytest.mark.timeout(120)
def test_book_subtitles_follow_the_m4b(rendered: dict[str, Any], tmp_path: Path) -> None:
    run = results(rendered["names"]["bucket"], tmp_path, "--subtitles", "srt")
    assert run.exit_code == 0, run.output
    text = (tmp_path / f"{BOOK}.srt").read_text()
    times = srt_times(text)
    sentences = [len(re.findall(r"[.!?]", text)) for text in TEXTS]
    assert len(times) == sum(sentences)  # one cue per sentence
    book = MP4(tmp_path / f"{BOOK}.m4b")
    assert times == sorted(times) and all(a <= b for a, b in times)
    assert all(a >= 0 and b <= length(book) + 0.05 for a, b in times)
    # Each chapter's first sentence starts at its chapter marker.
    firsts = [times[sum(sentences[:n])][0] for n in range(len(TEXTS))]
    assert firsts == pytest.approx([c.start for c in chapters(book)], abs=0.3)


def test_a_chapter_not_done_makes_no_book(
    rendered: dict[str, Any], s3: Any, tmp_path: Path
) -> None:
    bucket = rendered["names"]["bucket"]
    s3.delete_object(Bucket=bucket, Key=manifest_key(chapter_id(BOOK, 2)))
    run = results(bucket, tmp_path)
    assert run.exit_code == 1
    assert chapter_id(BOOK, 2) in run.output and not (tmp_path / f"{BOOK}.m4b").exists()


def test_job_subtitles_follow_each_jobs_own_audio(rendered: dict[str, Any], tmp_path: Path) -> None:
    bucket = rendered["names"]["bucket"]
    ids = [job.job_id for job in rendered["jobs"]]
    run = CliRunner().invoke(cli, ["results", "--out", str(tmp_path), "--bucket", bucket,
                                   "--subtitles", "vtt", *(f"--id={i}" for i in ids)])  # fmt: skip
    assert run.exit_code == 0, run.output
    for job_id, text, manifest in zip(ids, TEXTS, rendered["manifests"], strict=True):
        vtt = (tmp_path / f"{job_id}.vtt").read_text()
        assert vtt.startswith("WEBVTT\n")
        times = srt_times(vtt.replace(".", ","))
        assert len(times) == len(re.findall(r"[.!?]", text)) and times == sorted(times)
        assert times[0][0] == 0.0 and times[-1][1] <= (manifest.duration_s or 0) + 0.001
