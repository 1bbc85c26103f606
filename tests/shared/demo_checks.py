"""What every framework's demo run must leave behind, checked the same way for SkyRL and verl
(`tests/skyrl/test_demo_skyrl.py`, `tests/verl/test_demo_verl.py`). On pytest's path through the
`pythonpath` setting of the root pyproject."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path
from typing import Any

import yaml
from arctic_rl_testbed.demo import run as demo_run
from arctic_rl_testbed.demo.options import DemoModel, DemoOptions
from arctic_rl_testbed.demo.run_log import MetricsLog

TINY = DemoModel(
    num_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1
)


def tiny_options(framework: str, run_dir: Path, **overrides: Any) -> DemoOptions:
    """Two GRPO steps of the tiniest model, 2 prompts x 2 rollouts, after 2 supervised steps."""
    settings: dict[str, Any] = {
        "framework": framework,
        "out": str(run_dir),
        "steps": 2,
        "model": TINY,
        "warm_start_steps": 2,
        "warm_start_batch": 4,
        "prompts_per_step": 2,
        "rollouts_per_prompt": 2,
        "entropy_loss_coef": 0.01,  # a gradient even when every reward ties: the weights move every step
        "eval_samples": 2,
        "num_threads": 1,
    }
    return DemoOptions(**{**settings, **overrides})


def run_interrupted_then_resumed(options: DemoOptions) -> tuple[int, dict[str, Any], int]:
    """The demo, Ctrl-C (a real SIGINT to this process) right after step 1 is logged, then
    `--resume`; returns the two exit codes and what the run directory held in between."""
    run_dir = options.run_dir
    original_append = MetricsLog.append

    def ctrl_c_after_step_1(self, kind, **fields):
        record = original_append(self, kind, **fields)
        if kind == "grpo_step" and fields["step"] == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return record

    MetricsLog.append = ctrl_c_after_step_1
    # Ctrl-C at a terminal raises KeyboardInterrupt; a shell starts background jobs with SIGINT
    # ignored (and Python keeps it so), so a suite run with `&` would never see the interrupt.
    previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        first_rc = demo_run.run_demo(options)
    finally:
        MetricsLog.append = original_append
        signal.signal(signal.SIGINT, previous_handler)
    after_interrupt = {
        "checkpoints": sorted(p.name for p in (run_dir / "checkpoints").glob("global_step_*")),
        "summary": (run_dir / "summary.json").exists(),
        "steps": [r["step"] for r in MetricsLog(run_dir).records("grpo_step")],
    }
    return first_rc, after_interrupt, demo_run.main(["--resume", str(run_dir)])


def assert_interrupted_then_resumed(
    run_dir: Path, first_rc: int, after_interrupt: dict, resumed_rc: int
) -> None:
    assert first_rc == demo_run.INTERRUPTED_EXIT
    assert after_interrupt == {"checkpoints": ["global_step_1"], "summary": False, "steps": [1]}
    assert resumed_rc == 0
    log = MetricsLog(run_dir)
    assert [r["step"] for r in log.records("warm_start")] == [1, 2]  # not redone on resume
    assert [(r["phase"], r["split"]) for r in log.records("eval")] == [
        ("before", "heldout"), ("before", "train"), ("after", "heldout"), ("after", "train"),
    ]  # fmt: skip
    assert [r["step"] for r in log.records("grpo_step")] == [1, 2]  # step 2 ran once, after the resume
    versions = {(r["phase"], r["split"]): r["weights_version"] for r in log.records("eval")}
    assert versions[("before", "train")] == 2  # the warm start's 2 supervised steps
    assert versions[("after", "heldout")] == versions[("after", "train")] == 2  # the final GRPO step's


def assert_real_grpo_steps(run_dir: Path) -> None:
    steps = MetricsLog(run_dir).grpo_steps()
    for record in steps:
        for key in ("reward_mean", "loss", "grad_norm", "seconds_generate", "seconds_train", "seconds_step"):
            assert math.isfinite(record[key]), key
        assert 0.0 <= record["reward_mean"] <= 1.0 and record["grad_norm"] > 0
    # Each step's update is synced to the sampler; the next step's rollouts use it (also across the
    # resume).
    assert [s["weights_version"] for s in steps] == [1, 2]
    assert [s["rollout_weights_version"] for s in steps] == [0, 1]
    assert [s["optimizer_steps"] for s in steps] == [1, 2]


def assert_run_directory(run_dir: Path, framework: str, *, step_override: str) -> dict[str, Any]:
    """config.yaml, plot, summary; returns the config for framework-specific checks."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["demo"]["framework"] == framework and config["demo"]["steps"] == 2
    assert step_override in config[f"{framework}_overrides"]
    assert config["arctic_rl"]["backend"]["kind"] == "reference"
    assert config["arctic_rl"]["backend"]["reference"]["model_path"] == str(
        (run_dir / "warm_start" / "hf").resolve()
    )
    assert (run_dir / "warm_start" / "hf" / "config.json").is_file()
    assert (run_dir / "reward_loss.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["framework"] == framework
    assert summary["steps"] == [1, 2] and summary["weights_version"] == [1, 2]
    for phase in ("before", "after"):
        assert summary[phase]["heldout"]["metric"] == "EX" and summary[phase]["heldout"]["total"] == 10
        assert summary[phase]["train"]["total"] == 16
        # 2 answers per question sampled at the rollout temperature, scored with the same EX
        assert summary[phase]["heldout"]["sampled"]["total"] == 20
        assert summary[phase]["train"]["sampled"]["metric"] == "EX"
        assert summary[phase]["train"]["sampled"]["total"] == 32
    assert set(summary["seconds"]) >= {"grpo", "eval_after", "total"}
    return config


def run_against_server(framework: str, run_dir: Path, server_url: str, *, colocate: bool) -> dict[str, Any]:
    """The demo's GRPO phase against an Arctic on-prem HTTP API (`--server URL [--colocate]`, as
    the command line passes them), 2 steps; returns the run's summary after the shared checks:
    every step's rollouts come from the previous step's synced weights and the reported weights
    version advances every step, on the server's own counter (it starts at 0)."""
    argv = ["--framework", framework, "--out", str(run_dir), "--steps", "2", "--server", server_url]
    args = _parsed([*argv, *(["--colocate"] if colocate else [])])
    options = demo_run.resolve_options(args)
    assert (options.server, options.colocate) == (server_url, colocate)
    tiny = tiny_options(framework, run_dir, server=server_url, colocate=colocate, eval_samples=0)
    assert demo_run.run_demo(tiny) == 0
    log = MetricsLog(run_dir)
    (placement,) = log.records("backend")
    assert placement["where"] == f"Arctic on-prem server at {server_url} (arctic-platform client)"
    assert_real_grpo_steps(run_dir)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    backend = config["arctic_rl"]["backend"]
    assert (backend["kind"], f"http://{backend['host']}:{backend['port']}") == ("http", server_url)
    assert config["arctic_rl"]["placement"]["colocate"] is colocate
    assert config["arctic_rl"]["model"]["name"] == str((run_dir / "warm_start" / "hf").resolve())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["server"], summary["colocate"]) == (server_url, colocate)
    assert summary["rollout_weights_version"] == [0, 1] and summary["weights_version"] == [1, 2]
    after = {r["split"]: r for r in log.records("eval") if r["phase"] == "after"}
    assert after["heldout"]["total"] == 10 and after["train"]["total"] == 16
    return summary


