"""Text rules shared by the worker and the client: where a text may be cut, and what a
server's error answer says.

One splitter serves both callers: `tts-fleet submit --split-chars` cuts a book into jobs
(tts_fleet/client/books.py, cost = characters) and the worker cuts a job into speech
requests (worker/speech.py, cost = its context budget, a CJK character costing four). Both
want pieces within a budget, cut at a paragraph end, else a sentence end, else a word break,
else anywhere, and never a sliver when a better cut exists. The pieces concatenate back to
the text; a caller that wants them trimmed trims them.

Imported by tts_fleet/client/: the standard library only, like worker/jobs.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol

Cost = Callable[[str], int]
PARAGRAPH_END = re.compile(r"\n\s*\n")
# After . ! ? ; : … and any closing quote or bracket, with the spaces that follow (a full stop
# inside a number or a name, "3.14", "e.g.x", is no end); after a CJK full stop, at once.
SENTENCE_END = re.compile(r"(?<=[.!?;:。！？；…])[\"'”’)\]]*\s+|(?<=[。！？；])")
# After a comma (Latin or CJK) and its spaces, or a run of spaces.
WORD_BREAK = re.compile(r"(?<=[,，、])\s*|\s+")
BREAKS = (PARAGRAPH_END, SENTENCE_END, WORD_BREAK)
# A cut this early in a piece's budget would leave a sliver: a weaker break later is better.
MIN_PIECE_SHARE = 3  # at least 1/3 of the budget
ERROR_MESSAGE_CHARS = 500


def split_text(text: str, limit: int, cost: Cost = len) -> list[str]:
    """Pieces of at most `limit` cost (a piece is at least one character) whose concatenation
    is `text`, the spaces at a cut kept with the piece before it. Each cut is the last
    paragraph end within the budget, else the last sentence end, else the last word break,
    none earlier than a third of it; else the budget's end."""
    pieces: list[str] = []
    rest = text
    while cost(rest) > limit:
        cut = _cut_point(rest, limit, cost)
        pieces.append(rest[:cut])
        rest = rest[cut:]
    if rest.strip() or not pieces:
        pieces.append(rest)
    else:
        pieces[-1] += rest  # trailing whitespace only: keep it, make no blank piece
    return pieces


def _cut_point(text: str, limit: int, cost: Cost) -> int:
    fits = _longest_prefix(text, limit, cost)
    window = text[:fits]
    floor = limit // MIN_PIECE_SHARE
    for pattern in BREAKS:
        good = [
            match.end()
            for match in pattern.finditer(window)
            if 0 < match.end() <= fits and cost(text[: match.end()]) >= floor
        ]
        if good:
            return good[-1]
    return fits


def _longest_prefix(text: str, limit: int, cost: Cost) -> int:
    """How many characters of `text` fit in `limit` (at least one)."""
    spent = 0
    for index, char in enumerate(text):
        spent += cost(char)
        if spent > limit:
            return max(1, index)
    return len(text)


def halve(text: str, cost: Cost = len) -> list[str]:
    """Two pieces of about equal cost whose concatenation is `text` (one if it cannot be cut):
    cut at the paragraph or sentence end nearest the middle if one lies in its middle half,
    else at the word break nearest the middle likewise, else at the middle character."""
    total = cost(text)
    for patterns in ((PARAGRAPH_END, SENTENCE_END), (WORD_BREAK,)):
        cuts = [m.end() for p in patterns for m in p.finditer(text) if 0 < m.end() < len(text)]
        near = [c for c in cuts if total / 4 <= cost(text[:c]) <= 3 * total / 4]
        if near:
            cut = min(near, key=lambda c: abs(total / 2 - cost(text[:c])))
            return [text[:cut], text[cut:]]
    cut = _longest_prefix(text, max(1, total // 2), cost)
    return [text[:cut], text[cut:]] if cut < len(text) else [text]


class HttpAnswer(Protocol):
    """What `error_message` reads of an HTTP response (httpx's, or any like it)."""

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


def error_message(response: HttpAnswer) -> str:
    """One line: vLLM's {"error": {"message": …}}, a bare {"message": …}, FastAPI's
    {"detail": …}, else the body itself; at most ERROR_MESSAGE_CHARS."""
    try:
        body = response.json()
    except ValueError:
        return _one_line(response.text) or "(no body)"
    if isinstance(body, dict):
        error = body.get("error")
        for found in (error if isinstance(error, dict) else {}, body):
            for name in ("message", "detail"):
                if name in found:
                    return _one_line(str(found[name]))
    return _one_line(str(body))


def _one_line(text: str) -> str:
    return " ".join(text.split())[:ERROR_MESSAGE_CHARS]
