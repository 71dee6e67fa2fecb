"""AAC in MP4 with chapters, tags and a cover, encoded by the ffmpeg binary that the
imageio-ffmpeg wheel ships (no system install), and decoded back to check what was written.

ffmpeg's MP4 muxer writes the chapters as a Nero `chpl` list and a QuickTime chapter track
(what Apple Books and most players read), the tags as iTunes atoms (`©nam`, `©ART`, `©alb`,
`©gen`) and an attached picture as the `covr` atom.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Mono speech at 64 kb/s AAC-LC: the rate audiobook stores publish at (ACX asks for 192 kb/s
# MP3 masters; AAC-LC at 64 kb/s mono is transparent for a voice).
BITRATE = "64k"
# Images the MP4 `covr` atom holds as they are; any other cover is converted to PNG.
COVER_COPIED = ("jpg", "png")
ENCODE_TIMEOUT_S = 3_600


class EncoderError(RuntimeError):
    """ffmpeg failed or is not installed; one line."""


@dataclass(frozen=True)
class Marker:
    """One chapter of the file: from `start` to `end` seconds."""

    start: float
    end: float
    title: str


@dataclass(frozen=True)
class Tags:
    title: str = ""
    author: str = ""
    album: str = ""
    track: int | None = None
    genre: str = "Audiobook"


def ffmpeg() -> str:
    """The packaged ffmpeg binary (the `audiobook` extra)."""
    try:
        import imageio_ffmpeg  # type: ignore[import-untyped]
    except ImportError:
        raise EncoderError(
            "the M4B encoder is not installed; try: pip install 'tts-fleet[audiobook]'"
        ) from None
    return str(imageio_ffmpeg.get_ffmpeg_exe())


def _escape(value: str) -> str:
    """A value as ffmpeg's FFMETADATA1 format reads it: = ; # \\ and newlines escaped."""
    flat = " ".join(value.split())
    for char in ("\\", "=", ";", "#"):
        flat = flat.replace(char, "\\" + char)
    return flat


def metadata(tags: Tags, markers: Sequence[Marker]) -> str:
    """The FFMETADATA1 text: the tags, then one [CHAPTER] per marker in milliseconds."""
    lines = [";FFMETADATA1"]
    for key, value in (("title", tags.title), ("artist", tags.author),
                       ("album_artist", tags.author), ("album", tags.album),
                       ("genre", tags.genre)):  # fmt: skip
        if value:
            lines.append(f"{key}={_escape(value)}")
    if tags.track is not None:
        lines.append(f"track={tags.track}")
    for marker in markers:
        lines += [
            "[CHAPTER]",
            "TIMEBASE=1/1000",
            f"START={round(marker.start * 1000)}",
            f"END={round(marker.end * 1000)}",
            f"title={_escape(marker.title)}",
        ]
    return "\n".join(lines) + "\n"


def encode(
    samples: np.ndarray,
    rate: int,
    path: Path,
    tags: Tags,
    markers: Sequence[Marker] = (),
    cover: tuple[bytes, str] | None = None,
) -> None:
    """Writes mono `samples` (full scale 1.0) to `path` as AAC in MP4, through a temporary
    file renamed into place, so an interrupted run leaves no half-written file."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767).round().astype("<i2").tobytes()
    with tempfile.TemporaryDirectory(prefix="tts-fleet-m4b-") as work:
        folder = Path(work)
        (folder / "audio.pcm").write_bytes(pcm)
        (folder / "meta.txt").write_text(metadata(tags, markers), encoding="utf-8")
        command = [ffmpeg(), "-hide_banner", "-loglevel", "error", "-y",
                   "-f", "s16le", "-ar", str(rate), "-ac", "1", "-i", str(folder / "audio.pcm"),
                   "-f", "ffmetadata", "-i", str(folder / "meta.txt")]  # fmt: skip
        picture: list[str] = []
        if cover is not None:
            data, extension = cover
            image = folder / f"cover.{extension}"
            image.write_bytes(data)
            command += ["-i", str(image)]
            codec = "copy" if extension in COVER_COPIED else "png"
            picture = ["-map", "2:v", "-c:v", codec, "-disposition:v:0", "attached_pic"]
        partial = folder / "out.mp4"
        command += ["-map", "0:a", *picture, "-map_metadata", "1", "-map_chapters", "1",
                    "-c:a", "aac", "-b:a", BITRATE, "-movflags", "+faststart",
                    "-f", "mp4", str(partial)]  # fmt: skip
        _run(command)
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".{path.name}.partial")
        shutil.move(partial, staged)  # across file systems too; the rename below is atomic
        os.replace(staged, path)


def readable_image(data: bytes, extension: str) -> bool:
    """Whether ffmpeg decodes `data` as one picture: the muxer silently leaves out a cover it
    cannot read, so a bad one is found before it is relied on."""
    with tempfile.TemporaryDirectory(prefix="tts-fleet-cover-") as work:
        image = Path(work) / f"cover.{extension}"
        image.write_bytes(data)
        command = [ffmpeg(), "-hide_banner", "-loglevel", "error", "-i", str(image),
                   "-frames:v", "1", "-f", "image2pipe", "-c:v", "png", "-"]  # fmt: skip
        try:
            return bool(_run(command))
        except EncoderError:
            return False


def decode(path: Path, rate: int) -> np.ndarray:
    """The file's audio as mono float32 at `rate` (what a player hears)."""
    command = [ffmpeg(), "-hide_banner", "-loglevel", "error", "-i", str(path),
               "-f", "f32le", "-ac", "1", "-ar", str(rate), "-"]  # fmt: skip
    return np.frombuffer(_run(command), dtype="<f4")


def _run(command: list[str]) -> bytes:
    try:
        done = subprocess.run(command, capture_output=True, timeout=ENCODE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise EncoderError(f"ffmpeg did not run: {error}") from None
    if done.returncode != 0:
        detail = " ".join(done.stderr.decode(errors="replace").split())[:500]
        raise EncoderError(f"ffmpeg failed ({done.returncode}): {detail}")
    return done.stdout
