"""Long texts as parts: split a book into jobs on sentence boundaries, join the audio back.

A source of more than `split_chars` characters becomes jobs `<id>.p001`, `<id>.p002`, … (ids
stay within the job contract's 128 characters), each cut at a paragraph or sentence end where
one exists. `results --join` concatenates the parts' audio in order into `<id>.<format>` and
writes `<id>.json` listing the parts, once every part is done.
"""

from __future__ import annotations

import io
import json
import re
import wave
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tts_fleet.client.keys import inside
from worker import text as text_rules
from worker.jobs import AUDIO_FORMATS, is_job_id

MIN_SPLIT_CHARS = 100  # shorter pieces would cut mid-sentence almost every time
PART_SEPARATOR = ".p"
_PART_ID = re.compile(r"^(?P<base>.+)\.p(?P<index>\d{3,})$")
MAX_ID_CHARS = 128


def split_text(text: str, limit: int) -> list[str]:
    """Parts of at most `limit` characters whose concatenation is `text`, cut where
    worker/text.py cuts (a paragraph end, else a sentence end, else a word break, else hard)."""
    if limit < MIN_SPLIT_CHARS:
        raise ValueError(f"split size must be at least {MIN_SPLIT_CHARS} characters")
    return text_rules.split_text(text, limit)


def part_ids(base_id: str, count: int) -> list[str]:
    """`base.p001`…: zero-padded so names sort in order; the base is shortened when the
    suffix would push the id past the job contract's 128 characters."""
    width = max(3, len(str(count)))
    room = MAX_ID_CHARS - len(PART_SEPARATOR) - width
    base = base_id[:room]
    return [f"{base}{PART_SEPARATOR}{index:0{width}d}" for index in range(1, count + 1)]


def source_of(job_id: str) -> tuple[str, int] | None:
    """(base id, 1-based part number) for a part id, else None."""
    match = _PART_ID.match(job_id)
    return (match.group("base"), int(match.group("index"))) if match else None


@dataclass
class JoinReport:
    joined: list[str] = field(default_factory=list)  # base ids written
    incomplete: dict[str, list[int]] = field(default_factory=dict)  # base id -> missing parts
    failed: dict[str, str] = field(default_factory=dict)  # base id -> reason


def join_parts(directory: Path, expected: Iterable[str] | None = None) -> JoinReport:
    """Joins every complete set of parts in `directory` (manifests `<base>.pNNN.json` beside
    their audio) into `<base>.<format>` + `<base>.json`. `expected` (the submitted ids) says
    how many parts each source has; without it the parts found must run 1..N unbroken."""
    report = JoinReport()
    wanted: dict[str, set[int]] = {}
    for job_id in expected or ():
        part = source_of(job_id)
        if part is not None:
            wanted.setdefault(part[0], set()).add(part[1])
    found, refused = _part_manifests(directory)
    for base in sorted(set(found) | set(wanted) | set(refused)):
        if base in refused:
            report.failed[base] = refused[base]
            continue
        manifests = found.get(base, {})
        numbers = wanted.get(base) or set(range(1, max(manifests, default=0) + 1))
        missing = sorted(numbers - set(manifests))
        if missing:
            report.incomplete[base] = missing
            continue
        try:
            _join_one(directory, base, [manifests[n] for n in sorted(numbers)])
        except (OSError, ValueError, KeyError) as error:
            report.failed[base] = str(error)
        else:
            report.joined.append(base)
    return report


def _part_manifests(
    directory: Path,
) -> tuple[dict[str, dict[int, dict[str, Any]]], dict[str, str]]:
    """base -> part number -> the manifest of `<base>.pNNN.json`; and base -> why it is not
    joined, for a manifest (it came from the bucket) whose "id" is not its file's."""
    found: dict[str, dict[int, dict[str, Any]]] = {}
    refused: dict[str, str] = {}
    for path in directory.glob(f"*{PART_SEPARATOR}*.json"):
        part = source_of(path.stem)
        if part is None:
            continue
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):  # written from the bucket: untrusted
            continue
        if not isinstance(manifest, dict):
            continue
        if manifest.get("id") != path.stem or not is_job_id(path.stem):
            refused[part[0]] = f"{path.name} names id {manifest.get('id')!r}"
        else:
            found.setdefault(part[0], {})[part[1]] = manifest
    return found, refused


