"""The signal checks of one piece of speech, before the pieces are joined.

A piece is bad when its audio is not a reading of its text: the model ran away (never emitted
end-of-speech: babble or silence up to the token limit), stopped early, paused for seconds in
mid-sentence, or returned no signal at all (vllm-omni#4576, #6158; QwenLM/Qwen3-TTS#181, #258).
Each check here looks only at the samples, the text and the request; the transcript check is
`wer.py`'s.

Expected duration. A piece should last about its characters times a per-script rate, over the
request's `speed` (vLLM-Omni time-stretches after decoding, so audio scales as 1/speed):
- Latin, Cyrillic and the rest, spaces and punctuation included: 0.066 s a character (~15 a
  second), what Qwen3-TTS speaks (worker/speech.py's cut rule and the stand-in's tone backend
  use the same figure) and an audiobook pace: 150-160 words a minute at ~5.9 characters a
  word with its space is 14.8-15.7 characters a second;
- Han: 0.25 s a character. Mandarin read speech runs 5.18 syllables a second, 0.19 s a
  character-syllable (Pellegrino, Coupé & Marsico 2011, "A cross-language perspective on
  speech information rate", Language 87(3), table of syllabic rates); Qwen3-TTS reads slower,
  ~4 a second, as speech.py and the stand-in assume;
- kana: 0.13 s, one mora: Japanese read speech runs 7.84 morae a second (ibid.);
- hangul: 0.17 s a syllable block, between the two (the espeak-ng stand-in measures 0.13-0.17);
- a digit: three Latin characters, since numbers are said as words ("1984" is "nineteen
  eighty-four").

Bounds. Readers, voices and languages differ (French packs more letters into a syllable than
English: Pellegrino et al. measure 7.18 syllables a second against 6.19; the espeak-ng
stand-in's French lasts 0.61-0.67 of its expected seconds, its English 0.78-1.04), and an
instruction such as "slowly" stretches speech. So a piece passes from 0.4x its expected seconds
less 0.5 s to 2.5x plus 1.5 s (the slack covers the onset and tail of a one-word piece).
Measured on the stand-in (tests/unit/worker/test_qa_checks.py, 276 pieces, none rejected):
espeak-ng's English, German, French, Spanish, Italian, Portuguese, Russian, Chinese, Korean
and kana all fall inside (0.61-1.10); Japanese with kanji does not (espeak-ng reads each kanji
as the character's name, ~0.5 s).

Runaway. Every request carries `max_new_tokens`: 3x the expected seconds at speed 1 plus 3 s, in
codec frames at 12.5 a second (Qwen3-TTS-12Hz; frames are generated before the time-stretch),
far below the talker's 4,096-token context. A piece whose frames reach it ran away: that
ceiling is above the duration bound, so a finished reading never reaches it.

Silence. A 20-ms frame is silent below -35 dB of the piece's loud frames (their 95th
percentile RMS) or below -60 dBFS. Leading silence over 1.5 s, trailing over 2 s or any pause
inside over 2 s (all at speed 1: slower speech stretches them) is bad; sentence pauses of
Qwen3-TTS and espeak-ng are well under a second.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

# Seconds per character, by script (the sources are in the module docstring).
SECONDS_PER_CHAR = 0.066
SECONDS_PER_HAN = 0.25
SECONDS_PER_KANA = 0.13
SECONDS_PER_HANGUL = 0.17
CHARS_PER_DIGIT = 3
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HANGUL = re.compile(r"[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
_DIGIT = re.compile(r"\d")
# The duration bounds: [MIN_RATIO x expected - LOW_SLACK_S, MAX_RATIO x expected + HIGH_SLACK_S].
MIN_RATIO = 0.4
LOW_SLACK_S = 0.5
MAX_RATIO = 2.5
HIGH_SLACK_S = 1.5
# Qwen3-TTS-12Hz emits 12.5 codec frames per second of audio (vLLM-Omni's talker tokens).
CODEC_FRAME_RATE = 12.5
CAP_HEADROOM = 3.0
CAP_SLACK_S = 3.0
# Silence: 20-ms frames, silent below -35 dB of the loud frames or below -60 dBFS.
FRAME_S = 0.02
LOUD_PERCENTILE = 95
SILENCE_DB_BELOW_SPEECH = 35.0
SILENCE_FLOOR_DBFS = -60.0
MAX_LEADING_SILENCE_S = 1.5
MAX_TRAILING_SILENCE_S = 2.0
MAX_INTERNAL_SILENCE_S = 2.0
# Clipped: more than this share of samples at full scale (16-bit: |x| >= 32767/32768).
CLIP_LEVEL = 32_767 / 32_768
MAX_CLIPPED_SHARE = 0.005

# The checks' names, as failure reasons and the manifest's `failed` lists spell them.
RUNAWAY = "runaway"
TOO_LONG = "too_long"
TOO_SHORT = "too_short"
SILENCE = "silence"
NO_SIGNAL = "no_signal"
CLIPPED = "clipped"
TRANSCRIPT = "transcript"
CHECKS = (RUNAWAY, TOO_LONG, TOO_SHORT, SILENCE, NO_SIGNAL, CLIPPED, TRANSCRIPT)


def expected_seconds(text: str, speed: float = 1.0) -> float:
    """How long a reading of `text` should last at `speed`."""
    han = len(_HAN.findall(text))
    kana = len(_KANA.findall(text))
    hangul = len(_HANGUL.findall(text))
    digits = len(_DIGIT.findall(text))
    other = len(text) - han - kana - hangul - digits
    seconds = (
        (other + CHARS_PER_DIGIT * digits) * SECONDS_PER_CHAR
        + han * SECONDS_PER_HAN
        + kana * SECONDS_PER_KANA
        + hangul * SECONDS_PER_HANGUL
    )
    return seconds / speed


def duration_bounds(expected_s: float) -> tuple[float, float]:
    """The seconds a piece expected to last `expected_s` may last."""
    return (
        max(0.0, MIN_RATIO * expected_s - LOW_SLACK_S),
        MAX_RATIO * expected_s + HIGH_SLACK_S,
    )


def max_new_tokens(text: str) -> int:
    """The codec frames a reading of `text` may take (at speed 1: frames come before the
    time-stretch), before any context limit: the caller keeps it inside the talker's."""
    seconds = CAP_HEADROOM * expected_seconds(text) + CAP_SLACK_S
    return math.ceil(seconds * CODEC_FRAME_RATE)


