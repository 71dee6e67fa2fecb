"""The book record: written by submit, read back as untrusted input by results --book."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tts_fleet.client.book_record import (
    MAX_RECORD_BYTES,
    BookRecord,
    InvalidBookRecord,
    chapter_id,
    cover_key,
    paragraphs,
    parse_book_record,
    record_key,
)

DIGEST = "ab" * 32


def record(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "version": 1,
        "book": "moby",
        "title": "Moby-Dick",
        "author": "Herman Melville",
        "language": "en",
        "cover_key": "p/books/moby/cover.jpg",
        "chapters": [
            {
                "number": 1,
                "title": "Loomings",
                "jobs": [{"id": "moby-c001", "digest": DIGEST, "characters": 9, "paragraphs": 2}],
            },
            {
                "number": 2,
                "title": "The Carpet-Bag",
                "jobs": [
                    {"id": "moby-c002.p001", "digest": DIGEST, "characters": 5, "paragraphs": 1},
                    {"id": "moby-c002.p002", "digest": DIGEST, "characters": 5, "paragraphs": 1},
                ],
            },
        ],
    }
    data.update(changes)
    return data


def encoded(data: object) -> bytes:
    return json.dumps(data).encode()


def test_a_written_record_reads_back_the_same() -> None:
    written = BookRecord.model_validate(record())
    read = parse_book_record(written.to_json(), "moby", "p/")
    assert read == written
    assert read.job_ids() == ["moby-c001", "moby-c002.p001", "moby-c002.p002"]
    assert list(read.digests()) == read.job_ids()


def test_keys_and_chapter_ids() -> None:
    assert record_key("moby", "p/") == "p/books/moby.json"
    assert cover_key("moby", "png") == "books/moby/cover.png"
    assert [chapter_id("moby", n) for n in (1, 12, 1234)] == [
        "moby-c001",
        "moby-c012",
        "moby-c1234",
    ]


def test_paragraphs_are_the_blank_line_separated_blocks() -> None:
    assert paragraphs("One.\n\nTwo\nstill two.\n \n\nThree.\n") == [
        "One.",
        "Two\nstill two.",
        "Three.",
    ]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (record(book="other"), "names book 'other'"),
        (record(cover_key="p/books/other/cover.jpg"), "cover key"),
        (record(cover_key="p/outputs/moby-c001.wav"), "cover key"),
        (record(cover_key="p/books/moby/cover.svg"), "cover key"),
        (record(chapters=[]), "chapters"),
        (record(version=2), "version"),
        (record(title="x" * 5_000), "title"),
    ],
)
def test_a_record_that_is_not_this_books_is_refused(data: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidBookRecord, match=reason):
        parse_book_record(encoded(data), "moby", "p/")


def test_ids_digests_and_order_are_checked() -> None:
    chapters = record()["chapters"]
    planted = json.loads(json.dumps(chapters))
    planted[0]["jobs"][0]["id"] = "../../x"
    with pytest.raises(InvalidBookRecord, match="id"):
        parse_book_record(encoded(record(chapters=planted)), "moby", "p/")
    twice = json.loads(json.dumps(chapters))
    twice[1]["jobs"][0]["id"] = "moby-c001"
    with pytest.raises(InvalidBookRecord, match="twice"):
        parse_book_record(encoded(record(chapters=twice)), "moby", "p/")
    unordered = json.loads(json.dumps(chapters))
    unordered[0]["number"], unordered[1]["number"] = 2, 1
    with pytest.raises(InvalidBookRecord, match="in order"):
        parse_book_record(encoded(record(chapters=unordered)), "moby", "p/")
    short = json.loads(json.dumps(chapters))
    short[0]["jobs"][0]["digest"] = "abc"
    with pytest.raises(InvalidBookRecord, match="digest"):
        parse_book_record(encoded(record(chapters=short)), "moby", "p/")


def test_a_newline_after_an_id_is_no_job_id() -> None:
    chapters = record()["chapters"]
    chapters[0]["jobs"][0]["id"] = "moby-c001\n"
    with pytest.raises(InvalidBookRecord):
        parse_book_record(encoded(record(chapters=chapters)), "moby", "p/")


@pytest.mark.parametrize(
    "data",
    [b"\xff\xfe", b"[1, 2]", b"{" * 100_000, b" " * (MAX_RECORD_BYTES + 1)],
)
def test_bytes_that_are_no_record_are_one_line_errors(data: bytes) -> None:
    with pytest.raises(InvalidBookRecord) as error:
        parse_book_record(data, "moby")
    assert "\n" not in str(error.value)
