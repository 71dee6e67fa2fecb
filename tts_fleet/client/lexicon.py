"""A pronunciation lexicon: `submit --lexicon FILE` rewrites each job's text before its request
digest is taken, so editing an entry re-renders exactly the jobs whose text it changes.

The file is UTF-8 TSV, one `term<TAB>replacement` a line; blank lines and lines whose first
non-blank character is `#` are ignored. Rules:

- whole words only: a term matches where neither the character before nor the one after is
  a letter, digit or underscore (so `Dr` matches in "Dr. Who" but not in "Drake");
- case: a term with an upper-case letter matches exactly that case ("Nice" the city is not
  "nice"); an all-lower-case term matches any case ("qwen" matches "Qwen" and "QWEN");
- the longest term wins where several match at one place ("New York City" before "New
  York"), and at equal length a case-sensitive term before a case-insensitive one;
- one pass: a replacement is never matched again;
- a bad line (not two tab-separated fields, an empty term or replacement, a term given
  twice) is an error naming its line; every one is reported, nothing is sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MAX_LEXICON_BYTES = 4 * 1024 * 1024  # a hand-kept list; far more is a wrong file
COMMENT = "#"


@dataclass(frozen=True)
class Entry:
    term: str
    replacement: str
    line: int

    @property
    def case_sensitive(self) -> bool:
        return self.term != self.term.lower()


class LexiconError(ValueError):
    """Every bad line of a lexicon, one `FILE:LINE: reason` each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class Lexicon:
    """The entries of one file, applied in one pass by `apply`."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self._exact = {e.term: e.replacement for e in entries if e.case_sensitive}
        self._folded = {e.term.casefold(): e.replacement for e in entries if not e.case_sensitive}
        ordered = sorted(entries, key=lambda e: (-len(e.term), not e.case_sensitive))
        alternatives = [
            re.escape(e.term) if e.case_sensitive else f"(?i:{re.escape(e.term)})" for e in ordered
        ]
        self._pattern = (
            re.compile(rf"(?<!\w)(?:{'|'.join(alternatives)})(?!\w)") if alternatives else None
        )

    def apply(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(self._replacement, text)

    def _replacement(self, match: re.Match[str]) -> str:
        found = match.group(0)
        if found in self._exact:
            return self._exact[found]
        # (?i) and casefold can disagree on a rare letter (ß): then the text stays as it is.
        return self._folded.get(found.casefold(), found)


def parse_lexicon(text: str, source: str = "lexicon") -> Lexicon:
    """The lexicon in `text`; LexiconError listing every bad line."""
    entries: list[Entry] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r\n")
        if not line.strip() or line.lstrip().startswith(COMMENT):
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            problems.append(
                f"{source}:{number}: expected term<TAB>replacement, got {len(fields)} field(s)"
            )
            continue
        term, replacement = fields[0].strip(), fields[1].strip()
        if not term or not replacement:
            problems.append(
                f"{source}:{number}: the {'term' if not term else 'replacement'} is empty"
            )
            continue
        entry = Entry(term, replacement, number)
        key = term if entry.case_sensitive else term.casefold()
        if key in seen:
            problems.append(f"{source}:{number}: {term!r} is already given on line {seen[key]}")
            continue
        seen[key] = number
        entries.append(entry)
    if problems:
        raise LexiconError(problems)
    return Lexicon(entries)


def load_lexicon(path: Path) -> Lexicon:
    """The lexicon file at `path`; LexiconError (with the reasons) when it cannot be used."""
    try:
        if path.stat().st_size > MAX_LEXICON_BYTES:
            raise LexiconError([f"{path}: larger than {MAX_LEXICON_BYTES} bytes"])
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise LexiconError([f"{path}: not UTF-8: byte {error.start} cannot be decoded"]) from None
    except OSError as error:
        raise LexiconError([f"{path}: {error.strerror or error}"]) from None
    return parse_lexicon(text, str(path))
