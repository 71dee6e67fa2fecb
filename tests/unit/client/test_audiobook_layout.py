"""The book laid end to end (tts_fleet/client/audiobook.py lay_out): pauses where the text
has paragraph and chapter boundaries, the sentences' cues moved with them. A book record and
job audio built directly; no bucket, no encoder."""

from __future__ import annotations

import numpy as np
import pytest

from tts_fleet.client.audiobook import JobAudio, lay_out
from tts_fleet.client.audiobook_options import BookOptions
from tts_fleet.client.book_record import BookRecord, Chapter, ChapterJob
from worker.jobs import Segment

RATE = 24_000
DIGEST = "0" * 64


def audio(job_id: str, seconds: float, segments: list[tuple[float, float, int]]) -> JobAudio:
    samples = np.full(round(seconds * RATE), 0.1, dtype=np.float32)
    timed = [Segment(start=a, end=b, text=f"S{i}.", paragraph=p)
             for i, (a, b, p) in enumerate(segments)]  # fmt: skip
    return JobAudio(job_id, samples, RATE, timed)


def record(*chapters: list[str]) -> BookRecord:
    return BookRecord(
        book="b",
        chapters=[
            Chapter(number=n, title=f"C{n}", jobs=[ChapterJob(id=i, digest=DIGEST, characters=9,
                                                              paragraphs=2) for i in ids])
            for n, ids in enumerate(chapters, 1)
        ],
    )  # fmt: skip


def test_a_paragraph_pause_goes_before_each_paragraphs_first_sentence() -> None:
    jobs = {"b-c001": audio("b-c001", 3.0, [(0, 1, 0), (1, 2, 0), (2, 3, 1)]),
            "b-c002": audio("b-c002", 2.0, [(0, 1, 0), (1, 2, 1)])}  # fmt: skip
    options = BookOptions(paragraph_pause_s=0.5, chapter_pause_s=2.0)
    layout = lay_out(record(["b-c001"], ["b-c002"]), jobs, options)
    book = np.concatenate(layout.parts)
    # Chapter 1: 2 s, a 0.5-s pause, 1 s; the chapter pause; chapter 2: 1 s, pause, 1 s.
    assert layout.spans == [(0, round(3.5 * RATE)), (round(5.5 * RATE), round(8.0 * RATE))]
    assert book.size == 8 * RATE
    silent = [(2.0, 2.5), (3.5, 5.5), (6.5, 7.0)]
    for a, b in silent:
        assert not book[round(a * RATE) : round(b * RATE)].any()
    assert book[round(2.5 * RATE) : round(3.5 * RATE)].all()
    starts = [c.start for c in layout.cues]
    assert starts == pytest.approx([0, 1, 2.5, 5.5, 7.0])
    assert [c.end for c in layout.cues] == pytest.approx([1, 2, 3.5, 6.5, 8.0])


def test_the_parts_of_a_split_chapter_meet_at_a_paragraph_pause() -> None:
    jobs = {"b-c001.p001": audio("b-c001.p001", 1.0, [(0, 1, 0)]),
            "b-c001.p002": audio("b-c001.p002", 1.0, [(0, 1, 0)])}  # fmt: skip
    layout = lay_out(record(["b-c001.p001", "b-c001.p002"]), jobs,
                     BookOptions(paragraph_pause_s=0.25))  # fmt: skip
    assert layout.spans == [(0, round(2.25 * RATE))]
    assert [c.start for c in layout.cues] == pytest.approx([0, 1.25])


def test_audio_at_another_rate_is_resampled_to_the_books() -> None:
    slow = JobAudio("b-c002", np.full(16_000, 0.1, dtype=np.float32), 16_000, [])
    jobs = {"b-c001": audio("b-c001", 1.0, [(0, 1, 0)]), "b-c002": slow}
    layout = lay_out(record(["b-c001"], ["b-c002"]), jobs, BookOptions(chapter_pause_s=1.0))
    assert layout.spans[1] == (2 * RATE, 3 * RATE)
