"""EPUB in: chapters from the table of contents in spine order, the skipped sections, the
paragraphs, the metadata and the cover; and the jobs and book record `load_jobs` makes."""

from __future__ import annotations

from pathlib import Path

import pytest
from ebooklib import epub  # type: ignore[import-untyped]

from tests.lib.epubs import AUTHOR, COVER_PNG, TITLE, chapter_title, make_book
from tts_fleet.client.book_record import PARAGRAPH_BREAK, parse_book_record
from tts_fleet.client.epub import EpubError, read_epub
from tts_fleet.client.inputs import book_id_for, load_jobs
from tts_fleet.client.lexicon import parse_lexicon
from worker.jobs import is_job_id


def test_five_toc_chapters_and_nothing_else(tmp_path: Path) -> None:
    book = read_epub(make_book(tmp_path / "b.epub"))
    assert [chapter.title for chapter in book.chapters] == [chapter_title(n) for n in range(1, 6)]
    assert (book.title, book.author, book.language) == (TITLE, AUTHOR, "en")
    assert book.cover is not None and book.cover.data == COVER_PNG
    assert book.cover.extension == "png"
    text = "\n".join(chapter.text for chapter in book.chapters)
    assert "footnote" not in text.lower()  # the notes section and the inline note
    assert "Cover" not in text and "Table of contents" not in text
    assert "A noted line." in text and "A noted line.1" not in text  # the noteref is dropped
    skipped = " ".join(book.skipped)
    assert "nav.xhtml: navigation" in skipped and "notes.xhtml" in skipped
    assert "cover.xhtml" in skipped


def test_paragraphs_are_separated_by_a_blank_line(tmp_path: Path) -> None:
    body = {
        1: "<h1>One</h1><p>First\n   line <i>goes</i>\non.</p><p>Second<br/>verse line.</p>"
        "<div><p>Nested.</p></div>"
    }
    book = read_epub(make_book(tmp_path / "b.epub", chapters=1, body=body))
    assert book.chapters[0].text.split(PARAGRAPH_BREAK) == [
        "One",
        "First line goes on.",
        "Second\nverse line.",
        "Nested.",
    ]


def _epub(path: Path, documents: list[tuple[str, str, bool]], toc: list[tuple[str, str]]) -> Path:
    """An EPUB of (file, body, linear) documents in spine order and (label, href) entries."""
    book = epub.EpubBook()
    book.set_identifier("x")
    book.set_title("X")
    book.set_language("fr")
    spine: list[object] = ["nav"]
    for name, body, linear in documents:
        item = epub.EpubHtml(title=name, file_name=name)
        item.content = f"<html><body>{body}</body></html>"
        book.add_item(item)
        spine.append((item.id, "yes" if linear else "no"))
    book.toc = [epub.Link(href, label, f"t{i}") for i, (label, href) in enumerate(toc)]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = spine
    epub.write_epub(str(path), book)
    return path


def test_a_chapter_spans_the_files_up_to_the_next_entry_and_front_matter_is_left_out(
    tmp_path: Path,
) -> None:
    path = _epub(
        tmp_path / "x.epub",
        [
            ("title.xhtml", "<p>Title page.</p>", True),
            ("a.xhtml", "<p>A one.</p>", True),
            ("a2.xhtml", "<p>A two.</p>", True),
            ("hidden.xhtml", "<p>Not in reading order.</p>", False),
            ("b.xhtml", "<h2>Bee</h2><p>B one.</p>", True),
            ("end.xhtml", '<section epub:type="endnotes"><p>Endnote.</p></section>', True),
        ],
        [("A", "a.xhtml"), ("A, part two", "a.xhtml#s2"), ("", "b.xhtml"), ("Notes", "end.xhtml")],
    )
    book = read_epub(path)
    assert [(c.title, c.text) for c in book.chapters] == [
        ("A", f"A one.{PARAGRAPH_BREAK}A two."),
        ("Bee", f"Bee{PARAGRAPH_BREAK}B one."),  # no label: the first heading
    ]
    skipped = " ".join(book.skipped)
    assert 'hidden.xhtml: linear="no"' in skipped
    assert "title.xhtml: before the first chapter" in skipped
    assert "end.xhtml: no text" in skipped


def test_a_linear_cover_page_named_by_type_is_skipped(tmp_path: Path) -> None:
    path = _epub(
        tmp_path / "x.epub",
        [
            ("cover.xhtml", '<section epub:type="cover"><p>A Novel</p></section>', True),
            ("a.xhtml", "<p>Text.</p>", True),
        ],
        [("Cover", "cover.xhtml"), ("A", "a.xhtml")],
    )
    assert [c.title for c in read_epub(path).chapters] == ["A"]


def test_not_an_epub_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.epub"
    path.write_bytes(b"PK not really a zip")
    with pytest.raises(EpubError, match="not a readable EPUB"):
        read_epub(path)
    loaded = load_jobs(path)
    assert len(loaded.invalid) == 1
    assert loaded.invalid[0].describe().startswith(f"{path}: not a readable EPUB")


