"""Shared fixtures of the SkyRL adapter tests: rows of the bundled BIRD sample in SkyRL's dataset
format (chat `prompt`, `env_class`, verl-style `reward_model` / `extra_info`, `data_source`); rows of
the `vowel_share` environment (tests/shared/learnable_reward.py: a graded reward the tiny model can
learn); the subprocess `arctic-rl serve --reference` of the wire runs (tests/shared/wire_server.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from learnable_reward import PROMPTS, vowel_share
from wire_server import pytest_runtest_makereport, wire, wire_server

__all__ = ["pytest_runtest_makereport", "wire", "wire_server"]

LEARNABLE_ENV_ID = "vowel_share"


def _register_learnable_env() -> None:
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
    from skyrl_gym.envs.registration import register, registry

    class VowelShareEnv(BaseTextEnv):
        """Single turn: the reward is the response's vowel share (tests/shared/learnable_reward.py)."""

        def __init__(self, env_config: Any = None, extras: Any = None):
            super().__init__()

        def step(self, action: str) -> BaseTextEnvStepOutput:
            return BaseTextEnvStepOutput(observations=[], reward=vowel_share(action), done=True, metadata={})

    if LEARNABLE_ENV_ID not in registry:
        register(id=LEARNABLE_ENV_ID, entry_point=VowelShareEnv)


def learnable_rows() -> list[dict[str, Any]]:
    _register_learnable_env()
    return [
        {
            "data_source": LEARNABLE_ENV_ID,
            "prompt": [{"role": "user", "content": prompt}],
            "env_class": LEARNABLE_ENV_ID,
            "reward_model": {"style": "rule", "ground_truth": None},
            "extra_info": {"index": i},
        }
        for i, prompt in enumerate(PROMPTS)
    ]


@pytest.fixture(scope="session")
def learnable_jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("learnable") / "vowels.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in learnable_rows()), encoding="utf-8")
    return path


def bird_rows(split: str = "train") -> list[dict[str, Any]]:
    """Every question of the bundled sample's `split`, as the core's parity scenario writes a row (short
    prompts keep the CPU runs fast; the reward path is what matters here)."""
    from arctic_rl_core.envs.bird.dataset import load_split
    from arctic_rl_core.envs.bird.sample import sample_dir
    from arctic_rl_testbed.parity.scenario import dataset_row

    data = load_split(sample_dir(), split)
    return [dataset_row(data, q) for q in data.questions]


@pytest.fixture(scope="session")
def bird_train_rows() -> list[dict[str, Any]]:
    return bird_rows("train")


@pytest.fixture
def bird_jsonl(tmp_path: Path, bird_train_rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "bird_train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in bird_train_rows), encoding="utf-8")
    return path
