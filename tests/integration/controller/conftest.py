"""The controller tests' `stack`, here rather than in tests/conftest.py because the client
tests have a `stack` of their own."""

from tests.lib.fixtures.controller import stack

__all__ = ["stack"]