def _join_one(directory: Path, base: str, manifests: list[dict[str, Any]]) -> None:
    """The manifests name their own files' ids (`_part_manifests`); their format must be one
    of the contract's, and every path read or written stays in `directory`."""
    formats = {_format_of(m) for m in manifests}
    if len(formats) != 1:
        raise ValueError(f"parts have different formats: {sorted(formats)}")
    fmt = formats.pop()
    if fmt not in AUDIO_FORMATS:
        raise ValueError(f"parts have an unknown format {fmt!r}")
    ids = [str(m["id"]) for m in manifests]
    audio = [_inside(directory, f"{job_id}.{fmt}") for job_id in ids]
    rate = _write_joined(audio, _inside(directory, f"{base}.{fmt}"), fmt)
    joined = {
        "id": base,
        "parts": ids,
        "format": fmt,
        "sample_rate": rate,
        "duration_s": round(sum(float(m.get("duration_s") or 0.0) for m in manifests), 3),
    }
    target = _inside(directory, f"{base}.json")
    target.write_text(json.dumps(joined, indent=2) + "\n", encoding="utf-8")


def _inside(directory: Path, name: str) -> Path:
    path = inside(directory, name)
    if path is None:
        raise ValueError(f"{name!r} would be outside {directory}")
    return path


def _format_of(manifest: dict[str, Any]) -> str:
    request = manifest.get("request") or {}
    return str(request.get("format") or "wav")


def _write_joined(parts: list[Path], target: Path, fmt: str) -> int | None:
    """Concatenates samples (WAV and raw PCM natively; flac and mp3 through soundfile)."""
    temp = target.with_name(target.name + ".part")
    if fmt == "wav":
        rate = _join_wav(parts, temp)
    elif fmt == "pcm":
        temp.write_bytes(b"".join(path.read_bytes() for path in parts))
        rate = None
    else:
        rate = _join_with_soundfile(parts, temp, fmt)
    temp.replace(target)  # atomic: a reader never sees half a book
    return rate


def _join_wav(parts: Iterable[Path], target: Path) -> int:
    params = None
    with wave.open(str(target), "wb") as out:
        for path in parts:
            with wave.open(str(path), "rb") as part:
                shape = (part.getnchannels(), part.getsampwidth(), part.getframerate())
                if params is None:
                    params = shape
                    out.setnchannels(shape[0])
                    out.setsampwidth(shape[1])
                    out.setframerate(shape[2])
                elif shape != params:
                    raise ValueError(f"{path.name}: {shape} differs from the first part {params}")
                out.writeframes(part.readframes(part.getnframes()))
    if params is None:
        raise ValueError("no parts to join")
    return params[2]


def _join_with_soundfile(parts: list[Path], target: Path, fmt: str) -> int:
    try:
        import soundfile  # type: ignore[import-untyped]
    except ImportError:
        raise ValueError(
            f"joining {fmt} needs the soundfile package (pip install soundfile)"
        ) from None
    chunks = [soundfile.read(str(path), dtype="int16") for path in parts]
    rates = {rate for _, rate in chunks}
    if len(rates) != 1:
        raise ValueError(f"parts have different sample rates: {sorted(rates)}")
    rate = rates.pop()
    buffer = io.BytesIO()
    import numpy

    samples = numpy.concatenate([data for data, _ in chunks])
    soundfile.write(buffer, samples, rate, format=fmt.upper())
    target.write_bytes(buffer.getvalue())
    return int(rate)


def describe_parts(ids: Iterable[str]) -> Iterator[str]:
    """One line per split source: `base: N parts`."""
    counts: dict[str, int] = {}
    for job_id in ids:
        part = source_of(job_id)
        if part is not None:
            counts[part[0]] = counts.get(part[0], 0) + 1
    for base, count in sorted(counts.items()):
        yield f"{base}: {count} parts"
