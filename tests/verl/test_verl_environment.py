"""The verl CPU environment holds stock verl 0.9.1 and its V1 trainer, no vLLM and no SkyRL; DeepSpeed only as its CPU build."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib.metadata import version


def test_stock_verl_v1_trainer_base_imports_on_cpu():
    import verl.trainer.ppo.v1.trainer_base as trainer_base

    assert version("verl") == "0.9.1"
    assert callable(trainer_base.register_trainer)


def test_environment_is_isolated_from_skyrl_and_gpu_stacks():
    for module in ("skyrl", "vllm", "arctic_inference", "flash_attn"):
        assert importlib.util.find_spec(module) is None, f"{module} must not be in the verl CPU env"
    for module in ("transfer_queue", "uvicorn", "fastapi", "cachetools"):
        assert importlib.util.find_spec(module) is not None, f"verl's V1 trainer imports {module}"


def test_deepspeed_is_the_cpu_build_with_no_compiled_op():
    """DeepSpeed is here for the reference backend's `deepspeed` trainer (arctic-platform 0.1.4's own
    DeepSpeedWorker on CPU), built from its sdist with no CUDA op compiled."""
    import os

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.git_version_info import installed_ops

    assert installed_ops, "DeepSpeed reports no op table"
    assert not any(installed_ops.values()), {op: built for op, built in installed_ops.items() if built}


def test_doctor_sees_verl_and_names_the_extra_for_skyrl():
    out = subprocess.run(
        [sys.executable, "-m", "arctic_rl_core.cli.main", "doctor"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    ).stdout
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") >= 4}
    assert "0.9.1" in rows["verl"]
    assert "adapter-skyrl[cpu]" in rows["skyrl"]
