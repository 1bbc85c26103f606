"""Shared fixtures of the verl adapter tests: the subprocess `arctic-rl serve --reference` of the wire
runs (tests/shared/wire_server.py), one for the whole suite; the tiny model (and its tokenizer) of the
in-process agent-loop tests (test_verl_tool_agent, test_verl_bird_agent_loop)."""

from __future__ import annotations

from pathlib import Path

import pytest
from verl_e2e_run import TINY_MODEL
from wire_server import pytest_runtest_makereport, tiny_model_dir, wire, wire_server

__all__ = ["pytest_runtest_makereport", "wire", "wire_server"]


@pytest.fixture(scope="session")
def agent_loop_model_dir(tmp_path_factory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("agent_loop_model") / "model", 42, **TINY_MODEL)


@pytest.fixture(scope="session")
def agent_loop_tokenizer(agent_loop_model_dir):
    from verl.utils import hf_tokenizer

    return hf_tokenizer(str(agent_loop_model_dir))
