"""The bad outputs of a real TTS model, injected into a fraction of the local server's pieces.

Qwen3-TTS on vLLM-Omni sometimes never emits end-of-speech and babbles or stays silent until
the token budget, cuts the last words off, leaves a long silence mid-sentence, drops a
sentence, or says other words (issue 21: vllm-project/vllm-omni#4576, #6158, #6333,
QwenLM/Qwen3-TTS#181, #258). `tts-fleet speech-server --faults runaway=R,... --fault-seed N`
makes each of these happen to that fraction of pieces:

- **runaway**: the speech, then babble (the piece again, quieter) and silence until the
  talker's budget: `max_new_tokens` when the request sends it, else the 4,096-token context;
- **truncate**: the audio stops 5-25 % of the way through, mid-word (the model ended early:
  short enough for a duration check to see in a piece of a sentence or more);
- **silence**: 2.5-4 s of digital silence in the middle of the sentence;
- **drop**: 40-60 % of the words (a sentence, when one fits) are not said, the rest drawn
  out to 90-100 % of the full text's duration, so the duration stays plausible for the text;
- **garble**: 50-70 % of the words replaced by other words of about the same length.

Which piece gets which fault is a pure function of the fault seed and the request (text,
voice and the request's `seed`), so a test or benchmark can tell from a stored manifest's
seeds whether a delivered piece was faulted (`FaultPlan.pick`), and a re-render with another
`seed` is a fresh draw that usually comes out clean, as with the real model.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from tts_fleet.local.speech_backends import SPEAKERS, WIDE
from worker.jobs import QaRecord

KINDS = ("runaway", "truncate", "silence", "drop", "garble")
# Replacement words for garble, by length, so the garbled text takes about as long to say.
_LATIN_WORDS = (
    "a", "an", "by", "go", "it", "no", "of", "so", "to", "up",
    "cat", "dry", "fog", "hat", "jam", "kin", "mud", "owl", "pig", "rye",
    "barn", "coal", "dusk", "fern", "gulf", "harp", "jolt", "kiln", "lamb", "moth",
    "amber", "bison", "cider", "drums", "eagle", "flint", "grape", "hinge", "ivory", "jelly",
    "bandit", "cobalt", "donkey", "fabric", "gravel", "hollow", "jigsaw", "kettle", "magnet",
    "avocado", "blanket", "captain", "dolphin", "eyebrow", "gallery", "harvest", "lantern",
    "cucumber", "dinosaur", "elephant", "flamingo", "graphite", "hedgehog", "marathon",
)  # fmt: skip
_WIDE_WORDS = "山水火木金土日月星雲風雨雪花草鳥魚馬牛羊犬猫"
# A silence this long is a fault whatever the text; a pause between sentences is under 1 s.
SILENCE_SECONDS = (2.5, 4.0)
TRUNCATE_KEEP = (0.05, 0.25)
DROP_SHARE = (0.40, 0.60)
GARBLE_SHARE = (0.50, 0.70)
# A drop lasts this share of the full text's speech: a duration check cannot see it.
DROP_LENGTH = (0.90, 1.0)
# The runaway tail: the piece again at this gain, then this much silence, until the budget.
BABBLE_GAIN = 0.5
BABBLE_PAUSE_SECONDS = 1.0


class FaultSpecError(ValueError):
    """A bad --faults value; the message is one line naming the problem."""


@dataclass(frozen=True)
class FaultPlan:
    """The share of pieces each fault kind hits, and the seed that decides which."""

    rates: dict[str, float] = field(default_factory=dict)
    seed: int = 0

    @classmethod
    def parse(cls, spec: str, seed: int = 0) -> FaultPlan:
        """`runaway=0.04,truncate=0.04,...`; every kind optional, the shares adding to ≤ 1."""
        rates: dict[str, float] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, sep, value = item.partition("=")
            name = name.strip()
            if name not in KINDS:
                raise FaultSpecError(f"unknown fault {name!r} (known: {', '.join(KINDS)})")
            if not sep:
                raise FaultSpecError(f"fault {name}: give a share, as {name}=0.05")
            try:
                rate = float(value)
            except ValueError:
                raise FaultSpecError(f"fault {name}: {value!r} is not a number") from None
            if not 0.0 <= rate <= 1.0 or math.isnan(rate):
                raise FaultSpecError(f"fault {name}: {value} is not a share between 0 and 1")
            rates[name] = rate
        if sum(rates.values()) > 1.0 + 1e-9:
            raise FaultSpecError(f"the fault shares add up to {sum(rates.values()):g} (> 1)")
        return cls({k: rates[k] for k in KINDS if rates.get(k)}, seed)

    @property
    def active(self) -> bool:
        return bool(self.rates)

    def describe(self) -> str:
        return ",".join(f"{k}={v:g}" for k, v in self.rates.items())

    def pick(self, text: str, voice: str, request_seed: int | None) -> str | None:
        """The fault this request gets (None: a clean piece). The same request with the same
        seed always gets the same answer; another `seed` is an independent draw."""
        draw = _unit(self.seed, "pick", text, voice, request_seed)
        edge = 0.0
        for kind, rate in self.rates.items():
            edge += rate
            if draw < edge:
                return kind
        return None

    def rng(self, text: str, voice: str, request_seed: int | None) -> random.Random:
        """The generator for how a fault looks (where the cut, which words), per request."""
        return random.Random(_unit(self.seed, "shape", text, voice, request_seed))


def _unit(*parts: object) -> float:
    digest = hashlib.sha256("\0".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def words_of(text: str) -> list[str]:
    """Words as the faults count them: characters for CJK text, else what spaces separate."""
    if WIDE.search(text):
        return [c for c in text if not c.isspace()]
    return text.split()


def _join(words: list[str], like: str) -> str:
    return "".join(words) if WIDE.search(like) else " ".join(words)


@dataclass(frozen=True)
class TextFault:
    """What the model says instead of the text; `stretch`: drawn out to the text's length."""

    text: str
    stretch: bool = False


