"""The SkyRL CPU environment holds stock SkyRL 0.4.0, no vLLM and no verl; DeepSpeed only as its CPU build."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib.metadata import version

from packaging.version import Version


def test_stock_skyrl_trainer_imports_on_cpu():
    import skyrl.train.trainer as trainer

    assert version("skyrl") == "0.4.0"
    assert hasattr(trainer, "RayPPOTrainer")


def test_environment_is_isolated_from_verl_and_gpu_stacks():
    for module in ("verl", "vllm", "arctic_inference", "flash_attn"):
        assert importlib.util.find_spec(module) is None, f"{module} must not be in the SkyRL CPU env"
    assert Version(version("tokenizers")) >= Version("0.23.1")  # SkyRL 0.4.0 needs it; verl caps it lower


def test_deepspeed_is_the_cpu_build_with_no_compiled_op():
    """DeepSpeed is here for the reference backend's `deepspeed` trainer (arctic-platform 0.1.4's own
    DeepSpeedWorker on CPU), built from its sdist with no CUDA op compiled."""
    import os

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.git_version_info import installed_ops

    assert installed_ops, "DeepSpeed reports no op table"
    assert not any(installed_ops.values()), {op: built for op, built in installed_ops.items() if built}


def test_doctor_sees_skyrl_and_names_the_extra_for_verl():
    out = subprocess.run(
        [sys.executable, "-m", "arctic_rl_core.cli.main", "doctor"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    ).stdout
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") >= 4}
    assert "0.4.0" in rows["skyrl"]
    assert "adapter-verl[cpu]" in rows["verl"]
