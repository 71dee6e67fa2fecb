"""Where each sentence of a job sits in its joined audio: the manifest's `segments`.

A job's text is spoken in pieces (worker/speech.py), and each piece's audio is measured: its
start and end in the joined audio are exact. Inside a piece, a sentence's times come from the
server's word timestamps when it sent them (vLLM-Omni 0.30 started with `--forced-aligner`,
asked with `word_timestamps`: the `X-Word-Timestamps` header, `[{word, start_ms, end_ms}]`),
else they are estimated: the piece's duration shared out by the sentences' context cost, each
boundary then moved to the middle of the quietest stretch near it (a speaker pauses between
sentences). A segment says which it is (`timing`).

Paragraphs are the text's blank-line blocks (worker/text.py PARAGRAPH_END): each segment
carries the index of the paragraph it starts in, so a book's paragraph pauses can be put at
the right boundaries (tts_fleet/client/audiobook.py).
"""

from __future__ import annotations

import itertools
import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeGuard

import numpy as np

from worker.jobs import Segment, WordTime
from worker.text import PARAGRAPH_END, SENTENCE_END

# vLLM-Omni's non-streaming answer with word timestamps (serving_speech.py create_speech), and
# the header it sends instead when their JSON passes 4,096 bytes (about 80 words).
WORD_TIMESTAMPS_HEADER = "x-word-timestamps"
WORD_TIMESTAMPS_OMITTED_HEADER = "x-word-timestamps-omitted"
# The window a boundary may move in, as a share of the shorter sentence beside it, and at most.
SNAP_SHARE = 0.4
SNAP_MAX_S = 1.0
FRAME_S = 0.01  # the energy envelope's frame
# A frame this far below the piece's loudest frame is a pause.
QUIET_DB = 30.0
TIME_DIGITS = 3
# qwen3_force_align_processor._CJK_RANGES: each such character is a word of its own.
_CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ceaf]")


@dataclass(frozen=True)
class TimedPiece:
    """One piece as it went into the job: its text, its 16-bit PCM, the server's words."""

    text: str
    pcm: bytes
    words: tuple[WordTime, ...] | None = None


def word_times(headers: dict[str, str] | object, speed: float) -> tuple[WordTime, ...] | None:
    """The words of an answer's `X-Word-Timestamps` header, in seconds of the audio returned;
    None when it has none (not asked, omitted as oversize, unreadable: untrusted input).

    The aligner measures the model's audio before the server time-stretches it to `speed`
    (AudioMixin._apply_speed_adjustment runs after the aligner stage), so times are divided
    by the speed."""
    getter = getattr(headers, "get", None)
    raw = getter(WORD_TIMESTAMPS_HEADER) if callable(getter) else None
    if not isinstance(raw, str):
        return None
    try:
        items = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    words: list[WordTime] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        word, start, end = item.get("word"), item.get("start_ms"), item.get("end_ms")
        if not isinstance(word, str) or not _number(start) or not _number(end):
            return None
        words.append(
            WordTime(
                word=word,
                start=round(float(start) / 1000 / speed, TIME_DIGITS),
                end=round(float(end) / 1000 / speed, TIME_DIGITS),
            )
        )
    return tuple(words)


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def aligner_words(text: str) -> list[str]:
    """The aligner's word units of `text` (vLLM-Omni's built-in port of
    Qwen3ForceAlignProcessor: whitespace split, letters, digits and the apostrophe kept, each
    CJK character a word), so its timestamps can be counted off per sentence."""
    words: list[str] = []
    for segment in text.split():
        kept = "".join(c for c in segment if c == "'" or unicodedata.category(c)[0] in ("L", "N"))
        buffer = ""
        for char in kept:
            if _CJK.match(char):
                if buffer:
                    words.append(buffer)
                    buffer = ""
                words.append(char)
            else:
                buffer += char
        if buffer:
            words.append(buffer)
    return words


def sentences(text: str) -> list[tuple[int, str]]:
    """(offset in `text`, sentence) of each sentence, trimmed, cut at sentence and paragraph
    ends (worker/text.py's own), none blank."""
    cuts = sorted({m.end() for p in (SENTENCE_END, PARAGRAPH_END) for m in p.finditer(text)})
    found = []
    start = 0
    for cut in [*cuts, len(text)]:
        chunk = text[start:cut]
        if chunk.strip():
            lead = len(chunk) - len(chunk.lstrip())
            found.append((start + lead, chunk.strip()))
        start = cut
    return found


def paragraph_starts(text: str) -> list[int]:
    """Where each paragraph of `text` starts (the first at 0)."""
    return [0, *(m.end() for m in PARAGRAPH_END.finditer(text))]


