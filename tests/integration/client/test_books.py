"""`submit BOOK.epub` against the emulator: one job per TOC chapter, the book record and cover
in the bucket; `--lexicon` edits re-render exactly the chapters they change, checked end to
end with a real `Worker` (in a thread, a stand-in speech client) that skips done requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.lib.client_stack import Stack, drain_bodies, run, run_json
from tests.lib.epubs import COVER_PNG, chapter_title, make_book
from tests.lib.fake_worker import FakeSpeech, make_worker, run_until
from tests.lib.procs import visible_and_in_flight
from tts_fleet.client.book_record import parse_book_record, record_key
from tts_fleet.exit_codes import ExitCode

BOOK = "novel"
IDS = [f"{BOOK}-c{n:03d}" for n in range(1, 6)]


def lexicon(path: Path, name_as: str) -> Path:
    path.write_text(f"# names\nNgozi\t{name_as}\nqwen\tchwen\n", encoding="utf-8")
    return path


def drain(stack: Stack, speech: FakeSpeech) -> None:
    """Runs a worker until the queue is empty and nothing is in flight."""
    sqs, s3 = boto3.client("sqs"), boto3.client("s3")
    names = {"queue_url": stack.queue_url, "dlq_url": stack.dlq_url, "bucket": stack.bucket}
    run_until(
        make_worker(names, sqs, s3, speech),
        lambda: visible_and_in_flight(sqs, stack.queue_url) == (0, 0),
    )


def stored(stack: Stack, key: str) -> bytes:
    return bytes(boto3.client("s3").get_object(Bucket=stack.bucket, Key=key)["Body"].read())


def test_an_epub_is_one_job_per_chapter_with_its_record_and_cover(
    stack: Stack, tmp_path: Path
) -> None:
    path = make_book(tmp_path / f"{BOOK}.epub")
    code, receipt = run_json("submit", str(path), "--voice", "Ryan")
    assert code == ExitCode.OK and receipt["ids"] == IDS
    bodies = drain_bodies(stack.queue_url)
    assert sorted(body["id"] for body in bodies) == IDS
    assert all("footnote" not in body["text"].lower() for body in bodies)
    record = parse_book_record(stored(stack, record_key(BOOK)), BOOK)
    assert [chapter.title for chapter in record.chapters] == [chapter_title(n) for n in range(1, 6)]
    assert record.digests() == receipt["digests"]
    assert record.cover_key == f"books/{BOOK}/cover.png"
    assert stored(stack, record.cover_key) == COVER_PNG
    text = run("submit", str(path)).stdout
    assert f"book {BOOK}: 5 chapter(s), record s3://{stack.bucket}/books/{BOOK}.json" in text


@pytest.mark.timeout(120)
def test_editing_one_lexicon_entry_re_renders_exactly_its_one_chapter(
    stack: Stack, tmp_path: Path
) -> None:
    path = make_book(tmp_path / f"{BOOK}.epub", words={3: ("Ngozi", "speaks.")})
    code, first = run_json(
        "submit", str(path), "--lexicon", str(lexicon(tmp_path / "a.tsv", "En-go-zee"))
    )
    assert code == ExitCode.OK and first["sent"] == 5
    speech = FakeSpeech(0.0)
    drain(stack, speech)
    assert len(speech.calls) == 5 and any("En-go-zee speaks." in t for t in speech.calls)

    edited = lexicon(tmp_path / "b.tsv", "Un-go-zee")
    code, second = run_json("submit", str(path), "--lexicon", str(edited))
    assert code == ExitCode.OK
    assert (second["replaces"], second["already_done"]) == (1, 4)
    changed = [i for i in IDS if first["digests"][i] != second["digests"][i]]
    assert changed == [f"{BOOK}-c003"]
    record = parse_book_record(stored(stack, record_key(BOOK)), BOOK)
    assert record.digests() == second["digests"]  # the record follows the latest submit

    speech = FakeSpeech(0.0)
    drain(stack, speech)
    assert len(speech.calls) == 1 and "Un-go-zee speaks." in speech.calls[0]
    manifest = json.loads(stored(stack, f"outputs/{BOOK}-c003.json"))
    assert "Un-go-zee" in manifest["request"]["text"]


def test_a_bad_lexicon_sends_nothing_and_names_every_bad_line(stack: Stack, tmp_path: Path) -> None:
    path = make_book(tmp_path / f"{BOOK}.epub")
    bad = tmp_path / "bad.tsv"
    bad.write_text("ok\tfine\nno tab\nalso\tbad\tline\n", encoding="utf-8")
    result = run("submit", str(path), "--lexicon", str(bad))
    assert result.exit_code == ExitCode.BAD_INPUT
    assert f"{bad}:2: expected term<TAB>replacement" in result.stderr
    assert f"{bad}:3: expected term<TAB>replacement" in result.stderr
    assert drain_bodies(stack.queue_url) == []


class _DenyBooks:
    """A producer whose S3 PutObject on books/ is refused, as by an old producer policy."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def put_object(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "denied"}}, "PutObject")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_producer_that_may_not_write_the_record_sends_nothing(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tts_fleet.cli.submit as cli_submit

    real = cli_submit.client_for

    def clients(name: str, *args: Any, **kwargs: Any) -> Any:
        client = real(name, *args, **kwargs)
        return _DenyBooks(client) if name == "s3" else client

    monkeypatch.setattr(cli_submit, "client_for", clients)
    result = run("submit", str(make_book(tmp_path / f"{BOOK}.epub")))
    assert result.exit_code == ExitCode.FAILED
    assert "s3:PutObject on books/*" in result.stderr
    assert drain_bodies(stack.queue_url) == []
