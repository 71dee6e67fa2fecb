"""worker/text.py: the one splitter (books and speech pieces) and the one error reader."""

from __future__ import annotations

import httpx
import pytest

from worker.speech import text_cost
from worker.text import ERROR_MESSAGE_CHARS, error_message, halve, split_text


def test_pieces_concatenate_back_to_the_text_and_keep_to_the_budget() -> None:
    text = "First paragraph, one sentence.\n\nSecond: it goes on. And on! Does it? " * 40
    for limit in (50, 137, 1_000):
        pieces = split_text(text, limit)
        assert "".join(pieces) == text
        assert all(len(piece) <= limit for piece in pieces)


def test_a_paragraph_end_is_preferred_to_a_later_sentence_end() -> None:
    text = "A" * 50 + ".\n\n" + "B" * 30 + ". " + "C" * 40 + "."
    assert split_text(text, 100)[0] == "A" * 50 + ".\n\n"


def test_a_sliver_is_not_cut_when_a_word_break_later_exists() -> None:
    # The only sentence end is at 3 characters of a 60 budget: a word break near the end wins.
    text = "Hi. " + "word " * 30
    first = split_text(text, 60)[0]
    assert len(first) > 20 and first.endswith(" ")


def test_a_full_stop_inside_a_number_is_no_sentence_end() -> None:
    text = "Pi is 3.14159 and e is 2.71828 today"
    assert split_text(text, 18) == ["Pi is 3.14159 and ", "e is 2.71828 today"]


def test_a_cost_function_sets_the_budget_and_a_piece_is_at_least_a_character() -> None:
    assert split_text("一二三四五六", 8, text_cost) == ["一二", "三四", "五六"]
    assert split_text("一二", 1, text_cost) == ["一", "二"]


def test_halve_cuts_at_the_sentence_nearest_the_middle_else_a_word_else_a_character() -> None:
    assert halve("One. Two. Three. Four.") == ["One. Two. ", "Three. Four."]
    assert halve("alpha beta gamma delta") == ["alpha beta ", "gamma delta"]
    assert halve("abcdef") == ["abc", "def"]
    assert halve("x") == ["x"]


def answer(status: int, content: bytes, content_type: str = "application/json") -> httpx.Response:
    return httpx.Response(status, content=content, headers={"content-type": content_type})


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'{"error": {"message": "bad voice", "code": 400}}', "bad voice"),  # vLLM
        (b'{"message": "no such model"}', "no such model"),
        (b'{"detail": "Not Found"}', "Not Found"),  # FastAPI
        (b'{"detail": [{"loc": ["body"], "msg": "x"}]}', "[{'loc': ['body'], 'msg': 'x'}]"),
        (b'["a list"]', "['a list']"),
        (b"<html>\n  Bad   Gateway\n</html>", "<html> Bad Gateway </html>"),
        (b"", "(no body)"),
    ],
)
def test_error_message_reads_each_servers_shape_as_one_line(content: bytes, said: str) -> None:
    assert error_message(answer(400, content)) == said


def test_error_message_is_bounded() -> None:
    long = b'{"error": {"message": "' + b"x" * 5_000 + b'"}}'
    assert error_message(answer(500, long)) == "x" * ERROR_MESSAGE_CHARS
