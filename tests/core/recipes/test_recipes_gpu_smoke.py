"""recipes/gpu-smoke.sh and its driver recipes/gpu_smoke.py, checked without a GPU: the script's
commands (dry run), the driver's configs through the real translation and client config, and the
driver's every phase and check run for real on the CPU reference backend."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "recipes" / "gpu-smoke.sh"


def _driver():
    spec = importlib.util.spec_from_file_location("gpu_smoke", REPO / "recipes" / "gpu_smoke.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_smoke"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def _dry_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "RECIPE_DRY_RUN": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_script_parses_and_its_dry_run_lists_both_placements_and_the_ray_transport():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], timeout=30).returncode == 0
    done = _dry_run()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    commands = [line for line in lines if "gpu_smoke.py" in line]
    assert [c.split("--placement ")[1].split()[0] for c in commands] == ["colocated", "separate", "separate"]
    assert all(
        c.startswith("timeout 420 uv run --locked --package adapter-skyrl --extra gpu python")
        for c in commands
    )
    # the third run: the separate placement over the in-process Ray transport, in its own scratch
    assert ["--transport ray" in c for c in commands] == [False, False, True]
    assert len({c.split("--workdir ")[1].split()[0] for c in commands}) == 3
    # one GPU (the dry run's assumption): separate gets two Ray GPU slots and no NCCL sync
    heads = [line for line in lines if " ray start --head --block" in line]
    assert [h.split("--num-gpus=")[1].strip() for h in heads] == ["1", "2", "2"]
    assert ["--skip-sync" in c for c in commands] == [False, True, True]
    assert lines[-1] == "gpu-smoke: dry run, nothing ran"
    assert [
        c.split("--placement ")[1].split()[0] for c in _dry_run("ray").stdout.splitlines() if "gpu_smoke" in c
    ] == ["separate"]
    bad = _dry_run("sideways")
    assert bad.returncode == 2 and "unknown run 'sideways'" in bad.stderr


@pytest.mark.parametrize("placement", ["colocated", "separate"])
def test_driver_configs_translate_for_the_arctic_backend(placement, tmp_path):
    pytest.importorskip("arctic_platform.client")
    from arctic_rl_core.wire import PayloadSpec

    driver = _driver()
    args = argparse.Namespace(
        backend="arctic", model="Qwen/Qwen3-0.6B", port=8765, rollouts=2, max_tokens=32,
        request_timeout=300.0, job_timeout=420.0, workdir=str(tmp_path), transport="http", attention="sdpa",
    )  # fmt: skip
    cfg = driver.smoke_config(args, placement)
    client = cfg.to_client_config()
    # no flash-attn in the GPU environment: sdpa, ZoRRo off, rows sent unpacked, fp32 log-probs
    assert cfg.kernels.attn_implementation == "sdpa" and not cfg.zorro.enable
    assert PayloadSpec.from_config(cfg, pad_token_id=0).rows_unpacked and cfg.zorro.logits_compute_in_fp32
    ray = driver.smoke_config(argparse.Namespace(**{**vars(args), "transport": "ray"}), placement)
    assert ray.to_client_config().backend.protocol == "ray"
    assert client.backend.launch_local_server and client.backend.colocate is (placement == "colocated")
    assert client.training.cuda_ipc is (placement == "colocated")
    plan = cfg.plan()
    assert plan["env"]["workers"]["ARCTIC_INFERENCE_ENABLED"] == "1"
    assert plan["jobs"]["sampling"]["arctic_inference_config"] is not None
    assert cfg.checkpoint.export_hf and cfg.checkpoint.save_total_limit == 1


def test_driver_runs_every_phase_on_the_reference_backend(tmp_path):
    driver = _driver()
    summary = tmp_path / "summary.json"
    argv = ["--backend", "reference", "--placement", "colocated", "--max-tokens", "8"]
    rc = driver.main([*argv, "--workdir", str(tmp_path), "--summary", str(summary)])
    (report,) = json.loads(summary.read_text())
    failed = [c for c in report["checks"] if not c[2]]
    assert rc == 0 and not failed, failed
    phases = {c[0] for c in report["checks"]}
    assert {"start", "env", "generate", "forward", "train", "sync", "save"} <= phases
    assert set(report["times"]) >= {"start", "generate", "forward", "train", "sync", "save", "shutdown"}


def test_overlap_tells_a_step_that_blocks_the_loop_from_one_that_does_not():
    """`overlap` (the Ray phase's check): probes issued while the step runs answer before it returns,
    unless the step blocks the event loop (0.1.4's Ray server without the compat layer)."""
    import asyncio
    import threading
    import time

    driver = _driver()

    async def scenario(blocking: bool):
        release = threading.Event()

        async def step():
            if blocking:
                time.sleep(0.2)  # as `ray.get` inside `async def`
            else:
                await asyncio.to_thread(release.wait, 30)

        async def probe():
            release.set()

        return await driver.overlap(step, [("generate", probe), ("health", probe)])

    _, answered = asyncio.run(scenario(blocking=False))
    assert {name: during for name, (_, during) in answered.items()} == {"generate": True, "health": True}
    _, answered = asyncio.run(scenario(blocking=True))
    assert {name: during for name, (_, during) in answered.items()} == {"generate": False, "health": False}
