"""The pronunciation lexicon: whole words, case rules, longest first, bad lines by number."""

from __future__ import annotations

from pathlib import Path

import pytest

from tts_fleet.client.lexicon import LexiconError, load_lexicon, parse_lexicon


def test_whole_words_only() -> None:
    lexicon = parse_lexicon("Dr\tDoctor\ncat\tfeline\n")
    assert lexicon.apply("Dr. Drake's cat, a catalogue cat_1 and (cat)") == (
        "Doctor. Drake's feline, a catalogue cat_1 and (feline)"
    )


def test_an_upper_case_term_is_case_sensitive_a_lower_case_one_is_not() -> None:
    lexicon = parse_lexicon("Nice\tNeece\nqwen\tchwen\n")
    assert lexicon.apply("Nice is nice; QWEN, Qwen, qwen") == "Neece is nice; chwen, chwen, chwen"


def test_the_longest_term_wins_and_a_replacement_is_not_replaced_again() -> None:
    lexicon = parse_lexicon("New York\tNoo Yawk\nNew York City\tthe Big Apple\nYawk\tno\n")
    assert lexicon.apply("New York City, New York.") == "the Big Apple, Noo Yawk."


def test_a_case_sensitive_term_beats_a_case_insensitive_one_of_its_length() -> None:
    lexicon = parse_lexicon("nice\tpleasant\nNice\tNeece\n")
    assert lexicon.apply("Nice, nice, NICE") == "Neece, pleasant, pleasant"


def test_terms_with_punctuation_and_non_latin_letters() -> None:
    lexicon = parse_lexicon("C++\tC plus plus\nÉmile\tAy-meel\n")
    assert lexicon.apply("C++ and Émile, not Émiles") == "C plus plus and Ay-meel, not Émiles"


def test_comments_and_blank_lines_are_ignored_and_an_empty_lexicon_changes_nothing() -> None:
    lexicon = parse_lexicon("# names\n\n   \n  # indented comment\nAda\tAy-da\n")
    assert [entry.line for entry in lexicon.entries] == [5]
    assert parse_lexicon("# nothing\n").apply("Ada") == "Ada"


def test_every_bad_line_is_reported_with_its_number() -> None:
    text = "ok\tfine\nno tab here\n\tempty term\nterm\t\na\tb\tc\nOK\tcase differs\nok\tagain\n"
    with pytest.raises(LexiconError) as error:
        parse_lexicon(text, "lex.tsv")
    assert error.value.problems == [
        "lex.tsv:2: expected term<TAB>replacement, got 1 field(s)",
        "lex.tsv:3: the term is empty",
        "lex.tsv:4: the replacement is empty",
        "lex.tsv:5: expected term<TAB>replacement, got 3 field(s)",
        "lex.tsv:7: 'ok' is already given on line 1",
    ]


def test_a_file_that_is_not_utf8_or_missing_is_one_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(b"caf\xe9\tcafe\n")
    with pytest.raises(LexiconError, match="not UTF-8"):
        load_lexicon(bad)
    with pytest.raises(LexiconError, match="No such file"):
        load_lexicon(tmp_path / "missing.tsv")
    good = tmp_path / "good.tsv"
    good.write_text("\ufeffAda\tAy-da\r\n", encoding="utf-8")  # a BOM and CRLF, as Excel saves
    assert load_lexicon(good).apply("Ada") == "Ay-da"