def segments(
    text: str, pieces: Sequence[TimedPiece], rate: int, cost: Callable[[str], int]
) -> list[Segment]:
    """Every sentence of the job's `text` with its start and end in the joined audio of
    `pieces` (16-bit mono at `rate`), in order, inside the audio's length."""
    starts = paragraph_starts(text)
    found: list[Segment] = []
    offset_s = 0.0
    cursor = 0
    for piece in pieces:
        seconds = len(piece.pcm) / 2 / rate
        at = text.find(piece.text, cursor)
        base = at if at >= 0 else cursor
        cursor = base + len(piece.text) if at >= 0 else cursor
        spoken = sentences(piece.text)
        times = _aligned(spoken, piece.words, seconds) if piece.words else None
        timing = "aligned" if times is not None else "estimated"
        if times is None:
            times = _estimated(spoken, piece.pcm, rate, seconds, cost)
        for (position, sentence), (start, end), words in zip(
            spoken, times, _words_of(spoken, piece.words), strict=True
        ):
            paragraph = sum(1 for s in starts if s <= base + position) - 1
            found.append(
                Segment(
                    start=round(offset_s + start, TIME_DIGITS),
                    end=round(offset_s + end, TIME_DIGITS),
                    text=sentence,
                    paragraph=paragraph,
                    timing=timing,
                    words=[_shifted(w, offset_s) for w in words] if words is not None else None,
                )
            )
        offset_s += seconds
    return found


def _shifted(word: WordTime, offset_s: float) -> WordTime:
    return WordTime(
        word=word.word,
        start=round(word.start + offset_s, TIME_DIGITS),
        end=round(word.end + offset_s, TIME_DIGITS),
    )


def _words_of(
    spoken: list[tuple[int, str]], words: tuple[WordTime, ...] | None
) -> list[list[WordTime] | None]:
    """The server's words of each sentence, counted off by the aligner's own segmentation;
    None for every sentence when the counts do not add up."""
    counts = [len(aligner_words(sentence)) for _, sentence in spoken]
    if words is None or sum(counts) != len(words):
        return [None] * len(spoken)
    found: list[list[WordTime] | None] = []
    start = 0
    for count in counts:
        found.append(list(words[start : start + count]))
        start += count
    return found


def _aligned(
    spoken: list[tuple[int, str]], words: tuple[WordTime, ...], seconds: float
) -> list[tuple[float, float]] | None:
    """Each sentence from its first word's start to its last word's end (the gaps between
    sentences split at their middle, so the segments tile the piece); None when the words do
    not match the text or a sentence has none."""
    per = _words_of(spoken, words)
    if any(not w for w in per):
        return None
    spans = [(w[0].start, w[-1].end) for w in per if w]
    return _tiled(spans, seconds)


def _tiled(spans: list[tuple[float, float]], seconds: float) -> list[tuple[float, float]]:
    """Spans made contiguous and ordered over [0, seconds]: the first starts at 0, the last
    ends at `seconds`, and each boundary is the middle of the gap (or overlap) between two."""
    edges = [0.0]
    for (_, end), (start, _) in itertools.pairwise(spans):
        edges.append(min(max((end + start) / 2, edges[-1]), seconds))
    edges.append(seconds)
    return list(itertools.pairwise(edges))


def _estimated(
    spoken: list[tuple[int, str]], pcm: bytes, rate: int, seconds: float, cost: Callable[[str], int]
) -> list[tuple[float, float]]:
    """The piece's duration shared by the sentences' cost, each boundary snapped to the
    middle of the quietest stretch within reach."""
    weights = [max(1, cost(sentence)) for _, sentence in spoken]
    total = sum(weights)
    edges = [0.0]
    for weight in weights:
        edges.append(edges[-1] + seconds * weight / total)
    edges[-1] = seconds
    if len(edges) > 2:
        envelope = _envelope(pcm, rate)
        for i in range(1, len(edges) - 1):
            reach = min(
                SNAP_MAX_S, SNAP_SHARE * min(edges[i] - edges[i - 1], edges[i + 1] - edges[i])
            )
            edges[i] = _quietest(envelope, edges[i], reach, edges[i - 1], seconds)
    return list(itertools.pairwise(edges))


def _envelope(pcm: bytes, rate: int) -> np.ndarray:
    """Each FRAME_S frame's level in dB below the piece's loudest frame (0 at the loudest)."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    size = max(1, int(rate * FRAME_S))
    count = samples.size // size
    if count == 0:
        return np.zeros(0)
    frames = samples[: count * size].reshape(count, size)
    power = np.mean(frames**2, axis=1) + 1e-9
    level = 10 * np.log10(power)
    return np.asarray(level - level.max())


def _quietest(envelope: np.ndarray, at: float, reach: float, floor: float, ceiling: float) -> float:
    """The middle of the longest run of quiet frames within `reach` of `at` (the nearest such
    run to `at` on a tie), kept between `floor` and `ceiling`; `at` when there is none."""
    if envelope.size == 0 or reach <= 0:
        return at
    low = max(0, int((at - reach) / FRAME_S))
    high = min(envelope.size, int((at + reach) / FRAME_S) + 1)
    quiet = envelope[low:high] < -QUIET_DB
    best: tuple[int, float, float] | None = None
    run_start = None
    for i, flag in enumerate([*quiet, False]):
        if flag and run_start is None:
            run_start = i
        elif not flag and run_start is not None:
            middle = (low + (run_start + i) / 2) * FRAME_S
            key = (i - run_start, -abs(middle - at), middle)
            if best is None or key[:2] > best[:2]:
                best = key
            run_start = None
    if best is None:
        return at
    return min(max(best[2], floor), ceiling)