def test_load_jobs_makes_one_job_per_chapter_and_the_record(tmp_path: Path) -> None:
    loaded = load_jobs(make_book(tmp_path / "My Book.epub"), defaults={"voice": "Ryan"})
    book = book_id_for("My Book")
    assert loaded.ids == [f"{book}-c{n:03d}" for n in range(1, 6)]
    assert {job.language for job in loaded.valid} == {"English"}  # from dc:language "en"
    assert {job.voice for job in loaded.valid} == {"Ryan"}
    assert loaded.book is not None
    record = parse_book_record(loaded.book.record("p/").to_json(), book, "p/")
    assert record.cover_key == f"p/books/{book}/cover.png"
    assert [c.title for c in record.chapters] == [chapter_title(n) for n in range(1, 6)]
    assert record.digests() == loaded.digests
    assert record.chapters[0].jobs[0].paragraphs == 3  # the heading and two paragraphs


def test_a_long_chapter_becomes_ordered_parts_within_the_limit(tmp_path: Path) -> None:
    words = {3: tuple(f"Sentence number {i} is here." for i in range(60))}
    loaded = load_jobs(make_book(tmp_path / "b.epub", words=words), max_text_chars=400)
    assert loaded.book is not None
    chapters = loaded.book.record().chapters
    parts = [job.id for job in chapters[2].jobs]
    assert len(parts) > 1 and parts == sorted(parts)
    assert parts[0] == "b-c003.p001"
    texts = {job.job_id: job.text for job in loaded.valid}
    assert all(len(texts[part]) <= 400 for part in parts)
    assert "".join(texts[p] for p in parts).count("Sentence number") == 60
    assert [len(c.jobs) for c in chapters] == [1, 1, len(parts), 1, 1]


def test_a_lexicon_edit_changes_only_the_digests_of_the_chapters_it_touches(
    tmp_path: Path,
) -> None:
    path = make_book(tmp_path / "b.epub", words={4: ("Ngozi",)})
    before = load_jobs(path, lexicon=parse_lexicon("Ngozi\tEn-go-zee\n")).digests
    after = load_jobs(path, lexicon=parse_lexicon("Ngozi\tUhn-go-zee\n")).digests
    assert [job_id for job_id in before if before[job_id] != after[job_id]] == ["b-c004"]
    jobs = {j.job_id: j.text for j in load_jobs(path, lexicon=parse_lexicon("Ngozi\tX\n")).valid}
    assert "chapter 4. X" in jobs["b-c004"]


def test_a_lexicon_applies_to_jsonl_and_text_jobs_too(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Dr Who.", encoding="utf-8")
    loaded = load_jobs(tmp_path, lexicon=parse_lexicon("Dr\tDoctor\n"))
    assert [job.text for job in loaded.valid] == ["Doctor Who."]


def test_a_long_book_name_leaves_room_for_chapter_and_part_suffixes() -> None:
    book = book_id_for("x" * 300)
    assert len(book) <= 100 and is_job_id(f"{book}-c1000.p1000")
    assert book_id_for("Moby Dick") != book_id_for("Moby-Dick")


def test_a_limit_below_the_splitters_floor_makes_a_long_chapter_an_invalid_line(
    tmp_path: Path,
) -> None:
    loaded = load_jobs(make_book(tmp_path / "b.epub", chapters=2), max_text_chars=50)
    assert loaded.valid == [] and loaded.book is None
    assert [line.source for line in loaded.invalid] == [
        f"{tmp_path / 'b.epub'} chapter 1",
        f"{tmp_path / 'b.epub'} chapter 2",
    ]
    assert all("more than the limit of 50" in line.reason for line in loaded.invalid)


def test_a_package_that_unpacks_too_large_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tts_fleet.client.epub as reader

    monkeypatch.setattr(reader, "MAX_UNPACKED_BYTES", 1_000)
    with pytest.raises(EpubError, match="unpacks to"):
        read_epub(make_book(tmp_path / "b.epub"))


def test_over_long_metadata_is_clipped_to_what_a_record_holds(tmp_path: Path) -> None:
    loaded = load_jobs(make_book(tmp_path / "b.epub", chapters=1))
    assert loaded.book is not None
    loaded.book.epub.title = "T" * 5_000
    loaded.book.epub.language = "x" * 100
    record = loaded.book.record()
    assert len(record.title) == 1_000 and len(record.language) == 64


def test_a_cover_page_named_by_the_guide_is_skipped_though_it_has_text(tmp_path: Path) -> None:
    book = epub.EpubBook()
    book.set_identifier("g")
    book.set_title("G")
    book.set_language("en")
    documents = []
    for name, body in (("front.xhtml", "<p>A Novel, by Someone</p>"), ("a.xhtml", "<p>Text.</p>")):
        item = epub.EpubHtml(title=name, file_name=name)
        item.content = f"<html><body>{body}</body></html>"
        book.add_item(item)
        documents.append(item)
    book.guide.append({"type": "cover", "href": "front.xhtml", "title": "Cover"})
    book.toc = [epub.Link("front.xhtml", "Cover", "c"), epub.Link("a.xhtml", "A", "a")]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *documents]
    path = tmp_path / "g.epub"
    epub.write_epub(str(path), book)
    read = read_epub(path)
    assert [c.title for c in read.chapters] == ["A"]
    assert "front.xhtml: cover" in read.skipped