def _parsed(argv: list[str]) -> Any:
    import argparse

    parser = argparse.ArgumentParser()
    demo_run.add_arguments(parser)
    return parser.parse_args(argv)


def run_against_cortex(framework: str, run_dir: Path, emulator: Any) -> dict[str, Any]:
    """The demo's GRPO phase on the Cortex emulator (`--backend cortex --server URL`, as the command
    line passes them), 2 steps through the real 0.1.4 `CortexTransport`; returns the run's summary
    after the checks: the weights version advances every step on the emulator's counter, each step's
    rollouts come from the previous sync, Cortex reports no gradient norm, and the PAT is in no file
    the run wrote and not in the emulator's log."""
    url = emulator.url
    args = _parsed(
        [
            "--framework",
            framework,
            "--out",
            str(run_dir),
            "--steps",
            "2",
            "--server",
            url,
            "--backend",
            "cortex",
        ]
    )
    options = demo_run.resolve_options(args)
    assert (options.server, options.backend) == (url, "cortex")
    tiny = tiny_options(framework, run_dir, server=url, backend="cortex", eval_samples=0)
    assert demo_run.run_demo(tiny) == 0
    log = MetricsLog(run_dir)
    (placement,) = log.records("backend")
    assert placement["where"] == f"Cortex API at {url} (arctic-platform client)"
    steps = log.grpo_steps()
    assert [s["weights_version"] for s in steps] == [1, 2]
    assert [s["rollout_weights_version"] for s in steps] == [0, 1]
    assert [s["optimizer_steps"] for s in steps] == [1, 2]
    for record in steps:
        assert math.isfinite(record["loss"]) and 0.0 <= record["reward_mean"] <= 1.0
        assert record["grad_norm"] is None or math.isnan(record["grad_norm"])  # Cortex's step has none
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    backend = config["arctic_rl"]["backend"]
    assert (backend["kind"], backend["cortex"]["base_url"]) == ("cortex", url)
    assert config["arctic_rl"]["model"]["name"] == str((run_dir / "warm_start" / "hf").resolve())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["server"], summary["backend"]) == (url, "cortex")
    secret = emulator.pat.encode()
    leaked = [str(p) for p in run_dir.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert leaked == []
    assert emulator.pat not in emulator.log_text()
    return summary
