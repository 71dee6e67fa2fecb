"""`tts-fleet local --input BOOK.epub`: a book end to end as a user runs it (issue 25). An
EPUB of 5 table-of-contents chapters, a navigation page, a cover and a footnotes section is
exactly 5 jobs, done, with the book record (chapters in order) and cover beside them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lib.epubs import COVER_PNG, TITLE, chapter_title, make_book
from tests.lib.local_cli import RUN_TIMEOUT
from tts_fleet.client.book_record import cover_key, parse_book_record, record_key
from worker.jobs import Manifest

pytestmark = pytest.mark.processes

BOOK = "novel"


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_an_epub_runs_end_to_end_as_one_job_per_chapter(  # type: ignore[no-untyped-def]
    start, tmp_path: Path
) -> None:
    path = make_book(tmp_path / f"{BOOK}.epub", words={2: ("Ngozi", "waves.")})
    lexicon = tmp_path / "names.tsv"
    lexicon.write_text("# how to say them\nNgozi\tEn-go-zee\n", encoding="utf-8")
    run = start(
        "--input", str(path), "--lexicon", str(lexicon), "--backend", "tone",
        "--max-workers", "2", "--jobs-per-worker", "5", "--tick", "0.3", "--json",
    )  # fmt: skip
    code, stdout, stderr = run.finish(timeout=RUN_TIMEOUT)
    assert code == 0, stderr[-2000:]
    ids = [f"{BOOK}-c{n:03d}" for n in range(1, 6)]
    assert json.loads(stdout)["completed"] == 5
    assert sorted(p.stem for p in run.out.glob("*.json")) == ids
    record = parse_book_record((run.out / record_key(BOOK)).read_bytes(), BOOK)
    assert record.title == TITLE
    assert [c.title for c in record.chapters] == [chapter_title(n) for n in range(1, 6)]
    assert record.job_ids() == ids
    assert (run.out / cover_key(BOOK, "png")).read_bytes() == COVER_PNG
    for job_id, digest in record.digests().items():
        manifest = Manifest.model_validate_json((run.out / f"{job_id}.json").read_bytes())
        assert manifest.made_from(digest)  # the record names the very requests synthesized
        assert (run.out / f"{job_id}.wav").stat().st_size > 44
        assert "footnote" not in str(manifest.request["text"]).lower()
    chapter_two = json.loads((run.out / f"{BOOK}-c002.json").read_text())["request"]["text"]
    assert "En-go-zee waves." in chapter_two and "Ngozi" not in chapter_two
