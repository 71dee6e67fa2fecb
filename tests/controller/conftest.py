"""The `stack` fixture: the controller function's mocked account (moto_stack.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.controller.moto_stack import Stack, moto_stack


@pytest.fixture
def stack(in_process_aws: None) -> Iterator[Stack]:
    with moto_stack() as made:
        yield made
