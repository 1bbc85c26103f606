"""Shared fixtures of the SkyRL adapter tests: rows of the bundled BIRD sample in SkyRL's dataset
format (chat `prompt`, `env_class`, verl-style `reward_model` / `extra_info`, `data_source`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def bird_rows(split: str = "train") -> list[dict[str, Any]]:
    from arctic_rl_core.envs.bird.dataset import load_split
    from arctic_rl_core.envs.bird.sample import sample_dir

    data = load_split(sample_dir(), split)
    rows = []
    for q in data.questions:
        rows.append(
            {
                "data_source": "bird",
                # Short prompts keep the CPU test fast; the reward path is what matters here.
                "prompt": [{"role": "user", "content": f"{q.question} ({q.evidence})"}],
                "env_class": "bird",
                "reward_model": {"style": "rule", "ground_truth": q.sql},
                "extra_info": {
                    "db_id": q.db_id,
                    "db_path": str(data.databases[q.db_id].db_path),
                    "index": q.index,
                },
            }
        )
    return rows


@pytest.fixture(scope="session")
def bird_train_rows() -> list[dict[str, Any]]:
    return bird_rows("train")


@pytest.fixture
def bird_jsonl(tmp_path: Path, bird_train_rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "bird_train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in bird_train_rows), encoding="utf-8")
    return path
