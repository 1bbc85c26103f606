"""`arctic_rl_core.config.model_type`: a model's type without a download (local config, hub cache, name)."""

from __future__ import annotations

import json

import pytest
from arctic_rl_core.config.model_type import model_type_of


def test_a_local_folder_config_wins_over_the_name(tmp_path):
    folder = tmp_path / "Qwen3-8B-but-not-really"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    found = model_type_of(str(folder))
    assert (found.model_type, found.has_vision) == ("llama", False)
    assert found.source == f"config.json at {folder}"


def test_the_hub_cache_is_read_without_a_download(tmp_path, monkeypatch):
    snapshot = tmp_path / "models--Org--Some-Model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    found = model_type_of("Org/Some-Model")
    assert (found.model_type, found.has_vision, found.source) == (
        "qwen2_5_vl",
        True,
        f"config.json at {snapshot}",
    )


@pytest.mark.parametrize(
    ("name", "model_type", "vision"),
    [
        ("Qwen/Qwen3-8B", "qwen3", False),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3_moe", False),
        ("$HOME/verl/models/Qwen3.5-35B-A3B", "qwen3_5_moe", False),
        ("Qwen/Qwen3-Next-80B-A3B-Instruct", "qwen3_next", False),
        ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2_5_vl", True),
        ("/models/Qwen3-VL-8B-Instruct", "qwen3_vl", True),
        ("zai-org/GLM-4.1V-9B-Thinking", "glm4v", True),
        ("Qwen/Qwen2.5-Math-7B", "qwen2", False),
        ("openai/gpt-oss-20b", "gpt_oss", False),
    ],
)
def test_the_name_of_a_launchers_model(name, model_type, vision, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    found = model_type_of(name)
    assert (found.model_type, found.has_vision, found.source) == (model_type, vision, "the name")


def test_an_unknown_name_tells_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert model_type_of("/models/my-policy") is None and model_type_of(None) is None
