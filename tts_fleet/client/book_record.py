"""The book record, `books/<book>.json` in the output bucket: what `submit BOOK.epub` sent.

`tts-fleet submit` writes it (after checking every job, before sending them); `results --book`
reads it back to put the chapters' audio in order, with their titles, the book's metadata
and its cover (`books/<book>/cover.<ext>`). Pure: no AWS here, only the model, its keys and
the parser.

Read back it is untrusted (anyone who may write `books/` may write it): `parse_book_record`
bounds its size and every list and string, and accepts a record only when its book id is the
one asked for, every job id is a job id, no job id appears twice, every digest is a SHA-256
hex digest and its cover key is the one `cover_key` makes for that book.

A chapter's text reaches the worker with its paragraphs separated by `PARAGRAPH_BREAK` (a
blank line): worker/text.py cuts there first, and `paragraphs()` finds them again.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from worker.jobs import ID_PATTERN, describe_errors, is_job_id

BOOKS_PREFIX = "books/"
RECORD_SUFFIX = ".json"
RECORD_VERSION: Literal[1] = 1
# Paragraphs of a chapter's job text are joined with this; a paragraph holds no blank line.
PARAGRAPH_BREAK = "\n\n"
_PARAGRAPH_SPLIT = re.compile(r"\n\s*\n")
# The cover image formats EPUB allows (core media types) and the extension each is stored as.
COVER_TYPES = {"image/jpeg": "jpg", "image/png": "png", "image/gif": "gif", "image/webp": "webp"}
COVER_EXTENSIONS = tuple(sorted(set(COVER_TYPES.values())))
# Bounds of a record read back: a long book has ~100 chapters; a 2 MB novel split at the
# smallest --split-chars (100) would be 20,000 jobs, so these leave room and still stop a
# planted record from exhausting memory.
MAX_RECORD_BYTES = 8 * 1024 * 1024
MAX_CHAPTERS = 5_000
MAX_JOBS = 50_000
MAX_META_CHARS = 1_000
MAX_LANGUAGE_CHARS = 64
DIGEST_PATTERN = r"^[0-9a-f]{64}$"
# A book id leaves room for "-c00001" and a part suffix ".p00001" within the 128 of a job id.
MAX_BOOK_ID_CHARS = 100
BOOK_ID_PATTERN = rf"^[A-Za-z0-9._-]{{1,{MAX_BOOK_ID_CHARS}}}$"


class _Model(BaseModel):
    # Unknown fields are ignored on read, as for manifests: a newer submit may add one.
    model_config = ConfigDict(extra="ignore", frozen=True)


class ChapterJob(_Model):
    """One job of a chapter: the chapter's whole text, or one part of it (`<id>.p001`…)."""

    id: str = Field(pattern=ID_PATTERN)
    digest: str = Field(pattern=DIGEST_PATTERN)  # Job.digest(): what its manifest must match
    characters: int = Field(ge=1)  # its text's length (paragraph breaks included)
    paragraphs: int = Field(ge=1)  # paragraphs in its text (PARAGRAPH_BREAK-separated)


class Chapter(_Model):
    """A table-of-contents chapter, in reading order."""

    number: int = Field(ge=1)  # 1-based position in the book
    title: str = Field(max_length=MAX_META_CHARS)
    jobs: list[ChapterJob] = Field(min_length=1)  # in order; more than one when split


class BookRecord(_Model):
    """books/<book>.json. `cover_key` is the full key (with the output prefix) or None."""

    version: Literal[1] = RECORD_VERSION
    book: str = Field(pattern=BOOK_ID_PATTERN)
    source: str = Field("", max_length=MAX_META_CHARS)  # the file's name, for people
    title: str = Field("", max_length=MAX_META_CHARS)
    author: str = Field("", max_length=MAX_META_CHARS)  # several creators joined with ", "
    language: str = Field(
        "", max_length=MAX_LANGUAGE_CHARS
    )  # the EPUB's dc:language (BCP 47), as given
    cover_key: str | None = Field(None, max_length=1024)
    chapters: list[Chapter] = Field(min_length=1, max_length=MAX_CHAPTERS)

    @field_validator("chapters")
    @classmethod
    def _numbered_in_order(cls, chapters: list[Chapter]) -> list[Chapter]:
        numbers = [chapter.number for chapter in chapters]
        if numbers != list(range(1, len(chapters) + 1)):
            raise ValueError("chapters must be numbered 1, 2, … in order")
        ids = [job.id for chapter in chapters for job in chapter.jobs]
        if len(ids) > MAX_JOBS:
            raise ValueError(f"more than {MAX_JOBS} jobs")
        if len(set(ids)) != len(ids):
            raise ValueError("a job id appears twice")
        return chapters

    def job_ids(self) -> list[str]:
        """Every job id, in reading order."""
        return [job.id for chapter in self.chapters for job in chapter.jobs]

    def digests(self) -> dict[str, str]:
        """id -> request digest, in reading order: what `wait`/`results` check manifests by."""
        return {job.id: job.digest for chapter in self.chapters for job in chapter.jobs}

    def to_json(self) -> bytes:
        return json.dumps(self.model_dump(), ensure_ascii=False, indent=1).encode("utf-8")


def record_key(book: str, prefix: str = "") -> str:
    return f"{prefix}{BOOKS_PREFIX}{book}{RECORD_SUFFIX}"


def cover_key(book: str, extension: str, prefix: str = "") -> str:
    return f"{prefix}{BOOKS_PREFIX}{book}/cover.{extension}"


def chapter_id(book: str, number: int) -> str:
    """`<book>-c001`, …: three digits at least, so ids sort in reading order."""
    return f"{book}-c{number:03d}"


def paragraphs(text: str) -> list[str]:
    """A job text's paragraphs, stripped, without empty ones."""
    return [part.strip() for part in _PARAGRAPH_SPLIT.split(text) if part.strip()]


class InvalidBookRecord(ValueError):
    """A record read back that is not one `submit` writes; the message is one line."""


def parse_book_record(data: bytes, book: str, prefix: str = "") -> BookRecord:
    """The record of `book` from the bytes of `record_key(book, prefix)`, checked as untrusted
    input; InvalidBookRecord (one line) when it is not a record of that book."""
    if len(data) > MAX_RECORD_BYTES:
        raise InvalidBookRecord(f"book record is {len(data)} bytes, over {MAX_RECORD_BYTES}")
    try:
        raw: Any = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise InvalidBookRecord(f"book record is not JSON: {error}") from None
    if not isinstance(raw, dict):
        raise InvalidBookRecord("book record is not a JSON object")
    try:
        record = BookRecord.model_validate(raw)
    except ValidationError as error:
        raise InvalidBookRecord(f"book record: {describe_errors(error)}") from None
    if record.book != book:
        raise InvalidBookRecord(f"book record names book {record.book!r}, not {book!r}")
    if record.cover_key is not None and record.cover_key not in {
        cover_key(book, extension, prefix) for extension in COVER_EXTENSIONS
    }:
        raise InvalidBookRecord(f"book record's cover key {record.cover_key!r} is not its own")
    if not all(is_job_id(job_id) for job_id in record.job_ids()):  # fullmatch: no trailing \n
        raise InvalidBookRecord("book record lists an id that is no job id")
    return record