def rewrite(kind: str | None, text: str, rng: random.Random) -> TextFault:
    """drop and garble change the words said; the other faults change the audio afterwards."""
    words = words_of(text)
    if kind == "drop" and len(words) >= 2:
        return TextFault(_join(_drop(words, text, rng), text), stretch=True)
    if kind in ("drop", "garble"):  # a one-word piece cannot lose a word: it says another
        return TextFault(_join(_garble(words, text, rng), text))
    return TextFault(text)


def stretch(audio: np.ndarray, full_size: int, rng: random.Random) -> np.ndarray:
    """`audio` drawn out to DROP_LENGTH of `full_size` samples (slower and lower, as a model
    that skips words while keeping its pace to the text would sound)."""
    count = max(1, int(full_size * rng.uniform(*DROP_LENGTH)))
    if audio.size == 0 or count == audio.size:
        return audio
    positions = np.linspace(0, audio.size - 1, count)
    return np.asarray(np.interp(positions, np.arange(audio.size), audio), dtype=audio.dtype)


def _drop(words: list[str], text: str, rng: random.Random) -> list[str]:
    """A sentence whose share of the words is in DROP_SHARE, else a run of words that is."""
    sentences = [s.split() for s in re.split(r"(?<=[.!?。！？])\s+", text) if s.strip()]
    if not WIDE.search(text) and len(sentences) >= 2:
        fitting = [
            i for i, s in enumerate(sentences)
            if DROP_SHARE[0] <= len(s) / len(words) <= DROP_SHARE[1]
        ]  # fmt: skip
        if fitting:
            gone = rng.choice(fitting)
            return [w for i, s in enumerate(sentences) if i != gone for w in s]
    count = min(len(words) - 1, max(1, round(len(words) * rng.uniform(*DROP_SHARE))))
    start = rng.randrange(0, len(words) - count + 1)
    return words[:start] + words[start + count :]


def _garble(words: list[str], text: str, rng: random.Random) -> list[str]:
    count = max(1, round(len(words) * rng.uniform(*GARBLE_SHARE)))
    chosen = set(rng.sample(range(len(words)), min(count, len(words))))
    out = list(words)
    for i in chosen:
        out[i] = _other_word(words[i], WIDE.search(text) is not None, rng)
    return out


def _other_word(word: str, wide: bool, rng: random.Random) -> str:
    if wide:
        return rng.choice([c for c in _WIDE_WORDS if c != word])
    core = word.strip(".,;:!?\"'()")
    tail = word[len(word.rstrip(".,;:!?\"')")) :]
    near = [w for w in _LATIN_WORDS if abs(len(w) - len(core)) <= 1 and w != core.lower()]
    return rng.choice(near or list(_LATIN_WORDS)) + tail


@dataclass(frozen=True)
class AudioFault:
    """The audio after the fault, and the share of the (rewritten) words still in it."""

    audio: np.ndarray
    words_kept: float
    babble_repeats: int = 0


