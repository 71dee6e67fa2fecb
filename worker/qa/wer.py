"""The transcript check's arithmetic: both texts normalised the same way, then the word error
rate (substitutions + deletions + insertions over the reference's tokens).

Normalised: Unicode NFKC and case-folded; thousands separators dropped ("3,500" is 3500);
numbers spelled as English words when the job's language is English or Auto ("1984" and
"nineteen hundred eighty four" compare by the words a recognizer may write either way: both
sides become "one thousand nine hundred eighty four"); apostrophes dropped inside words
("don't" = "dont"); every other punctuation mark or symbol a space. Tokens are words,
except in Han, kana and hangul, where each character is a token (those scripts put no spaces
between words, and ASR papers score them by character error rate).
"""

from __future__ import annotations

import re
import unicodedata

_THOUSANDS = re.compile(r"(?<=\d)[,\u00a0\u202f](?=\d{3}\b)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_APOSTROPHE = re.compile(r"(?<=\w)['\u2019](?=\w)")
# A CJK character is a token by itself; anything else runs to the next space.
_TOKEN = re.compile(
    r"[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
    r"\u1100-\u11ff\u3130-\u318f]|[^\s\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    r"\uf900-\ufaff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]+"
)
# Languages whose numbers are spelled out here (the job's `language`; Auto reads as English
# for Latin text, the only script whose numbers this module spells).
SPELLED = frozenset({"English", "Auto"})

_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))


def number_words(value: int) -> str:
    """An integer as English words, without "and": 1984 -> "one thousand nine hundred eighty
    four"."""
    if value < 20:
        return _ONES[value]
    if value < 100:
        tens, ones = divmod(value, 10)
        return _TENS[tens] + (f" {_ONES[ones]}" if ones else "")
    if value < 1000:
        hundreds, rest = divmod(value, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {number_words(rest)}" if rest else "")
    for scale, name in _SCALES:
        if value >= scale:
            high, rest = divmod(value, scale)
            return f"{number_words(high)} {name}" + (f" {number_words(rest)}" if rest else "")
    raise AssertionError("unreachable")


def _spell(match: re.Match[str]) -> str:
    whole, _, fraction = match.group().partition(".")
    # Past 15 digits it is an identifier, not a quantity: said digit by digit.
    digits = len(whole) > 15
    words = " ".join(_ONES[int(d)] for d in whole) if digits else number_words(int(whole))
    if fraction:
        words += " point " + " ".join(_ONES[int(d)] for d in fraction)
    return f" {words} "


def normalize(text: str, language: str = "Auto") -> list[str]:
    """The tokens `text` is compared by."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _THOUSANDS.sub("", text)
    if language in SPELLED:
        text = _NUMBER.sub(_spell, text)
    text = _APOSTROPHE.sub("", text)
    kept = "".join(
        " " if unicodedata.category(char)[0] in "PSZC" and not char.isspace() else char
        for char in text
    )
    return _TOKEN.findall(kept)


def edit_distance(reference: list[str], hypothesis: list[str]) -> int:
    """Levenshtein distance between two token lists (one row at a time). The common head and
    tail are dropped first: a transcript mostly agrees, so the table is small."""
    shorter = min(len(reference), len(hypothesis))
    head = 0
    while head < shorter and reference[head] == hypothesis[head]:
        head += 1
    tail = 0
    while tail < shorter - head and reference[-1 - tail] == hypothesis[-1 - tail]:
        tail += 1
    reference = reference[head : len(reference) - tail]
    hypothesis = hypothesis[head : len(hypothesis) - tail]
    previous = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        current = [i]
        for j, hyp in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref != hyp)))
        previous = current
    return previous[-1]


def transcript_errors(reference: str, hypothesis: str, language: str = "Auto") -> tuple[int, int]:
    """(errors, reference tokens), after normalising both texts."""
    ref = normalize(reference, language)
    return edit_distance(ref, normalize(hypothesis, language)), len(ref)


def word_error_rate(reference: str, hypothesis: str, language: str = "Auto") -> float:
    """Errors per reference token, after normalising both (0 for two empty texts; a
    transcript of an empty reference is all insertions: 1.0)."""
    errors, tokens = transcript_errors(reference, hypothesis, language)
    if not tokens:
        return 0.0 if not errors else 1.0
    return errors / tokens
