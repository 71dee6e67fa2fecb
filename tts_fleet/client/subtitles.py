"""Subtitles from a manifest's sentence timings (worker/timings.py): SRT and WebVTT.

One cue per sentence, in order, each inside the audio's length; a book's cues are its jobs'
shifted to where each job's audio sits in the M4B (tts_fleet/client/audiobook.py). The
sentence texts come from the bucket: they are written as text only (whitespace collapsed, so a
planted blank line cannot end a cue early; WebVTT's markup characters escaped).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tts_fleet.client.keys import inside
from worker.jobs import Manifest, Segment

SubtitleFormat = Literal["srt", "vtt"]
SUBTITLE_FORMATS: tuple[SubtitleFormat, ...] = ("srt", "vtt")
# Characters per line: the common broadcast limit (BBC subtitle guidelines: 37-42 for
# Latin scripts); a long sentence wraps onto more lines.
LINE_CHARS = 42


@dataclass(frozen=True)
class Cue:
    start: float  # seconds from the audio's start
    end: float
    text: str


def cues(segments: Iterable[Segment], shift: float = 0.0, length: float | None = None) -> list[Cue]:
    """A cue per segment with text, `shift` seconds later, kept in order and (given the audio's
    `length`) inside it."""
    found: list[Cue] = []
    for segment in segments:
        text = " ".join(segment.text.split())
        if not text:
            continue
        start, end = segment.start + shift, max(segment.start, segment.end) + shift
        if found:
            start = max(start, found[-1].end)
        if length is not None:
            start, end = min(start, length), min(end, length)
        found.append(Cue(start, max(start, end), text))
    return found


def render(items: Sequence[Cue], fmt: SubtitleFormat) -> str:
    """The cues as an .srt or .vtt file's text."""
    if fmt == "srt":
        blocks = [
            f"{n}\n{_stamp(c.start, ',')} --> {_stamp(c.end, ',')}\n{_lines(c.text)}\n"
            for n, c in enumerate(items, 1)
        ]
        return "\n".join(blocks)
    blocks = [
        f"{_stamp(c.start, '.')} --> {_stamp(c.end, '.')}\n{_lines(_vtt_text(c.text))}\n"
        for c in items
    ]
    return "\n".join(["WEBVTT\n", *blocks])


def _stamp(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{whole:02d}{separator}{millis:03d}"


def _lines(text: str) -> str:
    return "\n".join(textwrap.wrap(text, LINE_CHARS)) or text


def _vtt_text(text: str) -> str:
    # WebVTT cue text: & and < start markup, and "-->" may not appear (escaping > removes it).
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write_text(path: Path, text: str) -> None:
    """Through a temporary file renamed into place."""
    staged = path.with_name(f".{path.name}.partial")
    staged.write_text(text, encoding="utf-8")
    staged.replace(path)


def job_subtitles(out: Path, job_ids: Sequence[str], fmt: SubtitleFormat) -> dict[str, Path]:
    """`<id>.<fmt>` beside each downloaded job's `<id>.json` in `out`, from its manifest's
    sentence timings, in the job's own audio time; id -> file written (a manifest that is
    unreadable, another job's, or without timings gets none)."""
    written: dict[str, Path] = {}
    for job_id in job_ids:
        source = inside(out, f"{job_id}.json")
        target = inside(out, f"{job_id}.{fmt}")
        if source is None or target is None or not source.is_file():
            continue
        try:
            manifest = Manifest.model_validate_json(source.read_bytes())
        except ValueError:
            continue
        if manifest.id != job_id or not manifest.segments:
            continue
        length = manifest.duration_s if manifest.duration_s is not None else math.inf
        write_text(target, render(cues(manifest.segments, 0.0, length), fmt))
        written[job_id] = target
    return written