def reshape(
    kind: str | None, audio: np.ndarray, rate: int, budget_samples: int, rng: random.Random
) -> AudioFault:
    """runaway, truncate and silence on the decoded audio (float mono at `rate`).

    `budget_samples` is how much audio the talker may still emit (its token budget); a runaway
    fills it and more, and the caller's budget cut then stops it as the engine would.
    """
    if kind == "truncate" and audio.size:
        keep = int(audio.size * rng.uniform(*TRUNCATE_KEEP))
        return AudioFault(audio[:keep], keep / audio.size)
    if kind == "silence" and audio.size:
        at = int(audio.size * rng.uniform(0.35, 0.65))
        gap = np.zeros(int(rate * rng.uniform(*SILENCE_SECONDS)), dtype=audio.dtype)
        return AudioFault(np.concatenate([audio[:at], gap, audio[at:]]), 1.0)
    if kind == "runaway":
        return _runaway(audio, rate, budget_samples)
    return AudioFault(audio, 1.0)


def _runaway(audio: np.ndarray, rate: int, budget_samples: int) -> AudioFault:
    pause = np.zeros(int(rate * BABBLE_PAUSE_SECONDS), dtype=audio.dtype)
    cycle = np.concatenate([pause, audio * BABBLE_GAIN])
    if cycle.size == 0:
        return AudioFault(audio, 1.0)
    # One sample past the budget, so the generation is cut by it (never ends by itself).
    need = max(0, budget_samples + 1 - audio.size)
    repeats = math.ceil(need / cycle.size)
    tail = np.tile(cycle, repeats)[:need]
    whole_babbles = sum(
        1 for k in range(repeats) if (k + 1) * cycle.size <= need
    )  # the copies said in full
    return AudioFault(np.concatenate([audio, tail]), 1.0, whole_babbles)


def spoken_words(said: str, words_kept: float, babble_repeats: int = 0) -> str:
    """The words a listener hears: the share kept of what was said, then any babble."""
    words = words_of(said)
    kept = words[: int(len(words) * min(1.0, words_kept) + 1e-9)]
    return _join(kept + words * babble_repeats, said)


# ---- Which delivered pieces were faulted: the demo's summary, the benchmark, the tests ----


@dataclass
class FaultAudit:
    """What the fault plan did to a set of jobs, read back from their manifests' `qa`.

    An attempt is the rendering with one seed; the one a piece kept is its last when the piece
    passed (the checks stop at the first that passes)."""

    pieces: int = 0  # pieces checked, in manifests and quality failures
    attempts: int = 0
    faulted_attempts: Counter[str] = field(default_factory=Counter)  # by kind
    rerendered: int = 0  # attempts beyond a piece's first
    # Pieces stored as passed whose kept attempt was faulted: bad audio reported as done.
    delivered_bad: Counter[str] = field(default_factory=Counter)
    # Attempts the plan left clean that the checks rejected anyway.
    clean_rejected: int = 0
    clean_attempts: int = 0
    quality_failed: int = 0  # jobs whose pieces failed every attempt (a failure, or passed false)

    @property
    def caught(self) -> int:
        return sum(self.faulted_attempts.values()) - sum(self.delivered_bad.values())

    def add(self, plan: FaultPlan, text: str, voice: str, qa: QaRecord) -> None:
        """One job's `qa` (a manifest's or a quality failure's) against the plan."""
        if not qa.passed:
            self.quality_failed += 1
        for piece, piece_text in zip(qa.pieces, piece_texts(text, qa), strict=False):
            self.pieces += 1
            self.attempts += piece.attempts
            self.rerendered += piece.attempts - 1
            faults = [plan.pick(piece_text, canonical_voice(voice), s) for s in piece.seeds]
            for index, fault in enumerate(faults):
                kept = piece.passed and index == len(faults) - 1
                if fault is not None:
                    self.faulted_attempts[fault] += 1
                    if kept and qa.passed:
                        self.delivered_bad[fault] += 1
                else:
                    self.clean_attempts += 1
                    self.clean_rejected += not kept


def piece_texts(text: str, qa: QaRecord) -> list[str]:
    """The pieces' texts, from their lengths: the worker's pieces are trimmed, contiguous cuts
    of the job's text (worker/speech.py speech_pieces), a single piece the text itself."""
    if len(qa.pieces) == 1:
        return [text]
    texts, at = [], 0
    for piece in qa.pieces:
        while at < len(text) and text[at].isspace():
            at += 1
        texts.append(text[at : at + piece.characters])
        at += piece.characters
    return texts


def canonical_voice(voice: str) -> str:
    """The speaker name the server renders for a job's voice (case-insensitive)."""
    return {name.lower(): name for name in SPEAKERS}.get(voice.lower(), voice)
