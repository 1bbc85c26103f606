"""Engine settings: validation, the mapping from the project config, and the in-process handle."""

from __future__ import annotations

import pytest
from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings, ScheduleSettings
from pydantic import ValidationError


def test_settings_are_validated():
    with pytest.raises(ValidationError, match=r"needs schedule\.total_steps"):
        ScheduleSettings(kind="cosine")
    with pytest.raises(ValidationError, match="warmup_steps=5 exceeds total_steps=3"):
        ScheduleSettings(kind="linear", warmup_steps=5, total_steps=3)
    with pytest.raises(ValidationError, match="each beta must be in"):
        ReferenceEngineSettings(optimizer={"betas": (0.9, 1.0)})
    with pytest.raises(ValidationError, match="extra"):
        ReferenceEngineSettings(dp=2)


def test_from_config_maps_every_engine_knob():
    from arctic_rl_core.config import load_config

    cfg = load_config(
        None,
        [
            "backend.kind=reference",
            "backend.reference.hidden_size=32",
            "placement.training_gpus=2",
            "placement.sampling_gpus=0",
            "batch.prompts_per_step=4",
            "batch.rollouts_per_prompt=4",
            "batch.micro_batch_size_per_gpu=2",
            "optimizer.lr=0.001",
            "optimizer.betas=[0.8,0.9]",
            "optimizer.eps=1e-6",
            "optimizer.weight_decay=0.05",
            "optimizer.grad_clip=0.5",
            "optimizer.scheduler=cosine",
            "optimizer.warmup_ratio=0.25",
            "optimizer.min_lr_ratio=0.1",
            "optimizer.total_training_steps=8",
            "determinism.seed=7",
        ],
    )
    settings = ReferenceEngineSettings.from_config(cfg)
    assert settings.model.hidden_size == 32
    assert settings.seed == 7
    assert (settings.dp_size, settings.grad_accum_steps) == (2, 4)  # 16 rows = 2 per GPU x 4 steps x 2 ranks
    assert settings.optimizer.model_dump() == {
        "lr": 0.001,
        "betas": (0.8, 0.9),
        "eps": 1e-6,
        "weight_decay": 0.05,
        "grad_clip": 0.5,
    }
    assert settings.schedule.model_dump() == {
        "kind": "cosine",
        "warmup_steps": 2,
        "total_steps": 8,
        "min_lr_ratio": 0.1,
    }
    assert settings.colocated is cfg.placement.colocate


def test_in_process_handle(engine_factory, ref):
    engine = engine_factory()
    handle = engine.handle()
    borrowed = handle.connect()
    out = ref.run(borrowed.generate(["hi"], SamplingParams(max_tokens=2, temperature=0.0)))
    assert (
        out.completions
        == ref.run(engine.generate(["hi"], SamplingParams(max_tokens=2, temperature=0.0))).completions
    )
    ref.run(borrowed.shutdown())  # detaches only
    assert ref.run(engine.state()).weights_version == 0
    with pytest.raises(RuntimeError, match="detached by shutdown"):
        ref.run(borrowed.state())
    handle.pid = -1
    with pytest.raises(RuntimeError, match="not reachable from another process"):
        handle.connect()
    ref.run(engine.shutdown())
    ref.run(engine.shutdown())  # idempotent
    with pytest.raises(RuntimeError, match="shut down"):
        ref.run(engine.state())


def test_light_modules_import_no_heavy_stack():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import arctic_rl_testbed.reference as r\n"
        "from arctic_rl_testbed.reference import http_server, ray_actor, validation, settings, loss\n"
        "from arctic_rl_testbed.reference import deepspeed_mapping, sleep_state\n"
        "assert r.ReferenceEngineSettings().num_threads == 1\n"
        "print(sorted(m for m in ('torch', 'transformers', 'ray', 'aiohttp', 'arctic_platform') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
