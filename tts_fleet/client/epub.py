"""An EPUB as chapters of text, read with EbookLib (EPUB 2 and 3): `submit BOOK.epub`.

Which documents make chapters, in spine order:

- Skipped whole: the navigation document (EPUB 3 `nav`) and the NCX, the cover page (EPUB 3
  `cover` property, or the guide's or landmarks' `cover`), spine items marked
  `linear="no"`, and any document left with no text once the parts below are removed (a
  document whose `<body>` or sections are all footnotes, endnotes, a table of contents or
  landmarks: a notes section is one).
- Removed inside a document: elements whose `epub:type` (or DPUB-ARIA `role="doc-…"`) is
  nav, toc, landmarks, cover, footnote(s), endnote(s), rearnote(s), noteref or pagebreak
  (a note's text and the superscript that points at it), and `<script>`, `<style>`,
  `<head>`.
- Chapters are the table of contents' entries (EPUB 3 nav, else the NCX), flattened in
  order: an entry starts a chapter at its document; the documents up to the next entry's
  belong to it (a chapter spread over files is one chapter); the first entry naming a
  document wins (sub-entries pointing into the same file are part of its chapter); documents
  before the first entry (a title page, a copyright page) are left out. An entry whose
  document is skipped makes no chapter. Without a table of contents, each document with text
  is a chapter.
- A chapter's title is its entry's label, else its first heading, else "Chapter N".

Text: one paragraph per block element (p, div, h1–h6, li, blockquote, pre, …), whitespace
inside a paragraph collapsed (a `<br>` is a line break), paragraphs joined by a blank line
(book_record.PARAGRAPH_BREAK), where worker/text.py cuts first.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from tts_fleet.client.book_record import COVER_TYPES, PARAGRAPH_BREAK

EPUB_SUFFIX = ".epub"
# A novel's EPUB is a few MB with its images; this leaves room for illustrated books.
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
# epub:type values (EPUB 3 Structural Semantics) and role="doc-…" names whose element is not
# read aloud.
SKIPPED_TYPES = frozenset(
    {
        "nav", "toc", "landmarks", "page-list", "cover", "footnote", "footnotes", "endnote",
        "endnotes", "rearnote", "rearnotes", "noteref", "pagebreak",
    }
)  # fmt: skip
_HIDDEN_TAGS = frozenset({"script", "style", "head", "nav", "template"})
_BLOCK_TAGS = frozenset(
    {
        "p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "blockquote", "pre", "section",
        "article", "aside", "header", "footer", "figcaption", "dt", "dd", "tr", "table", "ul",
        "ol", "dl", "hr", "body", "main",
    }
)  # fmt: skip
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
# HTML void elements: they have no end tag, so they never open a skipped region.
_VOID_TAGS = frozenset(
    {"br", "img", "hr", "meta", "link", "input", "col", "area", "base", "wbr", "source"}
)
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_NCX_TYPE = "application/x-dtbncx+xml"
_HTML_TYPES = ("application/xhtml+xml", "text/html")


class EpubError(ValueError):
    """An EPUB that cannot be read; the message is one line."""


@dataclass(frozen=True)
class Cover:
    media_type: str
    data: bytes

    @property
    def extension(self) -> str:
        return COVER_TYPES[self.media_type]


@dataclass(frozen=True)
class EpubChapter:
    title: str
    text: str  # paragraphs joined by PARAGRAPH_BREAK


@dataclass
class EpubBook:
    title: str
    author: str
    language: str
    chapters: list[EpubChapter] = field(default_factory=list)
    cover: Cover | None = None
    skipped: list[str] = field(default_factory=list)  # "file: why", for the user


def is_epub(path: Path) -> bool:
    return path.suffix.lower() == EPUB_SUFFIX


def read_epub(path: Path) -> EpubBook:
    """The book's metadata, cover and chapters in spine order (the module's rules)."""
    from ebooklib import epub  # type: ignore[import-untyped]

    _check_size(path)
    try:
        book = epub.read_epub(str(path), {"ignore_ncx": True})
    except (epub.EpubException, zipfile.BadZipFile, KeyError, OSError, ValueError) as error:
        raise EpubError(f"not a readable EPUB: {_one_line(error)}") from None
    except Exception as error:  # lxml's XMLSyntaxError and the like: a broken package
        raise EpubError(
            f"not a readable EPUB: {type(error).__name__}: {_one_line(error)}"
        ) from None
    result = EpubBook(
        title=_first(book, "title"),
        author=", ".join(value for value, _ in book.get_metadata("DC", "creator") if value),
        language=_first(book, "language"),
        cover=_cover(book),
    )
    documents = _spine_documents(book, result.skipped)
    entries = _toc_entries(book.toc, _ncx_dir(book))
    result.chapters = _chapters(documents, entries, result.skipped)
    return result


def _check_size(path: Path) -> None:
    """EbookLib holds every item in memory: a package that unpacks to more than
    MAX_UNPACKED_BYTES (a zip bomb, or a comic of scans) is refused before it is read."""
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError) as error:
        raise EpubError(f"not a readable EPUB: {_one_line(error)}") from None
    if unpacked > MAX_UNPACKED_BYTES:
        raise EpubError(f"unpacks to {unpacked} bytes, more than {MAX_UNPACKED_BYTES}")


def _first(book: Any, name: str) -> str:
    values = book.get_metadata("DC", name)
    return _clean(str(values[0][0])) if values and values[0][0] else ""


def _cover(book: Any) -> Cover | None:
    """The EPUB 3 `cover-image` item, else the EPUB 2 `<meta name="cover">` item."""
    from ebooklib import ITEM_COVER

    items = list(book.get_items_of_type(ITEM_COVER))
    if not items:
        for _, attributes in book.get_metadata("OPF", "meta"):
            if (attributes or {}).get("name") == "cover":
                found = book.get_item_with_id(attributes.get("content", ""))
                items = [found] if found is not None else []
    for item in items:
        media_type = "image/jpeg" if item.media_type == "image/jpg" else item.media_type
        if media_type in COVER_TYPES and item.get_content():
            return Cover(media_type, bytes(item.get_content()))
    return None


@dataclass(frozen=True)
class _Document:
    name: str  # its path in the package, relative to the OPF
    paragraphs: list[str]
    heading: str


def _spine_documents(book: Any, skipped: list[str]) -> list[_Document]:
    """The spine's documents in order, without the skipped ones (recorded in `skipped`)."""
    from ebooklib import epub

    cover_pages = {
        _normal(str(ref.get("href") or "").split("#", 1)[0])
        for ref in book.guide
        if ref.get("type") == "cover"
    } | _landmark_covers(book)
    documents = []
    for idref, linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None:
            continue
        name = _normal(item.file_name)
        why = None
        if isinstance(item, epub.EpubNav) or item.media_type == _NCX_TYPE:
            why = "navigation"
        elif isinstance(item, epub.EpubCoverHtml) or name in cover_pages:
            why = "cover"
        elif str(linear).lower() == "no":
            why = 'linear="no"'
        elif item.media_type not in _HTML_TYPES:
            why = f"not a text document ({item.media_type})"
        if why is None:
            reader = _TextReader()
            reader.feed(item.get_content().decode("utf-8", "replace"))
            reader.close()
            if not reader.paragraphs:
                why = "no text outside navigation, cover and notes"
            else:
                documents.append(_Document(name, reader.paragraphs, reader.heading))
                continue
        skipped.append(f"{name}: {why}")
    return documents


