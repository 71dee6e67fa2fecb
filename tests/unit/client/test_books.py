"""Books: long texts split into part jobs on sentence boundaries, and their audio joined back."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import pytest

from tts_fleet.client.books import (
    MAX_ID_CHARS,
    join_parts,
    part_ids,
    source_of,
    split_text,
)
from tts_fleet.client.inputs import load_jobs
from worker.jobs import ID_PATTERN

SENTENCE = "The quick brown fox jumps over the lazy dog. "


def test_pieces_rebuild_the_text_within_the_limit_and_end_at_sentences() -> None:
    text = SENTENCE * 500 + "\n\nA second chapter starts here. " + SENTENCE * 300
    pieces = split_text(text, 1_000)
    assert "".join(pieces) == text
    assert all(len(piece) <= 1_000 for piece in pieces)
    assert all(piece.rstrip().endswith(".") for piece in pieces)
    assert len(pieces) < len(text) / 900  # cut near the limit, not at every sentence


def test_cjk_sentences_are_cut_after_their_full_stop() -> None:
    text = "这是一个很长的句子，用来测试中文的分割。" * 200
    pieces = split_text(text, 300)
    assert "".join(pieces) == text
    assert all(len(p) <= 300 and p.endswith("。") for p in pieces)


def test_a_text_without_sentence_ends_is_cut_at_spaces_then_hard() -> None:
    words = "word " * 1_000
    assert all(p.endswith(" ") for p in split_text(words, 333)[:-1])
    solid = "x" * 1_000
    assert split_text(solid, 300) == ["x" * 300] * 3 + ["x" * 100]


def test_a_split_size_below_the_floor_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 100"):
        split_text("short", 10)


def test_part_ids_sort_in_order_and_stay_valid_job_ids() -> None:
    ids = part_ids("chapter-1", 12)
    assert ids[0] == "chapter-1.p001" and ids[-1] == "chapter-1.p012"
    assert ids == sorted(ids)
    long_ids = part_ids("b" * 200, 1_500)
    assert all(len(i) <= MAX_ID_CHARS for i in long_ids) and long_ids[-1].endswith(".p1500")
    assert source_of(long_ids[-1]) == ("b" * (MAX_ID_CHARS - 2 - 4), 1_500)
    import re

    assert all(re.match(ID_PATTERN, i) for i in ids + long_ids)


def test_a_long_txt_file_becomes_parts_with_the_file_name_as_base(tmp_path: Path) -> None:
    book = tmp_path / "book"
    book.mkdir()
    (book / "chapter-1.txt").write_text(SENTENCE * 1_000, encoding="utf-8")
    refused = load_jobs(book)
    assert not refused.valid and "--split-chars" in refused.invalid[0].reason
    loaded = load_jobs(book, split_chars=5_000)
    assert not loaded.invalid
    assert loaded.ids == [f"chapter-1.p{n:03d}" for n in range(1, len(loaded.ids) + 1)]
    assert "".join(job.text for job in loaded.valid) == SENTENCE * 1_000
    again = load_jobs(book, split_chars=5_000)
    assert again.ids == loaded.ids  # same input, same parts: a resubmit is no new work


def test_an_id_less_jsonl_job_gets_one_stable_base_for_its_parts(tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text(json.dumps({"text": SENTENCE * 100, "voice": "Ryan"}) + "\n")
    loaded = load_jobs(source, split_chars=1_000)
    bases = {source_of(job_id)[0] for job_id in loaded.ids}  # type: ignore[index]
    assert len(bases) == 1 and all(job.voice == "Ryan" for job in loaded.valid)


def _write_part(directory: Path, job_id: str, frames: int, rate: int = 24_000) -> None:
    with wave.open(str(directory / f"{job_id}.wav"), "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(rate)
        audio.writeframes(b"\x01\x00" * frames)
    manifest = {"id": job_id, "request": {"format": "wav"}, "duration_s": frames / rate}
    (directory / f"{job_id}.json").write_text(json.dumps(manifest))


def test_join_concatenates_complete_sources_and_names_missing_parts(tmp_path: Path) -> None:
    for index, frames in enumerate((24_000, 12_000, 6_000), start=1):
        _write_part(tmp_path, f"book.p{index:03d}", frames)
    _write_part(tmp_path, "other.p001", 100)  # other.p002 never finished
    report = join_parts(
        tmp_path, ["book.p001", "book.p002", "book.p003", "other.p001", "other.p002"]
    )
    assert report.joined == ["book"] and report.incomplete == {"other": [2]}
    with wave.open(str(tmp_path / "book.wav"), "rb") as joined:
        assert joined.getnframes() == 42_000 and joined.getframerate() == 24_000
    listing = json.loads((tmp_path / "book.json").read_text())
    assert listing["parts"] == ["book.p001", "book.p002", "book.p003"]
    assert listing["duration_s"] == 1.75
    assert not (tmp_path / "other.wav").exists()


def test_join_refuses_parts_of_different_sample_rates(tmp_path: Path) -> None:
    _write_part(tmp_path, "mix.p001", 100, rate=24_000)
    _write_part(tmp_path, "mix.p002", 100, rate=22_050)
    report = join_parts(tmp_path)
    assert report.joined == [] and "differs from the first part" in report.failed["mix"]
