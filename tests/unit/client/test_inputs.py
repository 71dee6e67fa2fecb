"""Reading jobs: validation of every line at once, ids from awkward file names, stdin."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from tts_fleet.client.inputs import id_for_stem, load_jobs
from tts_fleet.client.submit import SubmitReceipt, load_submitted
from worker.jobs import ID_PATTERN, Job, derive_id

BAD_LINES = {4: "{not json", 9: '{"text": ""}', 15: '{"text": "hi", "colour": "red"}'}


def twenty_lines(path: Path) -> Path:
    lines = [json.dumps({"id": f"j{n:02d}", "text": f"line {n}"}) for n in range(1, 21)]
    for number, bad in BAD_LINES.items():
        lines[number - 1] = bad
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_invalid_line_is_reported_with_its_number(tmp_path: Path) -> None:
    loaded = load_jobs(twenty_lines(tmp_path / "jobs.jsonl"))
    assert len(loaded.valid) == 17
    assert [bad.line for bad in loaded.invalid] == sorted(BAD_LINES)
    reasons = {bad.line: bad.reason for bad in loaded.invalid}
    assert reasons[4].startswith("not JSON")
    assert "text" in reasons[9]
    assert "colour: unknown field" in reasons[15]
    assert loaded.invalid[0].describe() == f"{tmp_path / 'jobs.jsonl'}:4: {reasons[4]}"


def test_a_deeply_nested_or_overlong_line_is_an_invalid_line_not_a_crash(tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    nested = "[" * 100_000 + "]" * 100_000
    overlong = '{"text": "hi", "speed": ' + "9" * 5000 + "}"
    source.write_text(f'{nested}\n{overlong}\n{{"id": "ok", "text": "hi"}}\n')
    loaded = load_jobs(source)
    assert [job.id for job in loaded.valid] == ["ok"]
    reasons = {bad.line: bad.reason for bad in loaded.invalid}
    assert reasons[1] == "not JSON: nested too deeply"
    assert reasons[2].startswith("not JSON: ")


def test_wait_and_results_read_a_file_whose_first_line_nests_deeply(tmp_path: Path) -> None:
    # What submit accepted (the nested line reported, the rest sent) is what they wait for.
    source = tmp_path / "jobs.jsonl"
    source.write_text("[" * 100_000 + "]" * 100_000 + '\n{"id": "ok", "text": "hi"}\n')
    assert list(load_submitted(str(source))) == ["ok"]


def test_ids_are_made_explicit_and_derived_from_the_request(tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text('{"text": "hello"}\n\n{"id": "mine", "text": "hi"}\n')
    loaded = load_jobs(source)
    assert [job.id for job in loaded.valid] == [derive_id(Job(text="hello").request()), "mine"]
    assert loaded.invalid == []


def test_repeats_are_dropped_and_an_id_reused_for_other_work_is_invalid(tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text(
        '{"id": "a", "text": "one"}\n{"id": "a", "text": "one"}\n{"text": "two"}\n'
        '{"text": "two"}\n{"id": "a", "text": "other"}\n'
    )
    loaded = load_jobs(source)
    assert len(loaded.valid) == 2
    assert loaded.duplicates == 2
    assert [(bad.line, bad.reason) for bad in loaded.invalid] == [
        (5, f"id a is already used by {source}:1 for a different request")
    ]


def test_a_line_that_is_not_utf8_is_one_invalid_line(tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_bytes(b'{"text": "ok"}\n{"text": "\xff"}\n{"text": "fine"}\n')
    loaded = load_jobs(source)
    assert len(loaded.valid) == 2
    assert [bad.line for bad in loaded.invalid] == [2]
    assert "not UTF-8" in loaded.invalid[0].reason


def test_defaults_fill_only_fields_a_job_does_not_set(tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text('{"text": "a"}\n{"text": "b", "voice": "Ryan"}\n')
    loaded = load_jobs(source, defaults={"voice": "Serena"})
    assert [job.voice for job in loaded.valid] == ["Serena", "Ryan"]


def test_text_over_the_limit_is_invalid(tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text(json.dumps({"text": "x" * 101}) + "\n")
    loaded = load_jobs(source, max_text_chars=100)
    assert loaded.valid == []
    assert "more than the limit of 100" in loaded.invalid[0].reason


def test_stdin_is_read_when_the_source_is_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO('{"id": "s1", "text": "from a pipe"}\n'))
    loaded = load_jobs("-")
    assert [job.id for job in loaded.valid] == ["s1"]


AWKWARD = [
    "Chapter 1.txt",
    "café au lait.txt",
    "naïve (draft) #2.txt",
    "a b.txt",
    "a-b.txt",
    "a_b.txt",
    "日本語.txt",
    "plain-name_1.0.txt",
    "UPPER.TXT",
    "x" * 200 + ".txt",
]


def test_awkward_file_names_become_valid_unique_stable_ids(tmp_path: Path) -> None:
    texts = tmp_path / "texts"
    texts.mkdir()
    for number, name in enumerate(AWKWARD):
        (texts / name).write_text(f"Text number {number}.", encoding="utf-8")
    (texts / "notes.md").write_text("not a job")
    first = load_jobs(texts)
    ids = {job.text.split()[-1].rstrip("."): job.job_id for job in first.valid}  # number -> id
    assert first.invalid == []
    assert len(ids) == len(AWKWARD) == len(set(ids.values()))
    assert all(re.match(ID_PATTERN, job_id) for job_id in ids.values())
    assert ids["7"] == "plain-name_1.0" and ids["8"] == "UPPER"  # a valid stem is kept as is
    assert ids["0"].startswith("Chapter-1-") and ids["1"].startswith("cafe-au-lait-")
    assert ids["6"].startswith("txt-")  # nothing transliterates: a hash of the name only
    # Stable: the id of a file does not depend on what else is in the directory.
    (texts / "a-b.txt").unlink()
    again = {job.text.split()[-1].rstrip("."): job.id for job in load_jobs(texts).valid}
    assert again == {key: value for key, value in ids.items() if key != "4"}


def test_id_for_stem_keeps_distinct_names_apart() -> None:
    assert id_for_stem("a b") != id_for_stem("a  b") != id_for_stem("a-b")
    assert id_for_stem("a-b") == "a-b"
    assert id_for_stem("a b") == id_for_stem("a b")


def test_an_empty_or_unreadable_text_file_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("   \n")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "good.txt").write_text("Good.")
    loaded = load_jobs(tmp_path)
    assert [job.id for job in loaded.valid] == ["good"]
    reasons = sorted((Path(bad.source).name, bad.line) for bad in loaded.invalid)
    assert reasons == [("empty.txt", 0), ("latin1.txt", 0)]


def test_a_missing_source_is_reported_not_raised(tmp_path: Path) -> None:
    loaded = load_jobs(tmp_path / "nope.jsonl")
    assert loaded.valid == [] and loaded.invalid[0].reason == "no such file or directory"


def test_ids_come_from_a_submit_receipt_or_from_the_input(tmp_path: Path) -> None:
    receipt = tmp_path / "submitted.json"
    receipt.write_text(json.dumps({"sent": 2, "ids": ["x1", "x2"]}))  # before digests existed
    assert load_submitted(receipt) == {"x1": None, "x2": None}
    jobs = twenty_lines(tmp_path / "jobs.jsonl")
    assert list(load_submitted(jobs)) == [f"j{n:02d}" for n in range(1, 21) if n not in BAD_LINES]
    one_line = tmp_path / "one.jsonl"
    one_line.write_text('{"id": "only", "text": "a single line is JSON too"}\n')
    assert list(load_submitted(one_line)) == ["only"]


def test_a_receipt_reads_back_as_it_was_written(tmp_path: Path) -> None:
    loaded = load_jobs(twenty_lines(tmp_path / "jobs.jsonl"))
    written = SubmitReceipt.before_sending("https://q/jobs", loaded)
    written.sent, written.ids, written.replaces = 2, loaded.ids[:2], 1
    written.failed = {loaded.ids[2]: "Throttled"}
    read = SubmitReceipt.from_json(json.loads(json.dumps(written.to_json())))
    assert read == written
    assert read.submitted() == {job_id: loaded.digests[job_id] for job_id in loaded.ids[:2]}
    not_receipts: list[object] = [[], {"ids": "x1"}, {"ids": ["x1"], "invalid": [{"line": 1}]}]
    for not_a_receipt in not_receipts:
        with pytest.raises(ValueError):
            SubmitReceipt.from_json(not_a_receipt)