def _landmark_covers(book: Any) -> set[str]:
    """The documents an EPUB 3 nav's landmarks call `cover`."""
    from ebooklib import epub

    found: set[str] = set()
    for item in book.get_items():
        if isinstance(item, epub.EpubNav):
            reader = _LandmarkReader()
            reader.feed(item.get_content().decode("utf-8", "replace"))
            base = posixpath.dirname(_normal(item.file_name))
            found |= {
                _normal(posixpath.join(base, href.split("#", 1)[0])) for href in reader.covers
            }
    return found


class _LandmarkReader(HTMLParser):
    """The links of `<nav epub:type="landmarks">` typed `cover`."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.covers: list[str] = []
        self._depth = 0  # > 0 inside the landmarks nav

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        types = (dict(attrs).get("epub:type") or "").split()
        if tag == "nav":
            self._depth += 1 if self._depth or "landmarks" in types else 0
        elif tag == "a" and self._depth and "cover" in types:
            self.covers.append(unquote(dict(attrs).get("href") or ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav" and self._depth:
            self._depth -= 1


def _ncx_dir(book: Any) -> str:
    """Where the NCX's relative links start (EbookLib leaves them as written)."""
    from ebooklib import ITEM_NAVIGATION

    for item in book.get_items_of_type(ITEM_NAVIGATION):
        if item.media_type == _NCX_TYPE:
            return posixpath.dirname(_normal(item.file_name))
    return ""


