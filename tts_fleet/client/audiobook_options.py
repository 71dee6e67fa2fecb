"""What `results --book` is asked for, with every default once: the loudness, the pauses, the
subtitles. Standard library only, so the command line reads them without numpy (the audiobook
itself, tts_fleet/client/audiobook.py, needs the `audiobook` and `local` extras)."""

from __future__ import annotations

from dataclasses import dataclass

from tts_fleet.client.subtitles import SubtitleFormat

DEFAULT_LOUDNESS_LUFS = -18.0
# The ceiling the decoded M4B's true peak must stay under (dBTP).
MAX_TRUE_PEAK_DBTP = -1.5
# Added silence: a breath between paragraphs, a clear break between chapters.
DEFAULT_PARAGRAPH_PAUSE_S = 0.5
DEFAULT_CHAPTER_PAUSE_S = 2.0
MAX_PAUSE_S = 60.0


@dataclass(frozen=True)
class BookOptions:
    loudness_lufs: float = DEFAULT_LOUDNESS_LUFS
    paragraph_pause_s: float = DEFAULT_PARAGRAPH_PAUSE_S
    chapter_pause_s: float = DEFAULT_CHAPTER_PAUSE_S
    subtitles: SubtitleFormat | None = None
    threads: int = 8

    def problems(self) -> list[str]:
        """One line per option out of range, naming its flag."""
        found = []
        for flag, value in (("--paragraph-pause", self.paragraph_pause_s),
                            ("--chapter-pause", self.chapter_pause_s)):  # fmt: skip
            if not 0 <= value <= MAX_PAUSE_S:
                found.append(f"{flag} must be between 0 and {MAX_PAUSE_S:g} seconds, not {value:g}")
        if not -70 <= self.loudness_lufs <= -5:
            found.append(f"--loudness must be between -70 and -5 LUFS, not {self.loudness_lufs:g}")
        return found
