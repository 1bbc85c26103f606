"""Shared fixtures of the environment tests: the bundled BIRD sample, built once per session."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from arctic_rl_core.envs.bird.sample import sample_dir


@pytest.fixture(scope="session")
def bird_sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sample_dir(tmp_path_factory.mktemp("arctic-rl-cache"))


@pytest.fixture(scope="session")
def dev_db(bird_sample: Path) -> Path:
    return bird_sample / "dev" / "dev_databases" / "movie_club" / "movie_club.sqlite"


def _make_db(path: Path, statements: list[str]) -> Path:
    """A small SQLite file built from DDL/DML statements."""
    connection = sqlite3.connect(path)
    try:
        for statement in statements:
            connection.execute(statement)
        connection.commit()
    finally:
        connection.close()
    return path


@pytest.fixture
def make_db() -> Callable[[Path, list[str]], Path]:
    """make_db(path, statements): a SQLite file built from DDL/DML statements."""
    return _make_db


@pytest.fixture
def values_db(tmp_path: Path) -> Path:
    """t(a INTEGER, b TEXT, r REAL) with duplicates, for result-semantics cases."""
    return _make_db(
        tmp_path / "values.sqlite",
        [
            "CREATE TABLE t (a INTEGER, b TEXT, r REAL)",
            "INSERT INTO t VALUES (1, 'x', 1.0), (2, 'y', 2.5), (2, 'y', 2.5), (3, NULL, NULL)",
        ],
    )
