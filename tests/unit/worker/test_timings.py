"""Sentence timings of a job's joined audio (worker/timings.py), on synthetic pieces."""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
import pytest

from worker.jobs import Job, WordTime
from worker.qa.guard import Guard
from worker.speech import SpeechClient
from worker.timings import TimedPiece, aligner_words, segments, sentences, word_times

RATE = 24_000


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2")


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), dtype="<i2")


def pcm(*parts: np.ndarray) -> bytes:
    return np.concatenate(parts).tobytes()


def test_sentences_and_paragraph_ends_cut_the_text() -> None:
    text = "Chapter One\n\nIt was late. Was it?\n\nYes."
    assert [s for _, s in sentences(text)] == ["Chapter One", "It was late.", "Was it?", "Yes."]
    assert all(text[at:].startswith(s) for at, s in sentences(text))


def test_an_estimated_boundary_moves_to_the_pause_between_sentences() -> None:
    # By characters the cut would fall at 1.6 s; the speaker paused at 1.0-1.4 s.
    text = "A short one here. And then a much longer second sentence."
    audio = pcm(tone(1.0), silence(0.4), tone(2.6))
    found = segments(text, [TimedPiece(text, audio)], RATE, len)
    assert [s.text for s in found] == [
        "A short one here.",
        "And then a much longer second sentence.",
    ]
    assert found[0].start == 0.0 and found[-1].end == 4.0
    assert 1.0 <= found[0].end == found[1].start <= 1.4
    assert all(s.timing == "estimated" and s.words is None for s in found)


def test_pieces_follow_each_other_and_carry_their_paragraph() -> None:
    text = "First para one. First para two.\n\nSecond para."
    one, two = "First para one. First para two.", "Second para."
    found = segments(
        text,
        [TimedPiece(one, pcm(tone(1.0), silence(0.3), tone(1.0))), TimedPiece(two, pcm(tone(1.5)))],
        RATE,
        len,
    )
    assert [s.paragraph for s in found] == [0, 0, 1]
    assert found[2].start == 2.3 and found[2].end == 3.8
    starts = [s.start for s in found]
    assert starts == sorted(starts) and all(s.start < s.end for s in found)


def test_word_timestamps_give_aligned_sentences_shifted_by_their_piece() -> None:
    one, two = "Hi.", "Hello there. Bye now."
    text = f"{one} {two}"
    words = tuple(
        WordTime(word=w, start=a, end=b)
        for w, a, b in [
            ("Hello", 0.1, 0.4),
            ("there", 0.5, 0.9),
            ("Bye", 1.6, 1.8),
            ("now", 1.9, 2.2),
        ]
    )
    pieces = [TimedPiece(one, pcm(tone(1.0))), TimedPiece(two, pcm(tone(2.5)), words)]
    found = segments(text, pieces, RATE, len)
    assert [s.timing for s in found] == ["estimated", "aligned", "aligned"]
    # The gap between "there" (0.9) and "Bye" (1.6) is split at its middle, after the 1 s piece.
    assert found[1].start == 1.0 and found[1].end == 2.25 and found[2].end == 3.5
    assert found[2].words is not None
    assert [(w.word, w.start) for w in found[2].words] == [("Bye", 2.6), ("now", 2.9)]


def test_words_that_do_not_match_the_text_fall_back_to_an_estimate() -> None:
    words = (WordTime(word="Hello", start=0.0, end=0.5),)  # two words spoken, one timed
    found = segments("Hello there.", [TimedPiece("Hello there.", pcm(tone(1.0)), words)], RATE, len)
    assert found[0].timing == "estimated" and (found[0].start, found[0].end) == (0.0, 1.0)


def test_the_header_is_read_in_seconds_of_the_stretched_audio() -> None:
    header = json.dumps([{"word": "Hi", "start_ms": 100, "end_ms": 500}])
    (word,) = word_times({"x-word-timestamps": header}, speed=2.0) or ()
    assert (word.word, word.start, word.end) == ("Hi", 0.05, 0.25)
    for bad in (
        "not json",
        json.dumps({"a": 1}),
        json.dumps([{"word": "Hi", "start_ms": -1, "end_ms": 2}]),
    ):
        assert word_times({"x-word-timestamps": bad}, 1.0) is None
    assert word_times({"x-word-timestamps-omitted": "oversize"}, 1.0) is None


def test_aligner_words_drop_punctuation_and_cut_han_characters() -> None:
    assert aligner_words("Don't stop — now! 你好world") == [
        "Don't",
        "stop",
        "now",
        "你",
        "好",
        "world",
    ]


def aligning_server(seconds_per_piece: float) -> tuple[httpx.MockTransport, list[dict[str, Any]]]:
    """Answers every piece with a tone and, when asked, word timestamps spread over it at speed
    1 (as the aligner measures before the server's time stretch)."""
    bodies: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        words = aligner_words(body["input"])
        audio = pcm(tone(seconds_per_piece / body["speed"]))
        share = seconds_per_piece * 1000 / len(words)
        stamps = [{"word": w, "start_ms": round(i * share), "end_ms": round((i + 0.8) * share)}
                  for i, w in enumerate(words)]  # fmt: skip
        headers = {"X-Word-Timestamps": json.dumps(stamps)} if body.get("word_timestamps") else {}
        return httpx.Response(200, content=audio, headers=headers)

    return httpx.MockTransport(answer), bodies


@pytest.mark.parametrize("guard", [None, Guard("basic", retries=0, on_fail="keep")])
def test_the_speech_client_asks_for_words_and_the_segments_carry_them(guard: Guard | None) -> None:
    transport, bodies = aligning_server(2.0)
    client = SpeechClient("http://tts", chunk_chars=60, transport=transport, guard=guard,
                          word_timestamps=True)  # fmt: skip
    text = "One two three four. Five six seven.\n\nEight nine ten eleven twelve thirteen."
    speech = client.synthesize(Job(text=text, speed=2.0))
    assert all(body["word_timestamps"] is True for body in bodies) and len(bodies) == 2
    found = speech.segments or []
    assert [s.text for s in found] == ["One two three four.", "Five six seven.",
                                       "Eight nine ten eleven twelve thirteen."]  # fmt: skip
    assert [s.timing for s in found] == ["aligned"] * 3 and [s.paragraph for s in found] == [
        0,
        0,
        1,
    ]
    # Two pieces of 1 s each (2 s of model audio at speed 2): the second piece starts at 1 s.
    assert found[2].start == 1.0 and found[2].end == 2.0
    assert found[2].words is not None and found[2].words[0].start == 1.0


def test_without_the_setting_no_words_are_asked_for() -> None:
    transport, bodies = aligning_server(1.0)
    speech = SpeechClient("http://tts", transport=transport).synthesize(Job(text="Hi there. Bye."))
    assert "word_timestamps" not in bodies[0]
    assert [s.timing for s in speech.segments or []] == ["estimated", "estimated"]
