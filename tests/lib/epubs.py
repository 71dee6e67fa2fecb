"""EPUBs made with EbookLib for the tests of `submit BOOK.epub` (tts_fleet/client/epub.py).

`make_book` writes what the issue's done-when names: chapters listed in the table of
contents, plus a navigation page, a cover page and a footnotes section in the spine, none of
which may become a job; chapter 2 carries a note reference and an inline footnote.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from ebooklib import epub  # type: ignore[import-untyped]


def _png_1x1() -> bytes:
    """A 1x1 RGBA PNG with correct chunk CRCs (decoders such as ffmpeg check them)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)
    pixels = zlib.compress(b"\x00\x80\x40\x20\xff")  # filter 0, one RGBA pixel
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


# The cover the tests compare byte for byte.
COVER_PNG = _png_1x1()
TITLE = "The Test Book"
AUTHOR = "Ada Author"


def chapter_title(number: int) -> str:
    return f"Chapter {number}: Part {'ABCDEFGHIJ'[(number - 1) % 10]}"


def chapter_paragraphs(number: int, words: tuple[str, ...] = ()) -> list[str]:
    """The paragraphs chapter `number` holds (after its heading); `words` go in the first."""
    extra = " ".join(words)
    return [
        f"This is the first paragraph of chapter {number}. {extra}".strip(),
        f"The second paragraph of chapter {number} is here, and it ends now.",
    ]


def make_book(
    path: Path,
    chapters: int = 5,
    words: dict[int, tuple[str, ...]] | None = None,
    body: dict[int, str] | None = None,
) -> Path:
    """An EPUB 3 at `path`: `chapters` TOC chapters, with `words[n]` in chapter n's first
    paragraph or `body[n]` (raw XHTML) as its whole body; a cover page (and image), the nav
    page and a footnotes section in the spine."""
    book = epub.EpubBook()
    book.set_identifier("test-book-1")
    book.set_title(TITLE)
    book.set_language("en")
    book.add_author(AUTHOR)
    book.set_cover("cover.png", COVER_PNG)
    items = []
    for number in range(1, chapters + 1):
        item = epub.EpubHtml(
            title=chapter_title(number), file_name=f"text/ch{number:02d}.xhtml", lang="en"
        )
        content = (body or {}).get(number)
        if content is None:
            paragraphs = chapter_paragraphs(number, (words or {}).get(number, ()))
            content = f"<h1>{chapter_title(number)}</h1>" + "".join(
                f"<p>{text}</p>" for text in paragraphs
            )
            if number == 2:
                content += (
                    '<p>A noted line.<a epub:type="noteref" href="notes.xhtml#n1">1</a></p>'
                    '<aside epub:type="footnote" id="a1"><p>An inline footnote.</p></aside>'
                )
        item.content = f"<html><body>{content}</body></html>"
        book.add_item(item)
        items.append(item)
    notes = epub.EpubHtml(title="Notes", file_name="text/notes.xhtml", lang="en")
    notes.content = (
        '<html><body><section epub:type="footnotes"><h2>Notes</h2>'
        '<aside epub:type="footnote" id="n1"><p>1. A footnote to skip.</p></aside>'
        "</section></body></html>"
    )
    book.add_item(notes)
    book.toc = [epub.Link(item.file_name, item.title, f"ch{i}") for i, item in enumerate(items)]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["cover", "nav", *items, notes]
    epub.write_epub(str(path), book)
    return path
