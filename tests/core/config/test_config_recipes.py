"""Every config file shipped under recipes/ parses; those in a `configs/` folder are ArcticRLConfigs
and must validate."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from arctic_rl_core.config import load_config
from arctic_rl_core.config.sources import parse_yaml

RECIPES = Path(__file__).resolve().parents[3] / "recipes"
FILES = sorted(
    p for p in RECIPES.rglob("*") if p.suffix.lower() in (".yaml", ".yml", ".toml") and p.is_file()
)
ARCTIC_CONFIGS = [p for p in FILES if "configs" in p.relative_to(RECIPES).parts[:-1]]
REQUIRED = {
    "gsm8k-qwen3-0.6b-4gpu.yaml",
    "colocated-8gpu-cuda-ipc.yaml",
    "bird-qwen3-32b-32gpu.yaml",
    "cortex.yaml",
    "reference-cpu.yaml",
}


def _id(path: Path) -> str:
    return str(path.relative_to(RECIPES))


def test_the_scenario_configs_are_shipped() -> None:
    assert {p.name for p in ARCTIC_CONFIGS} >= REQUIRED


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_every_recipe_config_file_parses(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    data = tomllib.loads(text) if path.suffix.lower() == ".toml" else parse_yaml(text)
    assert isinstance(data, dict) and data, f"{path} holds no mapping"


@pytest.mark.parametrize("path", ARCTIC_CONFIGS, ids=_id)
def test_every_arctic_config_validates_and_plans(path: Path) -> None:
    cfg = load_config(path)
    plan = cfg.plan()
    assert plan["backend"] == cfg.backend.kind
    shape = plan["shape"]
    assert shape["train_batch_size"] == (
        shape["micro_batch_size_per_gpu"] * shape["gradient_accumulation_steps"] * shape["data_parallel_size"]
    )


def test_reference_cpu_is_the_laptop_default() -> None:
    cfg = load_config(RECIPES / "configs" / "reference-cpu.yaml")
    assert cfg.backend.kind == "reference" and cfg.backend.reference.device == "cpu"
    assert cfg.backend.reference.model_path is None  # built in-process, nothing downloaded
