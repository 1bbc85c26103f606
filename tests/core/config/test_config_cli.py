"""`arctic-rl config show / validate / reference`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from arctic_rl_core.cli.main import main

CONFIGS = Path(__file__).resolve().parents[3] / "recipes" / "configs"
FAKE_TOKEN = "pat-cli-test-secret-42"


def test_show_prints_config_and_plan_as_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["config", "show", str(CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml"), "batch.epochs=2"])
    assert code == 0
    document = yaml.safe_load(capsys.readouterr().out)
    assert document["config"]["batch"]["epochs"] == 2
    assert document["plan"]["shape"]["optimizer_steps_per_step"] == 4  # 2 mini-batches x 2 epochs
    assert document["plan"]["jobs"]["training"]["ds_config"]["train_batch_size"] == 256


def test_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", str(CONFIGS / "bird-qwen3-32b-32gpu.yaml"), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["plan"]["env"]["sampling_workers"] == {"ARCTIC_INFERENCE_ENABLED": "1"}
    assert document["plan"]["vllm"]["injected"][0] == "compilation_config.cudagraph_mode"


def test_show_never_prints_the_cortex_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARCTIC_CORTEX_PAT", FAKE_TOKEN)
    assert main(["config", "show", str(CONFIGS / "cortex.yaml")]) == 0
    out = capsys.readouterr().out
    assert FAKE_TOKEN not in out
    document = yaml.safe_load(out)
    assert document["plan"]["client"]["backend"]["pat_from_env"] == "ARCTIC_CORTEX_PAT"
    assert document["plan"]["cortex_sub_jobs"] == ["sampling", "training"]


def test_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", str(CONFIGS / "colocated-8gpu-cuda-ipc.yaml")]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "train_batch_size 256 = micro 8 x grad-accum 4 x data-parallel 8" in out


def test_validate_lists_every_error_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "config",
            "validate",
            str(CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml"),
            "weight_sync.cuda_ipc=true",
            "deepspeed.zero_stage=1",
            "deepspeed.offload_param=true",
            "batch.epoch=2",
        ]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("3 problems in the configuration in ")
    for needle in (
        "batch.epoch = 2: unknown key",
        "weight_sync.cuda_ipc = true",
        "deepspeed.offload_param = true",
    ):
        assert needle in err
    # With the unknown key removed, the cross-field problems are still all listed.
    code = main(["config", "validate", str(CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml"), "deepspeed.zero_stage=0"])
    assert code == 1 and "deepspeed.zero_stage = 0" in capsys.readouterr().err


def test_show_fails_on_an_invalid_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", str(CONFIGS / "reference-cpu.yaml"), "backend.kind=ray"]) == 1
    err = capsys.readouterr().err
    assert "model.name" in err and "checkpoint.path" not in err and "backend.reference" in err


def test_reference_prints_the_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    from arctic_rl_core.config.reference_doc import render_reference

    assert main(["config", "reference"]) == 0
    assert capsys.readouterr().out == render_reference()
