"""`arctic-rl demo --trainer deepspeed` through SkyRL 0.4.0's trainer, tiny settings: the supervised warm
start trains on arctic-platform 0.1.4's own DeepSpeedWorker in process (the `sft` loss through the real
worker's SFT pipeline), its checkpoint and HF export are DeepSpeed's, and the GRPO steps run through the
real 0.1.4 client against a local `arctic-rl serve --reference --trainer deepspeed` the demo starts and
stops (its training job is the real server code). One run: ~2-4 min on a busy 2-core machine."""

from __future__ import annotations

import json

import pytest
import yaml
from arctic_rl_testbed.demo import run as demo_run
from arctic_rl_testbed.demo.options import DemoOptions
from arctic_rl_testbed.demo.run_log import MetricsLog
from demo_checks import assert_real_grpo_steps, tiny_options


@pytest.fixture(scope="module")
def deepspeed_demo(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("demo-deepspeed") / "run"
    code = demo_run.run_demo(tiny_options("skyrl", run_dir, trainer="deepspeed"))
    return run_dir, code


def test_the_demo_runs_its_grpo_steps_on_the_real_server_code(deepspeed_demo):
    run_dir, code = deepspeed_demo
    assert code == 0
    assert_real_grpo_steps(run_dir)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["demo"]["trainer"] == "deepspeed"
    backend = config["arctic_rl"]["backend"]
    assert backend["kind"] == "http" and backend["host"] == "127.0.0.1"  # the demo's own local server
    assert (
        config["arctic_rl"]["kernels"]["use_liger"] is False
        and config["arctic_rl"]["zorro"]["enable"] is False
    )
    assert "trainer.flash_attn=false" in config["skyrl_overrides"]
    # one row per training micro-batch (the built-in loss reads the 0.1.4 pipeline's packed layout); forwards
    # hold every row, sent unpacked
    assert "trainer.micro_train_batch_size_per_gpu=1" in config["skyrl_overrides"]
    assert "trainer.micro_forward_batch_size_per_gpu=4" in config["skyrl_overrides"]
    assert config["arctic_rl"]["deepspeed"]["zero_stage"] == 2
    log = (run_dir / "server.log").read_text()
    # the client asks for torch_adam itself (not offloaded): the CPU shim changes nothing, logs nothing
    assert "DeepSpeed trainer, training job: added" not in log


def test_the_warm_start_is_a_deepspeed_checkpoint_with_an_hf_export(deepspeed_demo):
    run_dir, _ = deepspeed_demo
    warm = run_dir / "warm_start"
    tag = (warm / "latest").read_text().strip()  # DeepSpeed's pointer
    assert list((warm / tag).glob("*model_states.pt"))
    hf = warm / "hf"
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (hf / name).is_file(), name
    records = MetricsLog(run_dir).records("warm_start")
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["loss"] > 0 and r["grad_norm"] > 0 for r in records)


def test_the_warm_starts_first_step_is_the_torch_trainers(deepspeed_demo):
    """The same first supervised step on the torch trainer (same seed, model and rows): the same loss and
    gradient norm within bf16 noise. The demo sends a step's rows as one micro-batch: 0.1.4's `sft` loss
    is a token mean per micro-batch summed over micro-batches, so one row per micro-batch gave a gradient
    ~8.7 times the torch trainer's on the default demo (26.6 vs 3.07)."""
    import asyncio

    from arctic_rl_testbed.demo.backend import reference_backend
    from arctic_rl_testbed.demo.tasks import load_task
    from arctic_rl_testbed.demo.warm_start import warm_start

    run_dir, _ = deepspeed_demo
    first = MetricsLog(run_dir).records("warm_start")[0]
    options = tiny_options("skyrl", run_dir.parent / "torch")
    backend = reference_backend(options, model_path=None, lr=options.warm_start_lr)
    prompts, answers = load_task(options.task).warm_start_pairs(backend.tokenizer)  # as demo.run does
    (torch_first,) = asyncio.run(
        warm_start(
            backend,
            prompts,
            answers,
            steps=1,
            batch_size=options.warm_start_batch,
            pad_token_id=backend.pad_token_id,
            max_prompt_len=max(len(p) for p in prompts),
            max_response_len=options.max_response_length,
            seed=options.seed,
        )
    )
    asyncio.run(backend.shutdown())
    print(
        f"\nwarm start step 1: loss {first['loss']:.4f} vs {torch_first.loss:.4f}, "
        f"grad norm {first['grad_norm']:.3f} vs {torch_first.grad_norm:.3f}"
    )
    assert first["loss"] == pytest.approx(torch_first.loss, rel=0.01)
    assert first["grad_norm"] == pytest.approx(torch_first.grad_norm, rel=0.05)


def test_the_summary_names_the_real_trainer(deepspeed_demo):
    run_dir, _ = deepspeed_demo
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == [1, 2] and summary["weights_version"] == [1, 2]
    assert summary["after"]["heldout"]["total"] == 10


def test_deepspeed_starts_its_own_server():
    with pytest.raises(ValueError, match="starts its own"):
        DemoOptions(out="x", trainer="deepspeed", server="http://127.0.0.1:8000")
