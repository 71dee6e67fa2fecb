"""What the audiobook tests share: a cover ffmpeg can decode, and the times of an SRT file."""

from __future__ import annotations

import re
import struct
import zlib


def png(width: int = 2, height: int = 2) -> bytes:
    """A valid RGB PNG (every chunk's CRC right), so ffmpeg can read it as a cover."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x20\x40\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))  # fmt: skip


def srt_times(text: str) -> list[tuple[float, float]]:
    """(start, end) in seconds of every cue of an .srt file, in file order."""

    def seconds(stamp: str) -> float:
        hours, minutes, rest = stamp.split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(rest.replace(",", "."))

    return [(seconds(a), seconds(b)) for a, b in re.findall(r"^(\S+) --> (\S+)$", text, re.M)]