def _toc_entries(toc: Any, base: str) -> list[tuple[str, list[str]]]:
    """(label, candidate document names) of every entry, depth first."""
    from ebooklib import epub

    entries: list[tuple[str, list[str]]] = []

    def walk(nodes: Any) -> None:
        for item in nodes or ():
            entry: Any = item
            children: Any = None
            if isinstance(item, tuple) and len(item) == 2:  # (Section, [children])
                entry, children = item
            href = str(entry.href or "") if isinstance(entry, epub.Link | epub.Section) else ""
            if href:
                file = unquote(href.split("#", 1)[0])
                names = [_normal(file), _normal(posixpath.join(base, file))]
                entries.append((_clean(str(entry.title or "")), names))
            if children:
                walk(children)

    walk(toc)
    return entries


def _chapters(
    documents: list[_Document], entries: list[tuple[str, list[str]]], skipped: list[str]
) -> list[EpubChapter]:
    position = {document.name: index for index, document in enumerate(documents)}
    starts: dict[int, str] = {}  # document index -> its chapter's label
    for label, names in entries:
        index = next((position[name] for name in names if name in position), None)
        if index is not None and index not in starts:
            starts[index] = label
    if not entries:
        starts = {index: "" for index in range(len(documents))}
    order = sorted(starts)
    skipped.extend(f"{d.name}: before the first chapter" for d in documents[: (order or [0])[0]])
    chapters = []
    for number, (start, end) in enumerate(
        zip(order, [*order[1:], len(documents)], strict=True), start=1
    ):
        parts = documents[start:end]
        title = starts[start] or parts[0].heading or f"Chapter {number}"
        text = PARAGRAPH_BREAK.join(p for document in parts for p in document.paragraphs)
        chapters.append(EpubChapter(title, text))
    return chapters


class _TextReader(HTMLParser):
    """Paragraphs of an (X)HTML document, without the skipped elements (module docstring)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self.heading = ""
        self._current: list[str] = []
        self._hidden_depth = 0  # > 0 inside a skipped element
        self._stack: list[bool] = []  # per open element: whether it started a skipped region
        self._in_heading = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCK_TAGS:
            self._end_paragraph()
        if tag == "br":
            self._current.append("\n")
        if tag in _VOID_TAGS:
            return
        hides = tag in _HIDDEN_TAGS or _is_skipped(attrs)
        self._stack.append(hides)
        if hides:
            self._hidden_depth += 1
        if tag in _HEADINGS:
            self._in_heading = True

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCK_TAGS:
            self._end_paragraph()
        elif tag == "br":
            self._current.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID_TAGS or not self._stack:
            return
        if tag in _BLOCK_TAGS:
            self._end_paragraph()
        if self._stack.pop():
            self._hidden_depth -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden_depth:  # a line end in the source is a space; only <br> breaks
            self._current.append(data.replace("\r", " ").replace("\n", " "))

    def close(self) -> None:
        super().close()
        self._end_paragraph()

    def _end_paragraph(self) -> None:
        lines = (_clean(line) for line in "".join(self._current).split("\n"))
        text = "\n".join(line for line in lines if line)
        self._current = []
        if text:
            self.paragraphs.append(text)
            if self._in_heading and not self.heading:
                self.heading = text.replace("\n", " ")
        self._in_heading = False


def _is_skipped(attrs: list[tuple[str, str | None]]) -> bool:
    for name, value in attrs:
        if value and name in ("epub:type", "role"):
            words = {word.removeprefix("doc-") for word in value.lower().split()}
            if words & SKIPPED_TYPES:
                return True
    return False


def _normal(name: str) -> str:
    return posixpath.normpath(unquote(name)).lstrip("/") if name else ""


def _clean(text: str) -> str:
    return _SPACES.sub(" ", text.replace("\n", " ")).strip()


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]
