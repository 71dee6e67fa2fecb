"""`results --book BOOK`: a submitted book's chapters as one file each and as `<book>.m4b`.

The book record (`books/<book>.json`, tts_fleet/client/book_record.py) lists the chapters in
reading order with their jobs and request digests. Every job must be done with a manifest made
from that digest (an edited chapter still being re-rendered is not done). Their audio is put
together in order:

- a `--paragraph-pause` of silence at each paragraph boundary inside a job (from the
  manifest's `segments`: a sentence whose `paragraph` is the next one; the book's chapter texts
  separate paragraphs with a blank line) and between the parts of a split chapter (the
  splitter cuts at a paragraph end first);
- a `--chapter-pause` between chapters;
- then the whole book is brought to one integrated loudness (`--loudness`, LUFS) with its true
  peak limited (tts_fleet/client/loudness.py), and encoded: the M4B with one chapter marker at
  each chapter's first sample, the title, author and cover; each chapter as
  `<book>-c001.m4a`, … (cut from the same normalised audio, so every file sounds alike).

The encoder's AAC can overshoot the peaks it was given, so the M4B is decoded again and its
true peak measured; where it passes the ceiling, those stretches alone are turned down by the
excess and the book encoded again. What was measured on the decoded file is in the report.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.client import loudness, m4b
from tts_fleet.client.audiobook_options import MAX_TRUE_PEAK_DBTP, BookOptions
from tts_fleet.client.aws import Target
from tts_fleet.client.book_record import (
    BookRecord,
    InvalidBookRecord,
    chapter_id,
    parse_book_record,
    record_key,
)
from tts_fleet.client.keys import audio_format, inside
from tts_fleet.client.results import bucket_of, read_manifest
from tts_fleet.client.subtitles import Cue, cues, render, write_text
from worker.jobs import Manifest, Segment

# The limiter's ceiling starts this far below MAX_TRUE_PEAK_DBTP: AAC's coding noise adds to
# the peaks (typically a few tenths of a dB).
ENCODER_HEADROOM_DB = 0.5
# Past the ceiling after all, the stretches over it are turned down to this much below it,
# over an AAC frame (1,024 samples, 43 ms at 24 kHz) and more either side.
TRIM_MARGIN_DB = 0.3
TRIM_WINDOW_S = 0.06
ENCODE_TRIES = 4
# What is read of a cover image from the bucket (untrusted): EPUB covers are well under this.
MAX_COVER_BYTES = 20 * 1024 * 1024
# A job's raw PCM (`format: pcm`) is the worker's: 16-bit mono at its manifest's rate.
PCM_DEFAULT_RATE = 24_000
READ_ERRORS = (ClientError, BotoCoreError)


class BookError(Exception):
    """The book cannot be made (no record, jobs not done, unreadable audio); one line."""


class ChaptersNotDone(BookError):
    """Jobs of the book without a manifest made from the request submitted."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(f"{len(missing)} job(s) of the book not done: {', '.join(missing[:10])}")
        self.missing = missing


@dataclass(frozen=True)
class JobAudio:
    job_id: str
    samples: np.ndarray  # mono float
    rate: int
    segments: list[Segment]


@dataclass(frozen=True)
class ChapterOut:
    number: int
    title: str
    start_s: float  # in the M4B
    end_s: float  # its last sample (the chapter pause after it not included)
    path: Path


@dataclass
class BookReport:
    book: str
    m4b: Path
    duration_s: float
    measured_lufs: float  # the book as rendered, before the gain
    gain_db: float
    lufs: float  # of the decoded M4B
    true_peak_dbtp: float  # of the decoded M4B
    limited: bool
    chapters: list[ChapterOut] = field(default_factory=list)
    subtitles: Path | None = None
    cover_skipped: str | None = None  # why the record's cover is not in the files


def read_record(s3: Any, target: Target, book: str) -> BookRecord:
    key = record_key(book, target.prefix)
    try:
        data = s3.get_object(Bucket=bucket_of(target), Key=key)["Body"].read()
    except READ_ERRORS as error:
        raise BookError(f"no book record {key}: {error}") from None
    try:
        return parse_book_record(data, book, target.prefix)
    except InvalidBookRecord as error:
        raise BookError(str(error)) from None


