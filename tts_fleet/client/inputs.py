"""Reading jobs for `submit`, `wait` and `results`: a JSONL file, a directory of .txt files,
an EPUB (one job per chapter, and the book record: tts_fleet/client/epub.py), or stdin.

Everything is validated before anything is sent, so one pass collects every invalid line
with its line number, against what the server would reject too: the CustomVoice model's
voices, its languages, 500 characters of instructions, the speed range and the formats.
Ids are made explicit here (`Job.with_id()`), so the same input always yields the same ids
and a re-run after a crash does no duplicate work.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tts_fleet.client.book_record import (
    MAX_BOOK_ID_CHARS,
    MAX_CHAPTERS,
    MAX_JOBS,
    MAX_LANGUAGE_CHARS,
    MAX_META_CHARS,
    BookRecord,
    Chapter,
    ChapterJob,
    chapter_id,
    cover_key,
    paragraphs,
)
from tts_fleet.client.books import MIN_SPLIT_CHARS, part_ids, split_text
from tts_fleet.client.epub import EpubBook, EpubError, is_epub, read_epub
from tts_fleet.client.lexicon import Lexicon
from worker.jobs import (
    CUSTOM_VOICE_SPEAKERS,
    DEFAULT_MAX_TEXT_CHARS,
    InvalidJob,
    Job,
    validate_job,
)

STDIN = "-"
STDIN_NAME = "<stdin>"
TEXT_SUFFIX = ".txt"
MAX_ID_CHARS = 128  # worker.jobs.ID_PATTERN allows 1..128 characters
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_HASH_CHARS = 8


@dataclass(frozen=True)
class InvalidLine:
    """One input that cannot become a job. `line` is 1-based; 0 means a whole file."""

    line: int
    source: str
    reason: str

    def describe(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.reason}"


@dataclass
class LoadedBook:
    """An EPUB read as jobs: each chapter's title and its jobs in order (one, or its parts)."""

    book: str  # the book id: `<book>-c001`… are its chapters' job ids
    source: str
    epub: EpubBook
    chapters: list[tuple[str, list[Job]]] = field(default_factory=list)

    def record(self, prefix: str = "") -> BookRecord:
        """books/<book>.json for a bucket under `prefix` (its cover key has the prefix)."""
        cover = self.epub.cover
        return BookRecord(
            book=self.book,
            source=Path(self.source).name[:MAX_META_CHARS],
            title=self.epub.title[:MAX_META_CHARS],
            author=self.epub.author[:MAX_META_CHARS],
            language=self.epub.language[:MAX_LANGUAGE_CHARS],
            cover_key=cover_key(self.book, cover.extension, prefix) if cover else None,
            chapters=[
                Chapter(
                    number=number,
                    title=title[:MAX_META_CHARS],
                    jobs=[
                        ChapterJob(
                            id=job.job_id,
                            digest=job.digest(),
                            characters=len(job.text),
                            paragraphs=max(1, len(paragraphs(job.text))),
                        )
                        for job in jobs
                    ],
                )
                for number, (title, jobs) in enumerate(self.chapters, start=1)
            ],
        )


@dataclass
class LoadedJobs:
    valid: list[Job] = field(default_factory=list)
    invalid: list[InvalidLine] = field(default_factory=list)
    duplicates: int = 0  # identical requests given more than once, sent once
    book: LoadedBook | None = None  # an EPUB source: its chapters, for the book record

    @property
    def ids(self) -> list[str]:
        return [job.job_id for job in self.valid]

    @property
    def digests(self) -> dict[str, str | None]:
        """id -> the digest of its request: what `wait` and `results` check manifests by."""
        return {job.job_id: job.digest() for job in self.valid}


def load_jobs(
    source: str | Path | None,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    defaults: dict[str, Any] | None = None,
    split_chars: int | None = None,
    lexicon: Lexicon | None = None,
    voices: tuple[str, ...] | None = CUSTOM_VOICE_SPEAKERS,
) -> LoadedJobs:
    """Reads and validates every job. `defaults` fill fields a job does not set itself; a
    text longer than `split_chars` becomes parts `<id>.p001`… (tts_fleet/client/books.py);
    `lexicon` rewrites every text first, so the digests are those of the rewritten texts;
    `voices`: the only voices accepted (`submit` adds the library's; None accepts any)."""
    collector = _Collector(max_text_chars, defaults or {}, split_chars, lexicon)
    collector.voices = voices
    if source is None or str(source) == STDIN:
        collector.add_jsonl(STDIN_NAME, sys.stdin)
        return collector.loaded
    path = Path(source)
    if path.is_dir():
        for text_file in sorted(_text_files(path)):
            collector.add_text_file(text_file)
    elif path.is_file() and is_epub(path):
        collector.add_epub(path)
    elif path.is_file():
        with path.open("rb") as handle:
            collector.add_jsonl(str(path), handle)
    else:
        collector.loaded.invalid.append(InvalidLine(0, str(path), "no such file or directory"))
    return collector.loaded


