"""Entry points: `python -m adapter_skyrl.main ...` and SkyRL's launcher with
`trainer.override_entrypoint=adapter_skyrl.main`; a bad knob fails at startup with its message."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from adapter_skyrl.config import UnsupportedSkyRLSettingError
from adapter_skyrl.main import main

GOOD = [
    "trainer.placement.colocate_all=false",
    "generator.inference_engine.enable_ray_prometheus_stats=false",
    "trainer.algorithm.policy_loss_type=dual_clip",
    "trainer.arctic_rl.backend.kind=reference",
]


def test_bad_knob_fails_at_startup_naming_it():
    with pytest.raises(UnsupportedSkyRLSettingError, match=r"generator\.sampling_params\.min_p = 0\.1"):
        main([*GOOD, "generator.sampling_params.min_p=0.1"])


def test_unknown_arctic_knob_fails_at_startup_naming_it(bird_jsonl):
    from arctic_rl_core.config import ConfigError

    with pytest.raises(ConfigError, match=r"trainer\.arctic_rl\.zorro\.enabel") as info:
        main(
            [
                *GOOD,
                "trainer.arctic_rl.zorro.enabel=true",
                f"data.train_data=['{bird_jsonl}']",
                "data.val_data=[]",
                "trainer.logger=console",
                "trainer.train_batch_size=2",
                "trainer.policy_mini_batch_size=1",
                "data.dataloader.num_workers=0",
            ]
        )
    assert len(info.value.issues) == 1


def test_skyrl_launcher_dispatches_to_us_and_the_override_is_stripped(monkeypatch):
    from skyrl.train.entrypoints import main_base

    argv = [
        "main_base",
        "trainer.override_entrypoint=adapter_skyrl.main",
        *GOOD,
        "trainer.logger=console",
        "trainer.policy.model.lora.max_loras=2",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        main_base.main()
    # Only our rule fired: the override argument itself was not rejected by the strict parse.
    assert len(info.value.problems) == 1 and "lora.max_loras = 2" in info.value.problems[0]


def test_module_entry_point_exits_non_zero_with_the_message():
    proc = subprocess.run(
        [sys.executable, "-m", "adapter_skyrl.main", *GOOD, "trainer.policy.model.lora.max_loras=2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert (
        "trainer.policy.model.lora.max_loras = 2: the Arctic sampler serves the one trained adapter"
        in proc.stderr
    )


def test_skyrl_launcher_runs_a_grpo_step_through_us(tmp_path, bird_jsonl):
    """`python -m skyrl.train.entrypoints.main_base trainer.override_entrypoint=adapter_skyrl.main ...`:
    SkyRL's own launcher, one real step on the reference engine, a trace and a checkpoint."""
    trace = tmp_path / "trace.jsonl"
    args = [
        *GOOD,
        "trainer.override_entrypoint=adapter_skyrl.main",
        f"data.train_data=['{bird_jsonl}']",
        "data.val_data=[]",
        "data.dataloader.num_workers=0",
        "trainer.logger=console",
        "trainer.enable_ray_gpu_monitor=false",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        "generator.n_samples_per_prompt=2",
        "trainer.max_prompt_length=128",
        "generator.sampling_params.max_generate_length=4",
        "trainer.max_training_steps=1",
        "trainer.eval_interval=0",
        "trainer.eval_before_train=false",
        "trainer.ckpt_interval=1",
        f"trainer.ckpt_path={tmp_path / 'ckpt'}",
        f"trainer.export_path={tmp_path / 'export'}",
        f"trainer.arctic_trace_path={trace}",
        "trainer.arctic_rl.backend.reference.num_layers=1",
        "trainer.arctic_rl.backend.reference.hidden_size=32",
        "trainer.arctic_rl.backend.reference.intermediate_size=64",
        "trainer.arctic_rl.backend.reference.num_attention_heads=2",
        "trainer.arctic_rl.backend.reference.num_key_value_heads=1",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "skyrl.train.entrypoints.main_base", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ops = [json.loads(line)["op"] for line in trace.read_text().splitlines()]
    assert ops.count("forward_backward") == 1 and ops.count("step") == 1 and "forward_ref" in ops
    assert (tmp_path / "ckpt" / "global_step_1" / "policy" / "arctic_checkpoint.json").is_file()


# -- issue 32: override values SkyRL's parser reads wrongly or cannot read -------------------------


def test_dry_run_names_each_value_skyrl_would_misread_never_a_traceback():
    """Before: `weight_decay=1:2:3` became 3723 and `trainer.epochs=two` the text "two" without a word.
    Now each is one problem naming the key and the fix, with the rest of the run's."""
    import io

    from adapter_skyrl.main import dry_run

    out, err = io.StringIO(), io.StringIO()
    code = dry_run(
        [
            *GOOD,
            "trainer.logger=console",
            "trainer.policy.optimizer_config.weight_decay=1:2:3",
            "trainer.epochs=two",
            "trainer.seed=7",
        ],
        out,
        err,
    )
    assert code == 2 and out.getvalue() == ""
    text = err.getvalue()
    assert text.startswith("2 problems in the SkyRL config") and "Traceback" not in text, text
    assert 'weight_decay = "1:2:3": YAML 1.1 reads 1:2:3 as the base-60 (sexagesimal) number 3723' in text
    assert 'trainer.epochs = "two": must be a number (its default is 1). Fix: give a number' in text


def test_a_misread_value_stops_the_run_with_the_message():
    proc = subprocess.run(
        [sys.executable, "-m", "adapter_skyrl.main", *GOOD, "trainer.logger=console", "trainer.epochs=two"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert 'trainer.epochs = "two": must be a number' in proc.stderr
