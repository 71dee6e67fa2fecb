"""The local speech server's fault injection: which pieces, and what each fault does."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from tts_fleet.local.speech_faults import (
    DROP_SHARE,
    KINDS,
    SILENCE_SECONDS,
    TRUNCATE_KEEP,
    FaultAudit,
    FaultPlan,
    FaultSpecError,
    piece_texts,
    reshape,
    rewrite,
    spoken_words,
    stretch,
    words_of,
)
from worker.jobs import PieceQa, QaRecord

TEXT = "It was a bright cold day in April. The clocks were striking thirteen and nobody minded."
RATE = 24_000


def test_parse_keeps_the_kinds_given_in_their_order() -> None:
    plan = FaultPlan.parse("garble=0.1, runaway=0.05,silence=0", seed=3)
    assert plan.rates == {"runaway": 0.05, "garble": 0.1}
    assert plan.seed == 3
    assert plan.describe() == "runaway=0.05,garble=0.1"
    assert not FaultPlan.parse("").active


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("babble=0.1", "unknown fault 'babble'"),
        ("runaway", "give a share"),
        ("runaway=lots", "is not a number"),
        ("runaway=1.5", "not a share between 0 and 1"),
        ("runaway=0.6,truncate=0.6", "add up to 1.2"),
    ],
)
def test_bad_specs_are_one_line_naming_the_problem(spec: str, problem: str) -> None:
    with pytest.raises(FaultSpecError, match=problem):
        FaultPlan.parse(spec)


def test_each_kind_hits_its_share_of_requests() -> None:
    plan = FaultPlan.parse("runaway=0.04,truncate=0.04,silence=0.04,drop=0.04,garble=0.04", 1)
    picks = Counter(plan.pick(f"piece {i}", "Vivian", None) for i in range(20_000))
    for kind in KINDS:
        assert 0.033 < picks[kind] / 20_000 < 0.047, (kind, picks[kind])
    assert 0.78 < picks[None] / 20_000 < 0.82


def test_the_pick_is_a_function_of_the_seeds_and_the_request() -> None:
    plan = FaultPlan.parse("truncate=0.5", 7)
    first = [plan.pick(f"text {i}", "Ryan", 11) for i in range(200)]
    assert first == [plan.pick(f"text {i}", "Ryan", 11) for i in range(200)]
    # Another request seed, or another fault seed, is a fresh draw: a re-render can be clean.
    assert first != [plan.pick(f"text {i}", "Ryan", 12) for i in range(200)]
    other = FaultPlan.parse("truncate=0.5", 8)
    assert first != [other.pick(f"text {i}", "Ryan", 11) for i in range(200)]


def test_a_rate_of_one_faults_every_rendering() -> None:
    plan = FaultPlan.parse("silence=1", 0)
    assert {plan.pick(TEXT, "Ryan", seed) for seed in range(50)} == {"silence"}


def test_drop_loses_a_sentence_or_a_run_of_words() -> None:
    words = words_of(TEXT)
    for seed in range(30):
        said = rewrite("drop", TEXT, random.Random(seed))
        kept = words_of(said.text)
        lost = 1 - len(kept) / len(words)
        assert DROP_SHARE[0] - 0.1 <= lost <= DROP_SHARE[1] + 0.1
        assert said.stretch
        assert all(w in words for w in kept)


def test_garble_replaces_words_in_place() -> None:
    said = rewrite("garble", TEXT, random.Random(4))
    before, after = words_of(TEXT), words_of(said.text)
    assert len(after) == len(before)
    changed = sum(a != b for a, b in zip(before, after, strict=True))
    assert changed >= len(before) // 2
    assert not said.stretch


def test_cjk_text_is_counted_in_characters() -> None:
    text = "今天天气很好我们去公园散步吧"
    said = rewrite("garble", text, random.Random(1))
    assert len(said.text) == len(text) and said.text != text


def test_audio_faults_leave_text_alone() -> None:
    for kind in ("runaway", "truncate", "silence", None):
        assert rewrite(kind, TEXT, random.Random(0)).text == TEXT


def speech(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)


def test_truncate_cuts_the_end_off() -> None:
    audio = speech(4.0)
    cut = reshape("truncate", audio, RATE, 10**9, random.Random(2))
    assert TRUNCATE_KEEP[0] <= cut.audio.size / audio.size <= TRUNCATE_KEEP[1]
    assert np.array_equal(cut.audio, audio[: cut.audio.size])
    assert cut.words_kept == pytest.approx(cut.audio.size / audio.size)


def test_silence_inserts_a_long_digital_gap_mid_piece() -> None:
    audio = speech(4.0)
    out = reshape("silence", audio, RATE, 10**9, random.Random(3)).audio
    gap = out.size - audio.size
    assert SILENCE_SECONDS[0] * RATE <= gap <= SILENCE_SECONDS[1] * RATE
    zero = np.flatnonzero(out == 0)
    # The longest run of zeros is the gap, and it starts well inside the speech.
    runs = np.split(zero, np.flatnonzero(np.diff(zero) != 1) + 1)
    longest = max(runs, key=len)
    assert len(longest) >= gap and 0.3 * audio.size < longest[0] < 0.7 * audio.size


def test_runaway_runs_past_the_budget() -> None:
    audio = speech(2.0)
    budget = 12 * RATE
    out = reshape("runaway", audio, RATE, budget, random.Random(0))
    assert out.audio.size > budget  # the engine's budget cut is what stops it
    assert out.babble_repeats >= 3


def test_stretch_draws_a_drop_out_to_the_full_length() -> None:
    out = stretch(speech(2.0), 4 * RATE, random.Random(0))
    assert 0.9 * 4 * RATE <= out.size <= 4 * RATE


def test_spoken_words_follow_what_is_kept() -> None:
    assert spoken_words("one two three four", 0.5) == "one two"
    assert spoken_words("one two", 1.0, babble_repeats=2) == "one two one two one two"
    assert spoken_words("今天很好", 0.5) == "今天"


def seeds_with(plan: FaultPlan, text: str, voice: str, faults: list[str | None]) -> list[int]:
    """Request seeds the plan gives exactly these faults, in order."""
    found: list[int] = []
    seed = 0
    for wanted in faults:
        while plan.pick(text, voice, seed) != wanted:
            seed += 1
        found.append(seed)
        seed += 1
    return found


def record(seeds: list[int], passed: bool, text: str = TEXT) -> QaRecord:
    piece = PieceQa(
        characters=len(text), seconds=1.0, expected_seconds=1.0, longest_silence_s=0.1,
        attempts=len(seeds), seeds=seeds, passed=passed,
    )  # fmt: skip
    return QaRecord(mode="asr", passed=passed, rerenders=len(seeds) - 1, pieces=[piece])


def test_the_audit_tells_caught_faults_from_delivered_ones() -> None:
    plan = FaultPlan.parse("truncate=0.2,garble=0.2", 5)
    audit = FaultAudit()
    # Caught: a truncated attempt, then a clean one kept.
    audit.add(plan, TEXT, "ryan", record(seeds_with(plan, TEXT, "Ryan", ["truncate", None]), True))
    # Delivered: the kept (last, passing) attempt was garbled.
    audit.add(plan, TEXT, "Ryan", record(seeds_with(plan, TEXT, "Ryan", ["garble"]), True))
    # A quality failure: every attempt faulted, nothing delivered as done.
    every = seeds_with(plan, TEXT, "Ryan", ["garble", "truncate", "garble"])
    audit.add(plan, TEXT, "Ryan", record(every, False))
    # A clean attempt rejected, then a clean one kept: a false rejection.
    audit.add(plan, TEXT, "Ryan", record(seeds_with(plan, TEXT, "Ryan", [None, None]), True))
    assert audit.faulted_attempts == Counter({"garble": 3, "truncate": 2})
    assert audit.delivered_bad == Counter({"garble": 1})
    assert audit.caught == 4
    assert (audit.pieces, audit.attempts, audit.rerendered) == (4, 8, 4)
    assert (audit.clean_attempts, audit.clean_rejected, audit.quality_failed) == (3, 1, 1)


def test_piece_texts_are_the_trimmed_contiguous_cuts() -> None:
    text = "First sentence here.  Second one follows. Third."
    cuts = ["First sentence here.", "Second one follows.", "Third."]
    pieces = [
        PieceQa(characters=len(c), seconds=1, expected_seconds=1, longest_silence_s=0,
                attempts=1, seeds=[1], passed=True)
        for c in cuts
    ]  # fmt: skip
    qa = QaRecord(mode="basic", passed=True, rerenders=0, pieces=pieces)
    assert piece_texts(text, qa) == cuts