def id_for_stem(stem: str) -> str:
    """A valid job id from a file name, stable whatever else is in the directory.

    A stem that is already a valid id is used as is. Any other (spaces, unicode, too long)
    is transliterated to ASCII and suffixed with a hash of the original name, so two names
    that sanitise alike ("a b", "a-b", "a_b"?) can never collide.
    """
    if stem and len(stem) <= MAX_ID_CHARS and not _UNSAFE.search(stem):
        return stem
    ascii_stem = unicodedata.normalize("NFKD", stem).encode("ascii", "ignore").decode("ascii")
    safe = _UNSAFE.sub("-", ascii_stem).strip("-.")
    digest = hashlib.sha256(stem.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    room = MAX_ID_CHARS - _HASH_CHARS - 1
    return f"{safe[:room].rstrip('-.')}-{digest}" if safe else f"txt-{digest}"


def book_id_for(stem: str) -> str:
    """`id_for_stem`, shortened (with its hash) to leave room for the chapter and part
    suffixes: `<book>-c001.p001` stays a job id."""
    book = id_for_stem(stem)
    if len(book) <= MAX_BOOK_ID_CHARS:
        return book
    digest = hashlib.sha256(stem.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    return f"{book[: MAX_BOOK_ID_CHARS - _HASH_CHARS - 1].rstrip('-.')}-{digest}"


# The EPUB's dc:language (BCP 47: its primary subtag) as one of Qwen3-TTS's languages.
_EPUB_LANGUAGES = {
    "en": "English", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "de": "German",
    "fr": "French", "ru": "Russian", "pt": "Portuguese", "es": "Spanish", "it": "Italian",
}  # fmt: skip


def epub_language(tag: str) -> str | None:
    """The job language an EPUB's language tag names, None when the model has no such one."""
    return _EPUB_LANGUAGES.get(tag.strip().lower().replace("_", "-").split("-")[0])


def _text_files(directory: Path) -> Iterator[Path]:
    for entry in directory.iterdir():
        if entry.is_file() and entry.suffix.lower() == TEXT_SUFFIX:
            yield entry


class _Collector:
    """Accumulates jobs, dropping exact repeats and rejecting one id used for two requests."""

    def __init__(
        self,
        max_text_chars: int,
        defaults: dict[str, Any],
        split_chars: int | None = None,
        lexicon: Lexicon | None = None,
    ) -> None:
        self.max_text_chars = max_text_chars
        self.defaults = defaults
        self.split_chars = split_chars
        self.lexicon = lexicon
        self.loaded = LoadedJobs()
        self._by_id: dict[str, tuple[Job, str]] = {}
        self.voices: tuple[str, ...] | None = CUSTOM_VOICE_SPEAKERS

    def add_jsonl(self, source: str, lines: Iterable[str | bytes]) -> None:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                self._add(source, number, _parse_line(line))

    def add_text_file(self, path: Path) -> None:
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (UnicodeDecodeError, OSError) as error:
            self.loaded.invalid.append(InvalidLine(0, str(path), f"cannot read as UTF-8: {error}"))
            return
        self._add(str(path), 0, {"id": id_for_stem(path.stem), "text": text})

    def add_epub(self, path: Path) -> None:
        """One job per chapter (`<book>-c001`…), a chapter longer than `--split-chars` (else
        than the text limit) as its parts in order; the chapters kept for the book record.
        Without --language, the book's own language when the model has it."""
        try:
            book = read_epub(path)
        except EpubError as error:
            self.loaded.invalid.append(InvalidLine(0, str(path), str(error)))
            return
        if not book.chapters:
            reason = "no chapters: nothing left after navigation, cover and notes"
            self.loaded.invalid.append(InvalidLine(0, str(path), reason))
            return
        if len(book.chapters) > MAX_CHAPTERS:  # what a book record may hold (book_record.py)
            reason = (
                f"{len(book.chapters)} chapters, more than a book record holds ({MAX_CHAPTERS})"
            )
            self.loaded.invalid.append(InvalidLine(0, str(path), reason))
            return
        loaded = LoadedBook(book_id_for(path.stem), str(path), book)
        language = epub_language(book.language)
        defaults = {**({"language": language} if language else {}), **self.defaults}
        limit = min(self.split_chars or self.max_text_chars, self.max_text_chars)
        for number, chapter in enumerate(book.chapters, start=1):
            base = chapter_id(loaded.book, number)
            text = self.lexicon.apply(chapter.text) if self.lexicon else chapter.text
            # Below the splitter's floor a long chapter stays whole: then it is too long, a line.
            short = len(text) <= limit or limit < MIN_SPLIT_CHARS
            pieces = [text] if short else split_text(text, limit)
            ids = [base] if len(pieces) == 1 else part_ids(base, len(pieces))
            where = f"{path} chapter {number}"
            try:
                jobs = [
                    self._validate({**defaults, "id": job_id, "text": piece}, self.max_text_chars)
                    for job_id, piece in zip(ids, pieces, strict=True)
                ]
            except InvalidJob as error:
                self.loaded.invalid.append(InvalidLine(0, where, error.reason))
                continue
            loaded.chapters.append((chapter.title, jobs))
        count = sum(len(jobs) for _, jobs in loaded.chapters)
        if count > MAX_JOBS:
            reason = (
                f"{count} jobs, more than a book record holds ({MAX_JOBS}): raise --split-chars"
            )
            self.loaded.invalid.append(InvalidLine(0, str(path), reason))
            return
        for _, jobs in loaded.chapters:
            for job in jobs:
                self._accept(job, str(path), 0, f"{path} {job.job_id}")
        if loaded.chapters:
            self.loaded.book = loaded

    def _add(self, source: str, line: int, data: dict[str, Any] | str) -> None:
        where = f"{source}:{line}" if line else source
        try:
            if isinstance(data, str):
                raise InvalidJob(data)
            merged = {**self.defaults, **data}
            if self.lexicon is not None and isinstance(merged.get("text"), str):
                merged["text"] = self.lexicon.apply(merged["text"])
            if self._too_long_for_one_job(merged):
                jobs = self._parts(merged)
            else:
                jobs = [self._validate(merged, self.max_text_chars).with_id()]
        except InvalidJob as error:
            reason = error.reason
            if "more than the limit" in reason and not self.split_chars:
                reason += "; pass --split-chars N to submit it as parts"
            self.loaded.invalid.append(InvalidLine(line, source, reason))
            return
        for job in jobs:
            self._accept(job, source, line, where)

    def _too_long_for_one_job(self, data: dict[str, Any]) -> bool:
        text = data.get("text")
        limit = self.split_chars
        return isinstance(text, str) and limit is not None and 0 < limit < len(text)

    def _parts(self, data: dict[str, Any]) -> list[Job]:
        """The source validated whole (for its id), then one job per piece of its text."""
        whole = self._validate(data, max(len(data["text"]), self.max_text_chars)).with_id()
        pieces = split_text(whole.text, int(self.split_chars or 0))
        ids = part_ids(whole.job_id, len(pieces))
        request = whole.model_dump()
        return [
            self._validate({**request, "id": job_id, "text": piece}, self.max_text_chars)
            for job_id, piece in zip(ids, pieces, strict=True)
        ]

    def _validate(self, data: dict[str, Any], max_text_chars: int) -> Job:
        return validate_job(data, max_text_chars, voices=self.voices)

    def _accept(self, job: Job, source: str, line: int, where: str) -> None:
        seen = self._by_id.get(job.job_id)
        if seen is None:
            self._by_id[job.job_id] = (job, where)
            self.loaded.valid.append(job)
        elif seen[0] == job:
            self.loaded.duplicates += 1
        else:
            reason = f"id {job.job_id} is already used by {seen[1]} for a different request"
            self.loaded.invalid.append(InvalidLine(line, source, reason))


def _parse_line(line: str | bytes) -> dict[str, Any] | str:
    """The line's JSON object, or a one-line reason why it is not one."""
    try:
        text = line.decode("utf-8-sig") if isinstance(line, bytes) else line
    except UnicodeDecodeError as error:
        return f"not UTF-8: byte {error.start} cannot be decoded"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        return f"not JSON: {error.msg} at column {error.colno}"
    except RecursionError:
        return "not JSON: nested too deeply"
    except ValueError as error:  # e.g. a number of more digits than int() converts
        return f"not JSON: {error}"
    if not isinstance(data, dict):
        return f"a job must be a JSON object, got {type(data).__name__}"
    return data