def fetch_jobs(s3: Any, target: Target, record: BookRecord, threads: int) -> dict[str, JobAudio]:
    """Every job's audio and sentence timings; ChaptersNotDone when any is not done."""
    digests = record.digests()
    manifests = {job_id: read_manifest(s3, target, job_id) for job_id in digests}
    missing = [
        job_id
        for job_id, manifest in manifests.items()
        if manifest is None or not manifest.made_from(digests[job_id])
    ]
    if missing:
        raise ChaptersNotDone(missing)
    done = {job_id: m for job_id, m in manifests.items() if m is not None}
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        audio = pool.map(lambda item: _job_audio(s3, target, *item), done.items())
        return {job.job_id: job for job in audio}


def _job_audio(s3: Any, target: Target, job_id: str, manifest: Manifest) -> JobAudio:
    fmt = audio_format(manifest, job_id, target.prefix)
    if fmt is None:  # read_manifest refuses these; kept as the one check before a GET
        raise BookError(f"{job_id}: its manifest names no audio of its own")
    try:
        body = s3.get_object(Bucket=bucket_of(target), Key=manifest.audio_key)["Body"].read()
    except READ_ERRORS as error:
        raise BookError(f"{job_id}: its audio could not be read: {error}") from None
    samples, rate = _decode(body, fmt, manifest.sample_rate)
    return JobAudio(job_id, samples, rate, list(manifest.segments or []))


def _decode(body: bytes, fmt: str, rate: int | None) -> tuple[np.ndarray, int]:
    if fmt == "pcm":
        return np.frombuffer(body, dtype="<i2").astype(np.float32) / 32768, rate or PCM_DEFAULT_RATE
    try:
        data, found = soundfile.read(io.BytesIO(body), dtype="float32", always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError) as error:
        raise BookError(f"audio is not readable {fmt}: {error}") from None
    return np.asarray(data.mean(axis=1), dtype=np.float32), int(found)


