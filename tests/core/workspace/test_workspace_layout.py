"""The workspace's shape and isolation rules (issue: workspace foundation)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ADAPTERS = ("adapter-skyrl", "adapter-verl")


def _pyproject(path: Path) -> dict:
    return tomllib.loads((path / "pyproject.toml").read_text())


def _tracked_top_level() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {line.split("/")[0] for line in out.splitlines() if line}


def test_top_level_entries_are_exactly_the_documented_ones():
    entries = {name for name in _tracked_top_level() if not name.startswith(".")}
    assert entries == {"packages", "recipes", "docs", "tests", "pyproject.toml", "uv.lock", "README.md"}
    assert (ROOT / ".python-version").read_text().strip() == "3.12"


def test_every_package_is_a_src_layout_package_for_python_312():
    expected = {
        "arctic-rl-core": "arctic_rl_core",
        "arctic-rl-losses": "arctic_rl_losses",
        "arctic-rl-testbed": "arctic_rl_testbed",
        "adapter-skyrl": "adapter_skyrl",
        "adapter-verl": "adapter_verl",
    }
    for dist, module in expected.items():
        pkg = ROOT / "packages" / dist
        project = _pyproject(pkg)
        assert project["project"]["name"] == dist
        assert project["project"]["requires-python"] == ">=3.12,<3.13"
        assert project["build-system"]["build-backend"] == "hatchling.build"
        assert (pkg / "src" / module / "__init__.py").is_file()
    assert _pyproject(ROOT)["project"]["requires-python"] == ">=3.12,<3.13"


def test_adapter_extras_are_declared_mutually_conflicting():
    conflicts = _pyproject(ROOT)["tool"]["uv"]["conflicts"]
    declared = {(c.get("package"), c["extra"]) for group in conflicts for c in group}
    for adapter in ADAPTERS:
        assert (adapter, "cpu") in declared and (adapter, "gpu") in declared
    assert (None, "core") in declared


def _requirement_names(requirements: list[str]) -> dict[str, str]:
    names = {}
    for req in requirements:
        name = req.split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip()
        names[name] = req
    return names


def test_gpu_extras_pin_the_one_vllm_arctic_inference_patches():
    for adapter in ADAPTERS:
        extras = _pyproject(ROOT / "packages" / adapter)["project"]["optional-dependencies"]
        gpu = _requirement_names(extras["gpu"])
        assert gpu["vllm"] == "vllm==0.26.0"
        assert gpu["arctic-inference"] == "arctic-inference==0.3.0"
        assert gpu["arctic-platform"] == "arctic-platform[rl]==0.1.4"
        assert {"deepspeed", "liger-kernel", "torch"} <= gpu.keys()
        # flash-attn compiles from its sdist for hours: opt-in (`--extra flash`), not in the GPU environment
        assert "flash-attn" not in gpu and _requirement_names(extras["flash"]) == {
            "flash-attn": "flash-attn==2.8.3.post2"
        }
        cpu = _requirement_names(extras["cpu"])
        assert not {"vllm", "arctic-inference", "deepspeed", "flash-attn"} & cpu.keys()
        assert "torch" in cpu


def test_cpu_extras_carry_the_stock_frameworks_without_cuda_extras():
    skyrl = _requirement_names(
        _pyproject(ROOT / "packages/adapter-skyrl")["project"]["optional-dependencies"]["cpu"]
    )
    assert skyrl["skyrl"] == "skyrl==0.4.0"  # no [skyrl-train]/[fsdp]: they need CUDA-built flash-attn
    assert "cloudpickle" in skyrl  # without it SkyRL falls back to pickle and fails to ship its loss registry
    verl = _requirement_names(
        _pyproject(ROOT / "packages/adapter-verl")["project"]["optional-dependencies"]["cpu"]
    )
    assert verl["verl"] == "verl==0.9.1"
    assert {"transferqueue", "uvicorn", "fastapi", "cachetools"} <= verl.keys()


def test_lock_resolves_vllm_0_26_0_and_one_torch_for_both_gpu_extras():
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    versions: dict[str, set[str]] = {}
    for package in lock["package"]:
        versions.setdefault(package["name"], set()).add(package.get("version", ""))
    assert versions["vllm"] == {"0.26.0"}
    assert versions["arctic-platform"] == {"0.1.4"}
    assert versions["arctic-inference"] == {"0.3.0"}
    assert versions["skyrl"] == {"0.4.0"} and versions["verl"] == {"0.9.1"}
    assert versions["torch"] == {"2.11.0"}
    # The two frameworks need different tokenizers: the lock forks instead of compromising.
    assert len(versions["tokenizers"]) >= 2
