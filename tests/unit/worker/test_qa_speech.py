"""The speech client with output checks on (worker/speech.py + worker/qa/guard.py), against a
scripted server (httpx.MockTransport) that answers each seed with a chosen fault: a bad piece
is asked for again with the next seed, the first passing attempt is used, and a piece that
never passes is reported (and, with QA_ON_FAIL=fail, ends the job's rendering)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.lib.fake_worker import (
    NO_END_OF_SPEECH,
    Fault,
    FaultyTts,
    clean,
    long_pause,
    reading,
    runaway,
    truncate,
)
from worker.jobs import Job
from worker.qa.checks import CODEC_FRAME_RATE, RUNAWAY, SILENCE, TOO_SHORT, expected_seconds
from worker.qa.guard import Guard, seed_for
from worker.speech import SpeechClient, TransientSpeechError, speech_pieces

SENTENCE = "The lighthouse keeper climbed the stairs every evening at dusk."
JOB = Job(id="book-ch01", text=f"{SENTENCE} {SENTENCE} {SENTENCE}", format="pcm")


def client(server: FaultyTts, guard: Guard | None, chunk_chars: int = 80) -> SpeechClient:
    return server.client(guard, chunk_chars)


def test_every_request_carries_a_seed_and_a_ceiling_from_its_text() -> None:
    server = FaultyTts()
    speech = client(server, Guard()).synthesize(JOB)
    pieces = speech_pieces(JOB.text, 80)
    assert len(pieces) == len(server.bodies) == 3
    first = seed_for(JOB.job_id, 0)
    for body, piece in zip(server.bodies, pieces, strict=True):
        assert body["seed"] == first  # every piece's first attempt: one seed, one voice
        assert 1 <= body["max_new_tokens"] < 4096
        assert body["max_new_tokens"] > expected_seconds(piece) * CODEC_FRAME_RATE
    assert speech.qa is not None and speech.qa.passed and speech.qa.rerenders == 0
    assert [p.seeds for p in speech.qa.pieces] == [[first]] * 3
    assert (speech.checked, speech.rejected) == (3, 0)


def test_seeds_follow_the_job_and_the_attempt_so_a_redelivery_renders_the_same() -> None:
    assert seed_for("a", 0) == seed_for("a", 0)
    assert len({seed_for("a", 0), seed_for("a", 1), seed_for("b", 0)}) == 3
    assert all(0 <= seed_for("x", n) < 2**31 for n in range(5))
    one, two = FaultyTts(), FaultyTts()
    client(one, Guard()).synthesize(JOB)
    client(two, Guard()).synthesize(JOB)
    assert one.bodies == two.bodies


@pytest.mark.parametrize(
    ("fault", "check"), [(runaway, RUNAWAY), (truncate, TOO_SHORT), (long_pause, SILENCE)]
)
def test_a_bad_piece_is_rendered_again_with_the_next_seed(fault: Fault, check: str) -> None:
    first, second = seed_for(JOB.job_id, 0), seed_for(JOB.job_id, 1)
    server = FaultyTts({first: fault})
    job = Job(id=JOB.job_id, text=SENTENCE, format="pcm")
    speech = client(server, Guard()).synthesize(job)
    assert server.seeds() == [first, second]
    assert speech.qa is not None and speech.qa.passed and speech.qa.rerenders == 1
    [piece] = speech.qa.pieces
    assert (piece.attempts, piece.seeds, piece.passed, piece.failed) == (
        2,
        [first, second],
        True,
        [],
    )
    assert speech.audio == reading(expected_seconds(SENTENCE)).tobytes()  # the second attempt's
    assert (speech.checked, speech.rejected, speech.rejected_by) == (2, 1, {check: 1})


def test_a_piece_that_never_passes_fails_the_job_and_stops_its_rendering() -> None:
    server = FaultyTts(default=runaway)
    speech = client(server, Guard(retries=2)).synthesize(JOB)
    seeds = [seed_for(JOB.job_id, n) for n in range(3)]
    assert server.seeds() == seeds  # three attempts at the first piece, none at the rest
    qa = speech.qa
    assert qa is not None and not qa.passed and qa.rerenders == 2
    [piece] = qa.pieces
    assert piece.seeds == seeds and not piece.passed
    assert piece.failed[0].startswith("runaway: ")
    assert qa.reason is not None and qa.reason.startswith("piece 1 (63 characters, ")
    assert "runaway: " in qa.reason and "max_new_tokens=" in qa.reason
    assert str(seeds[0]) in qa.reason


def test_keep_renders_every_piece_and_keeps_the_least_bad_attempt() -> None:
    seeds = [seed_for(JOB.job_id, n) for n in range(2)]
    # The first attempt runs away, the second only pauses too long: the second is kept.
    server = FaultyTts({seeds[0]: runaway, seeds[1]: long_pause}, default=clean)
    guard = Guard(retries=1, on_fail="keep")
    speech = client(server, guard).synthesize(Job(id=JOB.job_id, text=SENTENCE, format="pcm"))
    assert speech.qa is not None and not speech.qa.passed
    [piece] = speech.qa.pieces
    assert piece.failed == [f for f in piece.failed if f.startswith("silence: ")] != []
    assert speech.duration_s == pytest.approx(expected_seconds(SENTENCE) + 4, abs=0.01)
    server = FaultyTts(default=runaway)
    speech = client(server, Guard(retries=1, on_fail="keep")).synthesize(JOB)
    assert len(server.bodies) == 6 and len(speech.qa.pieces) == 3  # type: ignore[union-attr]


def test_a_runaway_the_server_refuses_is_rendered_again_not_retried_with_its_seed() -> None:
    first, second = seed_for(JOB.job_id, 0), seed_for(JOB.job_id, 1)
    server = FaultyTts({first: NO_END_OF_SPEECH})
    speech = client(server, Guard()).synthesize(Job(id=JOB.job_id, text=SENTENCE, format="pcm"))
    assert server.seeds() == [first, second]
    assert speech.qa is not None and speech.qa.passed
    assert speech.rejected_by == {RUNAWAY: 1}


class Hears:
    """A recognizer that hears `heard[seed]` (the guard's input, not the thing under test)."""

    def __init__(self, server: FaultyTts, heard: dict[int, str]) -> None:
        self.server, self.heard = server, heard
        self.calls = 0

    def transcribe(self, pcm: bytes, rate: int, language: str = "Auto") -> str:
        self.calls += 1
        body = self.server.bodies[-1]
        return self.heard.get(body["seed"], str(body["input"]))


def test_asr_mode_renders_again_a_piece_heard_wrong_and_records_its_wer() -> None:
    first = seed_for(JOB.job_id, 0)
    server = FaultyTts({seed_for(JOB.job_id, 2): runaway})
    asr = Hears(server, {first: "the light house keeper climbed"})  # a dropped half
    guard = Guard(mode="asr", max_wer=0.2, asr=asr)
    speech = client(server, guard).synthesize(Job(id=JOB.job_id, text=SENTENCE, format="pcm"))
    assert speech.qa is not None and speech.qa.passed and speech.qa.mode == "asr"
    [piece] = speech.qa.pieces
    assert piece.attempts == 2 and piece.wer == 0.0
    assert speech.rejected_by == {"transcript": 1}
    assert asr.calls == 2


def test_asr_mode_does_not_transcribe_a_piece_the_signal_checks_failed() -> None:
    server = FaultyTts(default=runaway)
    asr = Hears(server, {})
    guard = Guard(mode="asr", retries=1, asr=asr)
    client(server, guard).synthesize(Job(id=JOB.job_id, text=SENTENCE, format="pcm"))
    assert asr.calls == 0


def test_a_recognizer_that_does_not_answer_is_transient() -> None:
    from worker.qa.asr import AsrClient

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    asr = AsrClient("http://asr", "m", transport=httpx.MockTransport(refuse))
    with pytest.raises(TransientSpeechError, match="transcript check: ASR server unreachable"):
        client(FaultyTts(), Guard(mode="asr", asr=asr)).synthesize(JOB)


def test_with_checks_off_the_request_is_as_before() -> None:
    server = FaultyTts(default=runaway)  # would fail every check
    speech = SpeechClient("http://tts", transport=httpx.MockTransport(server)).synthesize(
        Job(text=SENTENCE, format="pcm")
    )
    assert speech.qa is None
    assert all("seed" not in body and "max_new_tokens" not in body for body in server.bodies)


def test_a_ceiling_lowered_by_the_context_is_the_context_limit_not_a_runaway() -> None:
    # One huge piece: its ceiling is the talker's room, and reaching it means "too long": the
    # piece is split, as without checks, instead of being rendered again.
    text = "This sentence is part of a very long chapter of a book. " * 120
    job = Job(id="long", text=text, format="pcm")

    def context_limited(body: dict, audio: np.ndarray) -> tuple[np.ndarray, int | None]:
        return runaway(body, audio) if body["max_new_tokens"] == cap else clean(body, audio)

    server = FaultyTts(default=context_limited)
    speech_client = client(server, Guard(), chunk_chars=100_000)
    cap, clamped = speech_client.frame_ceiling(job, text)
    assert clamped and cap < 4096
    speech = speech_client.synthesize(job)
    assert server.bodies[0]["max_new_tokens"] == cap
    assert len(server.bodies) == speech.pieces + 1 >= 3  # the whole, then its parts once each
    assert speech.qa is not None and speech.qa.passed


def test_one_misheard_word_of_a_short_piece_is_no_failure_two_are() -> None:
    job = Job(id="short", text="Turn left now.", format="pcm")
    first = seed_for("short", 0)
    server = FaultyTts()
    one = Hears(server, {first: "turn lift now"})  # a rate of 0.33, one error
    speech = client(server, Guard(mode="asr", asr=one)).synthesize(job)
    assert speech.qa is not None and speech.qa.passed
    assert speech.qa.pieces[0].wer == pytest.approx(1 / 3, abs=1e-4)
    server = FaultyTts()
    two = Hears(server, {first: "burn lift now"})
    speech = client(server, Guard(mode="asr", asr=two)).synthesize(job)
    assert speech.qa is not None and speech.qa.rerenders == 1
    assert speech.rejected_by == {"transcript": 1}
