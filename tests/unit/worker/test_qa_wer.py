"""worker/qa/wer.py: normalisation (case, punctuation, numbers, CJK characters) and the rate."""

from __future__ import annotations

import pytest

from worker.qa.wer import edit_distance, normalize, number_words, word_error_rate


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (0, "zero"),
        (13, "thirteen"),
        (40, "forty"),
        (42, "forty two"),
        (100, "one hundred"),
        (1984, "one thousand nine hundred eighty four"),
        (3500, "three thousand five hundred"),
        (2_000_001, "two million one"),
    ],
)
def test_number_words(value: int, words: str) -> None:
    assert number_words(value) == words


def test_case_punctuation_and_apostrophes_do_not_count() -> None:
    assert normalize("Don't STOP—now!  “Quoted”, (aside).") == [
        "dont",
        "stop",
        "now",
        "quoted",
        "aside",
    ]
    assert word_error_rate("Hello, world!", "hello world") == 0.0


def test_numbers_compare_as_words_whichever_way_they_are_written() -> None:
    assert word_error_rate("She counted 1,250 steps.", "she counted 1250 steps") == 0.0
    assert (
        word_error_rate(
            "In 1984 it cost 12.50.",
            "in one thousand nine hundred eighty four it cost twelve point five zero",
        )
        == 0.0
    )
    assert word_error_rate("Page 42.", "page 43") == pytest.approx(1 / 3)  # "two" for "three"


def test_numbers_are_left_as_digits_in_a_named_other_language() -> None:
    assert normalize("Seite 42", "German") == ["seite", "42"]


def test_cjk_is_compared_character_by_character() -> None:
    assert normalize("今天天气很好。") == ["今", "天", "天", "气", "很", "好"]
    assert word_error_rate("今天天气很好。", "今天天汽很好") == pytest.approx(1 / 6)
    assert normalize("안녕 하세요") == ["안", "녕", "하", "세", "요"]
    # Latin words inside CJK text stay words
    assert normalize("我用iPhone拍照") == ["我", "用", "iphone", "拍", "照"]


def test_a_dropped_sentence_raises_the_rate_by_its_share() -> None:
    text = "The first sentence is here. The second one follows it. The third ends the piece."
    heard = "The first sentence is here. The third ends the piece."
    assert word_error_rate(text, heard) == pytest.approx(5 / 15)


def test_garble_is_a_high_rate() -> None:
    assert word_error_rate("The cat sat on the mat.", "blah gah dee boo") > 0.9


def test_edge_cases() -> None:
    assert edit_distance([], ["a"]) == 1
    assert edit_distance(["a", "b"], ["b", "a"]) == 2
    assert word_error_rate("", "") == 0.0
    assert word_error_rate("...", "something") == 1.0
    assert word_error_rate("one two", "") == 1.0


def test_the_common_head_and_tail_do_not_change_the_distance() -> None:
    # The shortcut against the full table: same answers on overlapping edits.
    cases = [
        (list("abcab"), list("ab")),
        (list("aaaa"), list("aa")),
        (list("abcdef"), list("abXdef")),
        (list("xyz"), list("xyzxyz")),
        (list("ab"), list("ba")),
    ]
    for reference, hypothesis in cases:
        assert edit_distance(reference, hypothesis) == full_table(reference, hypothesis)


def full_table(reference: list[str], hypothesis: list[str]) -> int:
    rows = [[i + j if i * j == 0 else 0 for j in range(len(hypothesis) + 1)]
            for i in range(len(reference) + 1)]  # fmt: skip
    for i in range(1, len(reference) + 1):
        for j in range(1, len(hypothesis) + 1):
            same = reference[i - 1] == hypothesis[j - 1]
            rows[i][j] = min(
                rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + (not same)
            )
    return rows[-1][-1]
