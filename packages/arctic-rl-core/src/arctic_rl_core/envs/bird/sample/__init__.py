"""The bundled BIRD-format sample: three small SQLite databases and 26 questions.

The repository ships the source data (`data/*.json`, written for this project) and a
deterministic builder (`builder.py`), not binary SQLite files. `sample_dir()` builds the sample
on first use into a cache directory named after a hash of the source data, the builder and the
SQLite version, so a changed sample is rebuilt and an unchanged one is built once.

Cache root: the `cache_dir` argument, else `$ARCTIC_RL_CACHE_DIR`, else `~/.cache/arctic-rl`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from arctic_rl_core.envs.bird.sample.builder import build_sample, source_files

__all__ = ["build_sample", "sample_dir", "sample_key"]

_MARKER = "SAMPLE_KEY"


def sample_key() -> str:
    """A short hash of everything that determines the sample's bytes."""
    digest = hashlib.sha256(sqlite3.sqlite_version.encode())
    for path in source_files():
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _cache_root(cache_dir: str | Path | None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    configured = os.environ.get("ARCTIC_RL_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "arctic-rl"


def sample_dir(cache_dir: str | Path | None = None) -> Path:
    """The directory of the built sample (official BIRD layout), building it if needed."""
    key = sample_key()
    root = _cache_root(cache_dir)
    target = root / f"bird-sample-{key}"
    if (target / _MARKER).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".bird-sample-", dir=root))
    try:
        build_sample(staging / "sample")
        (staging / "sample" / _MARKER).write_text(key + "\n", encoding="utf-8")
        if target.exists() and not (target / _MARKER).is_file():
            # A half-built directory from an interrupted run (no marker): replace it.
            shutil.rmtree(target)
        try:
            os.rename(staging / "sample", target)
        except OSError:
            # Another process finished first; its copy is identical.
            if not (target / _MARKER).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
