"""Fixtures of the multi-turn tests: the subprocess `arctic-rl serve --reference` (tests/shared/wire_server.py)."""

from wire_server import pytest_runtest_makereport, wire, wire_server

__all__ = ["pytest_runtest_makereport", "wire", "wire_server"]
