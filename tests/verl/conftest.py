"""Shared fixtures of the verl adapter tests: the subprocess `arctic-rl serve --reference` of the wire
runs (tests/shared/wire_server.py), one for the whole suite."""

from __future__ import annotations

from wire_server import pytest_runtest_makereport, wire, wire_server

__all__ = ["pytest_runtest_makereport", "wire", "wire_server"]