def reached_cap(frames: int | None, seconds: float, speed: float, cap: int) -> bool:
    """Did generation stop at `cap` frames? From the server's count of output tokens when it
    sends one, else from the audio's length (frames = seconds x speed x 12.5)."""
    if frames is None:
        frames = math.floor(seconds * speed * CODEC_FRAME_RATE + 0.5)
    return frames >= cap


@dataclass(frozen=True)
class Signal:
    """What the checks measure of one piece's samples."""

    seconds: float
    leading_silence_s: float
    trailing_silence_s: float
    longest_silence_s: float  # the longest pause between the first and the last sound
    peak: float
    clipped_share: float
    finite: bool
    sounding: bool  # some frame above -60 dBFS


def measure(samples: np.ndarray, rate: int) -> Signal:
    """`samples`: mono, float in [-1, 1] (or 16-bit integers), at `rate` Hz."""
    # float32 is exact for 16-bit samples and halves the memory a 60-s piece walks through.
    if samples.dtype.kind in "iu":
        samples = samples.astype(np.float32) / np.float32(32_768.0)
    samples = np.asarray(samples, dtype=np.float32)
    seconds = samples.size / rate
    finite = bool(np.isfinite(samples).all())
    if not finite:
        samples = np.nan_to_num(samples, nan=0.0, posinf=0.0, neginf=0.0)
    magnitude = np.abs(samples)
    peak = float(magnitude.max()) if samples.size else 0.0
    clipped = float(np.count_nonzero(magnitude >= CLIP_LEVEL)) / max(1, samples.size)
    silent = _silent_frames(samples, rate)
    if not silent.size or silent.all():
        return Signal(seconds, seconds, seconds, 0.0, peak, clipped, finite, sounding=False)
    sound = np.flatnonzero(~silent)
    first, last = int(sound[0]), int(sound[-1])
    gaps = np.diff(sound) - 1  # silent frames between two sounding ones
    longest = int(gaps.max()) if gaps.size else 0
    frame = _frame_length(rate)
    trailing = seconds - (last + 1) * frame / rate
    return Signal(
        seconds=seconds,
        leading_silence_s=first * frame / rate,
        trailing_silence_s=max(0.0, trailing),
        longest_silence_s=longest * frame / rate,
        peak=peak,
        clipped_share=clipped,
        finite=finite,
        sounding=True,
    )


