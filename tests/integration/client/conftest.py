"""The client tests' fixtures, here rather than in tests/conftest.py because the controller
tests have a `stack` of their own."""

from tests.lib.fixtures.client import count_calls, stack

__all__ = ["count_calls", "stack"]