def _resampled(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    if rate == target or samples.size == 0:
        return samples
    count = round(samples.size * target / rate)
    positions = np.arange(count) * (rate / target)
    return np.asarray(np.interp(positions, np.arange(samples.size), samples), dtype=np.float32)


@dataclass
class Layout:
    """The book laid end to end: the samples, each chapter's span, the sentences' cues."""

    rate: int
    parts: list[np.ndarray] = field(default_factory=list)
    length: int = 0  # samples so far
    spans: list[tuple[int, int]] = field(default_factory=list)  # per chapter: first, end
    cues: list[Cue] = field(default_factory=list)

    def add(self, samples: np.ndarray) -> None:
        self.parts.append(samples)
        self.length += samples.size

    def silence(self, seconds: float) -> None:
        self.add(np.zeros(round(seconds * self.rate), dtype=np.float32))

    def job(self, audio: JobAudio, paragraph_pause_s: float) -> None:
        """A job's audio, with a paragraph pause before each sentence that opens a paragraph;
        its sentences shifted to where they now sit."""
        samples = _resampled(audio.samples, audio.rate, self.rate)
        cut = 0  # the job's samples added so far
        shifted: list[Segment] = []
        previous: int | None = None
        for segment in audio.segments:
            if previous is not None and segment.paragraph > previous and paragraph_pause_s:
                at = min(samples.size, max(cut, round(segment.start * self.rate)))
                self.add(samples[cut:at])
                self.silence(paragraph_pause_s)
                cut = at
            previous = segment.paragraph
            # The job's time 0 now sits at length − cut (its earlier samples and pauses added).
            offset = (self.length - cut) / self.rate
            shifted.append(segment.model_copy(update={"start": segment.start + offset,
                                                      "end": segment.end + offset}))  # fmt: skip
        self.add(samples[cut:])
        self.cues.extend(cues(shifted, 0.0, self.length / self.rate))


def lay_out(record: BookRecord, jobs: dict[str, JobAudio], options: BookOptions) -> Layout:
    """The chapters in order with their pauses; the rate is the first job's."""
    first = jobs[record.chapters[0].jobs[0].id]
    layout = Layout(first.rate)
    for index, chapter in enumerate(record.chapters):
        if index:
            layout.silence(options.chapter_pause_s)
        begin = layout.length
        for part, job in enumerate(chapter.jobs):
            if part:
                layout.silence(options.paragraph_pause_s)
            layout.job(jobs[job.id], options.paragraph_pause_s)
        layout.spans.append((begin, layout.length))
    return layout


def make_audiobook(
    s3: Any,
    target: Target,
    book: str,
    out: Path,
    options: BookOptions,
    progress: Callable[[str], None] = lambda _: None,
) -> BookReport:
    """Writes `<book>-c001.m4a`, … and `<book>.m4b` (and `<book>.<srt|vtt>`) into `out`."""
    problems = options.problems()
    if problems:
        raise BookError("; ".join(problems))
    record = read_record(s3, target, book)
    progress(f"book {book}: {len(record.chapters)} chapter(s), {len(record.job_ids())} job(s)")
    jobs = fetch_jobs(s3, target, record, options.threads)
    layout = lay_out(record, jobs, options)
    book_audio = np.concatenate(layout.parts) if layout.parts else np.zeros(0, np.float32)
    cover = _cover(s3, target, record)
    skipped = None
    if cover is not None and not m4b.readable_image(*cover):
        skipped, cover = f"{record.cover_key} is not an image ffmpeg can read", None
    out.mkdir(parents=True, exist_ok=True)
    m4b_path = _path(out, f"{book}.m4b")
    rate = layout.rate
    markers = _markers(record, layout)
    tags = m4b.Tags(title=record.title or book, author=record.author, album=record.title or book)
    done = loudness.normalise(
        book_audio, rate, options.loudness_lufs, MAX_TRUE_PEAK_DBTP - ENCODER_HEADROOM_DB
    )
    final, trimmed = done.samples, False
    for _ in range(ENCODE_TRIES):
        m4b.encode(final, rate, m4b_path, tags, markers, cover)
        heard = m4b.decode(m4b_path, rate)
        peak = loudness.true_peak_dbtp(heard)
        if peak <= MAX_TRUE_PEAK_DBTP:
            break
        # The encoder overshot (pre-echo around a sharp onset): those stretches are turned
        # down by their excess and a margin, over an AAC frame either side, and encoded again.
        peaks = loudness.oversampled_peaks(heard[: final.size])
        window = round(TRIM_WINDOW_S * rate)
        gain = loudness.reduction(peaks, MAX_TRUE_PEAK_DBTP - TRIM_MARGIN_DB, window)
        if gain is not None:
            final = final[: gain.size] * gain
            trimmed = True
    else:
        raise BookError(f"the encoded book's true peak stays at {peak:.2f} dBTP")
    report = BookReport(
        book=book, m4b=m4b_path, duration_s=round(book_audio.size / rate, 3),
        measured_lufs=round(done.measured_lufs, 2), gain_db=round(done.gain_db, 2),
        lufs=round(loudness.integrated_lufs(heard, rate), 2), true_peak_dbtp=round(peak, 2),
        limited=done.limited or trimmed, cover_skipped=skipped,
    )  # fmt: skip
    for chapter, (first, end), marker in zip(record.chapters, layout.spans, markers, strict=True):
        path = _path(out, f"{chapter_id(book, chapter.number)}.m4a")
        chapter_tags = m4b.Tags(title=chapter.title, author=record.author,
                                album=record.title or book, track=chapter.number)  # fmt: skip
        m4b.encode(final[first:end], rate, path, chapter_tags, (), cover)
        report.chapters.append(ChapterOut(chapter.number, chapter.title, marker.start,
                                          round(end / rate, 3), path))  # fmt: skip
    if options.subtitles is not None:
        report.subtitles = _path(out, f"{book}.{options.subtitles}")
        write_text(report.subtitles, render(layout.cues, options.subtitles))
    return report


def _markers(record: BookRecord, layout: Layout) -> list[m4b.Marker]:
    """One marker per chapter from its first sample to the next chapter's (the pause between
    them belongs to the chapter before)."""
    starts = [first / layout.rate for first, _ in layout.spans]
    ends = [*starts[1:], layout.length / layout.rate]
    titles = [c.title or f"Chapter {c.number}" for c in record.chapters]
    return [m4b.Marker(round(s, 3), round(e, 3), t) for s, e, t in zip(starts, ends, titles,
                                                                        strict=True)]  # fmt: skip


def _cover(s3: Any, target: Target, record: BookRecord) -> tuple[bytes, str] | None:
    if record.cover_key is None:
        return None
    try:
        answer = s3.get_object(Bucket=bucket_of(target), Key=record.cover_key)
        if int(answer.get("ContentLength") or 0) > MAX_COVER_BYTES:
            raise BookError(f"the cover {record.cover_key} is over {MAX_COVER_BYTES} bytes")
        data = answer["Body"].read(MAX_COVER_BYTES + 1)
    except READ_ERRORS as error:
        raise BookError(f"the cover {record.cover_key} could not be read: {error}") from None
    if len(data) > MAX_COVER_BYTES:
        raise BookError(f"the cover {record.cover_key} is over {MAX_COVER_BYTES} bytes")
    return data, record.cover_key.rsplit(".", 1)[-1]


def _path(out: Path, name: str) -> Path:
    path = inside(out, name)
    if path is None:
        raise BookError(f"{name!r} would be written outside {out}")
    return path
