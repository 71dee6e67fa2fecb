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

# A text's cost: the sum of its characters', each at least 1 (`len`, or speech's `text_cost`).
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
    start = 0
    while True:
        spent = _running_cost(text[start : start + limit + 1], limit, cost)
        if start + len(spent) >= len(text):
            break
        cut = start + _cut_point(text[start : start + len(spent)], spent, limit)
        pieces.append(text[start:cut])
        start = cut
    rest = text[start:]
    if rest.strip() or not pieces:
        pieces.append(rest)
    else:
        pieces[-1] += rest  # trailing whitespace only: keep it, make no blank piece
    return pieces


def _cut_point(window: str, spent: list[int], limit: int) -> int:
    """Where to cut a window that fits the budget (`spent`: its prefixes' costs)."""
    floor = limit // MIN_PIECE_SHARE
    for pattern in BREAKS:
        good = [
            m.end() for m in pattern.finditer(window) if m.end() and spent[m.end() - 1] >= floor
        ]
        if good:
            return good[-1]
    return len(window)


def _running_cost(text: str, limit: int, cost: Cost) -> list[int]:
    """The cost of each prefix of `text` (by its last character) as far as `limit` reaches,
    and at least the first character's."""
    spent: list[int] = []
    total = 0
    for char in text:
        total += cost(char)
        if total > limit and spent:
            break
        spent.append(total)
    return spent


def halve(text: str, cost: Cost = len) -> list[str]:
    """Two pieces of about equal cost whose concatenation is `text` (one if it cannot be cut):
    cut at the paragraph or sentence end nearest the middle if one lies in its middle half,
    else at the word break nearest the middle likewise, else at the middle character."""
    spent = _running_cost(text, cost(text), cost)
    total = spent[-1] if spent else 0
    for patterns in ((PARAGRAPH_END, SENTENCE_END), (WORD_BREAK,)):
        cuts = [m.end() for p in patterns for m in p.finditer(text) if 0 < m.end() < len(text)]
        near = [c for c in cuts if total / 4 <= spent[c - 1] <= 3 * total / 4]
        if near:
            cut = min(near, key=lambda c: abs(total / 2 - spent[c - 1]))
            return [text[:cut], text[cut:]]
    cut = len(_running_cost(text, max(1, total // 2), cost))
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
