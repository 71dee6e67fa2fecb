"""The output-check policy for one worker: which checks run (QA_MODE), how many times a bad
piece is asked for again (QA_RETRIES) and with which seeds, the transcript's bar (QA_MAX_WER),
which attempt of a piece is used, and the report a manifest carries.

Seeds are derived from the job id and the attempt number, never drawn: a redelivered job is
rendered again exactly as before (vLLM-Omni: "When set, ensures deterministic output for the
same input text and seed value", OpenAICreateSpeechRequest.seed), and every piece's first
attempt shares one seed, so the pieces of one job sound alike. A piece's attempts stop at the
first that passes every check; when none does, the least bad is kept: the fewest failed checks,
then the lowest word error rate, then the duration nearest the expected one.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from worker.jobs import Job, PieceQa, QaRecord, WordTime
from worker.qa.asr import AsrClient
from worker.qa.checks import (
    RUNAWAY,
    TRANSCRIPT,
    Finding,
    Signal,
    check_signal,
    expected_seconds,
    measure,
)
from worker.qa.wer import transcript_errors
from worker.settings import Settings

# A transcript fails on its word error rate only with at least this many errors: one misheard
# word of a three-word piece (a name, a number) is a rate of 0.33 but no sign of a dropped
# sentence or garble, which cost several words each.
MIN_TRANSCRIPT_ERRORS = 2
# A vLLM-Omni seed is a signed 64-bit integer; 31 bits keep it positive in every client.
SEED_BITS = 31
EXCERPT_CHARS = 40


class Transcriber(Protocol):
    """What the transcript check needs of an ASR client (worker/qa/asr.py AsrClient)."""

    def transcribe(self, pcm: bytes, rate: int, language: str = "Auto") -> str: ...


def seed_for(job_id: str, attempt: int) -> int:
    """The seed of a job's `attempt` (0 for the first) of every piece."""
    digest = hashlib.sha256(f"{job_id}#{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - SEED_BITS)


@dataclass(frozen=True)
class Attempt:
    """One rendering of a piece and what the checks found in it."""

    seed: int
    pcm: bytes
    expected_s: float
    signal: Signal | None  # None: the server returned no audio (it reported a runaway)
    findings: list[Finding]
    wer: float | None = None

    @property
    def passed(self) -> bool:
        return not self.findings

    def badness(self) -> tuple[int, float, float]:
        seconds = self.signal.seconds if self.signal is not None else 0.0
        stretch = abs(math.log(max(seconds, 1e-3) / max(self.expected_s, 1e-3)))
        return (len(self.findings), self.wer or 0.0, stretch)


@dataclass(frozen=True)
class Rendered:
    """A piece as it goes into the job: the PCM used and its report (None with checks off)."""

    pcm: bytes
    qa: PieceQa | None = None
    # Every attempt's failed checks, by name, for the metrics.
    rejected: list[str] = field(default_factory=list)
    # The piece's text, and the server's word timestamps of the attempt used (worker/timings.py).
    text: str = ""
    words: tuple[WordTime, ...] | None = None


class Guard:
    """Thread-safe (no state): judges attempts, picks one per piece, reports per job."""

    def __init__(
        self,
        mode: str = "basic",
        retries: int = 2,
        max_wer: float = 0.2,
        on_fail: str = "fail",
        asr: Transcriber | None = None,
    ) -> None:
        if mode == "asr" and asr is None:
            raise ValueError("mode asr needs an ASR client")
        self.mode, self.retries, self.max_wer, self.on_fail = mode, retries, max_wer, on_fail
        self.asr = asr

    @property
    def attempts(self) -> int:
        return 1 + self.retries

    def judge(
        self,
        job: Job,
        text: str,
        pcm: bytes,
        rate: int,
        frames: int | None,
        cap: int | None,
        seed: int,
    ) -> Attempt:
        """The checks of one attempt; the transcript only for audio that passed the signal
        checks (a runaway's transcript says nothing new). Raises AsrError (asr.py) when the
        recognizer gives no transcript."""
        samples = np.frombuffer(pcm, dtype="<i2")
        signal = measure(samples, rate)
        expected = expected_seconds(text, job.speed)
        findings = check_signal(text, signal, job.speed, frames, cap)
        wer = None
        if self.mode == "asr" and not findings and self.asr is not None:
            heard = self.asr.transcribe(pcm, rate, job.language)
            errors, tokens = transcript_errors(text, heard, job.language)
            wer = errors / tokens if tokens else float(errors > 0)
            if wer > self.max_wer and errors >= MIN_TRANSCRIPT_ERRORS:
                findings.append(
                    Finding(
                        TRANSCRIPT,
                        f"word error rate {wer:.2f} above {self.max_wer:g}, {errors} errors in"
                        f" {tokens} words (heard {_excerpt(heard)!r})",
                    )
                )
        return Attempt(seed, pcm, expected, signal, findings, wer)

    def ran_away(self, text: str, speed: float, seed: int, detail: str) -> Attempt:
        """An attempt the server itself refused as incomplete (no end-of-speech before the
        ceiling: vLLM-Omni answers 500 for the Base task)."""
        return Attempt(seed, b"", expected_seconds(text, speed), None, [Finding(RUNAWAY, detail)])

    def chosen(self, text: str, attempts: list[Attempt]) -> Rendered:
        """The attempt a piece keeps: the first that passed, else the least bad."""
        passing = [a for a in attempts if a.passed]
        best = passing[0] if passing else min(attempts, key=Attempt.badness)
        signal = best.signal
        record = PieceQa(
            characters=len(text),
            seconds=round(signal.seconds if signal else 0.0, 3),
            expected_seconds=round(best.expected_s, 3),
            longest_silence_s=round(signal.longest_silence_s if signal else 0.0, 3),
            wer=None if best.wer is None else round(best.wer, 4),
            attempts=len(attempts),
            seeds=[a.seed for a in attempts],
            passed=best.passed,
            failed=[str(f) for f in best.findings],
            excerpt=_excerpt(text),
        )
        rejected = [f.check for a in attempts for f in a.findings]
        return Rendered(best.pcm, record, rejected, text)

    def stops_at(self, rendered: Rendered) -> bool:
        """Whether the rest of the job is not worth rendering: a piece failed for good and the
        job will fail (QA_ON_FAIL=fail)."""
        return self.on_fail == "fail" and rendered.qa is not None and not rendered.qa.passed

    def report(self, pieces: list[Rendered]) -> QaRecord:
        """The manifest's `qa` for a job rendered as `pieces` (up to the first that failed for
        good, when the job stopped there)."""
        records = [p.qa for p in pieces if p.qa is not None]
        failed = next((i for i, r in enumerate(records) if not r.passed), None)
        reason = None
        if failed is not None:
            piece = records[failed]
            reason = (
                f"piece {failed + 1} ({piece.characters} characters, {piece.excerpt!r}) failed "
                f"every attempt ({piece.attempts}, seeds {', '.join(map(str, piece.seeds))}): "
                + "; ".join(piece.failed)
            )
        return QaRecord(
            mode=self.mode,
            passed=failed is None,
            rerenders=sum(r.attempts - 1 for r in records),
            reason=reason,
            pieces=records,
        )


def rejected_by(pieces: list[Rendered]) -> dict[str, int]:
    """How many attempts each check rejected, over a job's pieces (for the metrics)."""
    return dict(Counter(check for p in pieces for check in p.rejected))


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "…"


def guard_from(settings: Settings) -> Guard | None:
    """The worker's guard from its environment (QA_*, ASR_*); None with QA_MODE=off."""
    if settings.qa_mode == "off":
        return None
    asr = AsrClient(settings.asr_url, settings.asr_model) if settings.qa_mode == "asr" else None
    return Guard(
        settings.qa_mode, settings.qa_retries, settings.qa_max_wer, settings.qa_on_fail, asr
    )