def _frame_length(rate: int) -> int:
    return max(1, round(rate * FRAME_S))


def _silent_frames(samples: np.ndarray, rate: int) -> np.ndarray:
    """One flag per 20-ms frame (the last, partial one included)."""
    frame = _frame_length(rate)
    count = math.ceil(samples.size / frame)
    if count == 0:
        return np.zeros(0, dtype=bool)
    whole = (count - 1) * frame if samples.size % frame else count * frame
    squares = np.square(samples, dtype=np.float64)
    energy = np.empty(count)
    energy[: whole // frame] = squares[:whole].reshape(-1, frame).sum(axis=1)
    if whole < samples.size:  # the last, partial frame
        energy[-1] = squares[whole:].sum()
    sizes = np.full(count, frame, dtype=np.float64)
    sizes[-1] = samples.size - (count - 1) * frame
    rms = np.sqrt(energy / sizes)
    loud = float(np.percentile(rms, LOUD_PERCENTILE))
    threshold = max(loud * 10 ** (-SILENCE_DB_BELOW_SPEECH / 20), 10 ** (SILENCE_FLOOR_DBFS / 20))
    return np.asarray(rms < threshold)


@dataclass(frozen=True)
class Finding:
    """One failed check: its name (CHECKS) and the figures that failed it."""

    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


def check_signal(
    text: str, signal: Signal, speed: float, frames: int | None, cap: int | None
) -> list[Finding]:
    """Every signal check `signal` fails, as a reading of `text` at `speed` that generated
    `frames` codec frames (None: not reported) under a ceiling of `cap` (None: none sent)."""
    if not signal.finite:
        return [Finding(NO_SIGNAL, "samples are not finite numbers (NaN or infinity)")]
    if signal.peak == 0.0:
        return [Finding(NO_SIGNAL, f"{signal.seconds:.2f}s of digital silence (all zero)")]
    if not signal.sounding:
        floor = f"{SILENCE_FLOOR_DBFS:g} dBFS"
        return [Finding(NO_SIGNAL, f"{signal.seconds:.2f}s with no frame above {floor}")]
    findings: list[Finding] = []
    expected = expected_seconds(text, speed)
    low, high = duration_bounds(expected)
    if cap is not None and reached_cap(frames, signal.seconds, speed, cap):
        shown = "?" if frames is None else str(frames)
        findings.append(
            Finding(
                RUNAWAY,
                f"{shown} codec frames reached max_new_tokens={cap} "
                f"({signal.seconds:.2f}s of audio, expected {expected:.2f}s)",
            )
        )
    elif signal.seconds > high:
        findings.append(
            Finding(
                TOO_LONG,
                f"{signal.seconds:.2f}s of audio, expected {expected:.2f}s (at most {high:.2f}s)",
            )
        )
    if signal.seconds < low:
        findings.append(
            Finding(
                TOO_SHORT,
                f"{signal.seconds:.2f}s of audio, expected {expected:.2f}s (at least {low:.2f}s)",
            )
        )
    stretch = 1.0 / min(speed, 1.0)  # slow speech stretches its pauses too
    for name, value, limit in (
        ("leading", signal.leading_silence_s, MAX_LEADING_SILENCE_S * stretch),
        ("trailing", signal.trailing_silence_s, MAX_TRAILING_SILENCE_S * stretch),
        ("internal", signal.longest_silence_s, MAX_INTERNAL_SILENCE_S * stretch),
    ):
        if value > limit:
            findings.append(
                Finding(SILENCE, f"{name} silence of {value:.2f}s (at most {limit:.2f}s)")
            )
    if signal.clipped_share > MAX_CLIPPED_SHARE:
        findings.append(
            Finding(
                CLIPPED,
                f"{signal.clipped_share:.2%} of samples at full scale "
                f"(at most {MAX_CLIPPED_SHARE:.1%})",
            )
        )
    return findings
