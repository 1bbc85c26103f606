"""SkyRL 0.4.0's real `RayPPOTrainer.train()` through `ArcticBackend` and the real arctic-platform
0.1.4 client over HTTP, against `arctic-rl serve --reference` in its own process (one server for
the module, tests/shared/wire_server.py): the runs the README's wire claims rest on.

SkyRL's layout: the driver holds the one client (dispatch and generator share it). Prompts go as
chat-templated text, as the on-prem server requires, and its results carry no prompt token ids.
Rewards come from the graded `vowel_share` environment, so advantages are non-zero in every step.
Runs: plain (2 steps, a checkpoint each step), resume from step 1 (bit-identical weights at step
2), and colocated (sleep/wake around every step's training and sync).
"""

from __future__ import annotations

import math
import time

import pytest
from arctic_rl_core.backends.arctic import ArcticBackend
from skyrl_e2e_run import TINY_GRPO, TINY_MODEL, CallLog, backend_weights, logged_steps, run_grpo
from wire_server import tiny_model_dir

SEED = 7


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-model"), SEED, **TINY_MODEL)


def _wire_run(wire, model_dir, learnable_jsonl, root, *extra: str):
    """A wire run with every backend call recorded; returns (exp, calls, seconds)."""
    logs: list[CallLog] = []

    def factory(arctic_cfg):
        assert arctic_cfg.backend.kind == "http" and arctic_cfg.backend.port == wire.port
        logs.append(CallLog(ArcticBackend.from_config(arctic_cfg)))
        return logs[-1]

    start = time.perf_counter()
    exp = run_grpo(
        [
            *wire.overrides("trainer.arctic_rl.", model=False),
            f"trainer.policy.model.path={model_dir}",
            f"data.train_data=['{learnable_jsonl}']",
            f"trainer.seed={SEED}",
            "trainer.max_training_steps=2",
            f"trainer.ckpt_path={root / 'ckpt'}",
            f"trainer.export_path={root / 'export'}",
            f"trainer.arctic_rl.checkpoint.path={root / 'server'}",  # the training job's directory
            "trainer.arctic_rl.placement.log_prob_gpus=1",  # reference log-probs for the KL loss
            *extra,
        ],
        base=TINY_GRPO,
        backend_factory=factory,
        shutdown=True,
    )
    assert wire.jobs() == {}  # the run destroyed the jobs it created
    return exp, logs[0], time.perf_counter() - start


@pytest.fixture(scope="module")
def plain_run(wire_server, model_dir, learnable_jsonl, tmp_path_factory):
    root = tmp_path_factory.mktemp("skyrl_wire_plain")
    exp, calls, seconds = _wire_run(
        wire_server,
        model_dir,
        learnable_jsonl,
        root,
        "trainer.ckpt_interval=1",
        "trainer.resume_mode=none",
        f"trainer.arctic_trace_path={root / 'trace.jsonl'}",
    )
    print(f"SkyRL wire run (plain, 2 steps): {seconds:.1f} s")
    return exp, calls, root


def test_wire_run_trains_with_text_prompts_and_a_learning_signal(wire, plain_run):
    exp, calls, _ = plain_run
    assert calls.prompt_types == {str}  # text prompts only, as the on-prem server takes them
    assert isinstance(exp.backend.target, ArcticBackend)
    steps = logged_steps(exp)
    assert sorted(steps) == [1, 2]
    for step in steps.values():
        assert math.isfinite(step["policy/policy_loss"]) and step["policy/grad_norm"] > 0
        # prompts are not echoed back: the generator used its own tokenisation, of the same length
        assert step["token_drift/prompts_repaired"] == 0
        assert step["loss/avg_raw_advantages_abs"] > 0.1  # rewards differ within every group
        assert step["policy/arctic/actor/pg_loss"] != 0  # the policy term (2nd epoch: ratio != 1)
    for batch in exp.generator.batches:  # n_samples_per_prompt=2: each pair is one prompt's group
        rewards = batch["rewards"]
        assert any(rewards[i] != rewards[i + 1] for i in range(0, len(rewards), 2)), batch["texts"]


def test_wire_run_samples_each_step_from_the_last_sync(wire, plain_run):
    exp, calls, _ = plain_run
    steps = logged_steps(exp)
    versions = [batch["version"] for batch in exp.generator.batches]
    synced = [steps[s]["arctic/weights_version"] for s in (1, 2)]
    assert versions[0] < versions[1] == synced[0] < synced[1]  # the sampler's version advances
    assert [steps[s]["generate/weights_version"] for s in (1, 2)] == versions
    # every sync is followed by a prefix-cache reset before the next generate
    for i, name in enumerate(calls.calls):
        if name == "sync_weights":
            assert calls.calls[i + 1] == "reset_prefix_cache", calls.calls[i : i + 3]


def test_wire_resume_from_checkpoint_is_bit_identical(wire, plain_run, model_dir, learnable_jsonl, tmp_path):
    exp, _, root = plain_run
    resumed, calls, seconds = _wire_run(
        wire,
        model_dir,
        learnable_jsonl,
        tmp_path,
        "trainer.ckpt_interval=1",
        "trainer.resume_mode=from_path",
        f"trainer.resume_path={root / 'ckpt' / 'global_step_1'}",
    )
    print(f"SkyRL wire run (resume, 1 step): {seconds:.1f} s")
    assert "load_checkpoint" in calls.calls
    assert sorted(logged_steps(resumed)) == [2]
    assert resumed.generator.batches[0]["texts"] == exp.generator.batches[1]["texts"]
    a, b = backend_weights(root / "ckpt", 2), backend_weights(tmp_path / "ckpt", 2)
    # compare the files both checkpoints hold (a save may leave an extra uniquely named temporary file)
    common = a.keys() & b.keys()
    assert any(name.endswith(".weight") for name in common), sorted(a)[:5]
    for name in common:
        assert a[name].equal(b[name]), name


def test_wire_colocated_run_sleeps_and_wakes_every_step(wire, model_dir, learnable_jsonl, tmp_path):
    exp, calls, seconds = _wire_run(
        wire,
        model_dir,
        learnable_jsonl,
        tmp_path,
        "trainer.placement.colocate_all=true",  # SkyRL's switch: colocated Arctic jobs
        "trainer.ckpt_interval=0",
        "trainer.resume_mode=none",
    )
    print(f"SkyRL wire run (colocated, 2 steps): {seconds:.1f} s")
    steps = logged_steps(exp)
    assert sorted(steps) == [1, 2] and all(math.isfinite(s["policy/policy_loss"]) for s in steps.values())
    names = calls.calls
    generates = [i for i, name in enumerate(names) if name == "generate"]
    assert len(generates) == 2
    # Between the two steps' rollouts: inference sleeps, training wakes, trains, syncs, the trainer
    # sleeps and inference wakes again; never a generate or a sync on a sleeping side.
    between = names[generates[0] : generates[1]]
    for op in ("sleep_inference", "wake_training", "forward_backward", "sync_weights", "wake_inference"):
        assert op in between, (op, between)
    assert (
        between.index("sleep_inference") < between.index("forward_backward") < between.index("sync_weights")
    )
    assert between.index("sync_weights") < len(between) - between[::-1].index("wake_inference")
    state_names = [n for n in names if n.startswith(("sleep_", "wake_"))]
    assert state_names.count("sleep_inference") >= 2 and state_names.count("wake_inference") >= 2
    versions = [batch["version"] for batch in exp.generator.batches]
    assert versions[1] == steps[1]["arctic/weights_version"] > versions[0]
