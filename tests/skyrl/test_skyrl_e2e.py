"""SkyRL 0.4.0's real `RayPPOTrainer.train()` driving the core reference backend on CPU.

GRPO on the bundled BIRD sample (rewards from real SQL execution) and one step on GSM8K: losses
finite, the weights version advancing every step with each step's rollouts drawn from the newest
weights, old log-probs computed once per mini-batch before the update epochs, every payload
recorded in a trace, and checkpoint + resume reaching bit-identical weights.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
import torch
from adapter_skyrl.config import parse_cli
from adapter_skyrl.trace import PayloadTrace
from skyrl_e2e_run import IN_PROCESS, TINY_GRPO, RecordingExp, backend_weights, logged_steps, run_grpo

BASE = [*TINY_GRPO, *IN_PROCESS]


def _run(overrides: list[str]) -> RecordingExp:
    return run_grpo(overrides)


_steps = logged_steps


_backend_weights = backend_weights


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory, bird_train_rows):
    root = tmp_path_factory.mktemp("skyrl_e2e")
    data = root / "bird.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in bird_train_rows), encoding="utf-8")
    ckpt = root / "ckpt"
    exp = _run(
        [
            f"data.train_data=['{data}']",
            "trainer.max_training_steps=3",
            "trainer.ckpt_interval=2",
            f"trainer.ckpt_path={ckpt}",
            f"trainer.export_path={root / 'export'}",
            "trainer.resume_mode=none",
            f"trainer.arctic_trace_path={root / 'trace.jsonl'}",
        ]
    )
    return exp, root, data


def test_three_grpo_steps_with_finite_losses_and_metrics(grpo_run):
    exp, _, _ = grpo_run
    steps = _steps(exp)
    assert sorted(steps) == [1, 2, 3]
    for data in steps.values():
        assert math.isfinite(data["policy/policy_loss"]) and math.isfinite(data["policy/grad_norm"])
        assert data["arctic/lr"] == pytest.approx(0.001)
        assert "reward/avg_raw_reward" in data and "generate/scoring_errors" in data
        assert data["timing/arctic/forward_backward"] > 0 and data["timing/sync_weights_only_transfer"] > 0
        # Rollout log-probs came back from the backend, so SkyRL logs the train/rollout mismatch;
        # the sampler serves the trainer's weights, so they agree to float rounding.
        assert data["policy/rollout_train_logprobs_abs_diff_mean"] < 1e-4
    # 2 mini-batches x 2 update epochs per step: the backend's optimizer counter shows them all.
    assert [steps[s]["arctic/optimizer_steps"] for s in (1, 2, 3)] == [4, 8, 12]


def test_rewards_come_from_real_sql_execution(grpo_run):
    from arctic_rl_core.envs.bird import compute_score

    exp, _, _ = grpo_run
    assert len(exp.generator.batches) == 3
    for batch in exp.generator.batches:
        assert all(reward in (0.0, 0.1, 1.0) for reward in batch["rewards"])
        rescored = [
            compute_score("bird", text, e["reward_model"]["ground_truth"], e["extra_info"])["score"]
            for text, e in zip(batch["texts"], batch["extras"], strict=True)
        ]
        assert rescored == batch["rewards"]


def test_weights_version_advances_and_rollouts_use_the_new_weights(grpo_run):
    exp, _, _ = grpo_run
    versions = [b["version"] for b in exp.generator.batches]
    assert versions[0] < versions[1] < versions[2]
    steps = _steps(exp)
    synced = [steps[s]["arctic/weights_version"] for s in (1, 2, 3)]  # after each step's sync
    # Each step's rollouts were drawn with the weights the previous step's sync produced.
    assert versions[1:] == synced[:2] and synced[2] > synced[1]
    assert [steps[s]["generate/weights_version"] for s in (1, 2, 3)] == versions


def test_trace_shows_old_logprobs_once_per_mini_batch_before_the_epochs(grpo_run):
    _, root, _ = grpo_run
    records = PayloadTrace(root / "trace.jsonl").read()
    assert [r["index"] for r in records] == list(range(len(records)))
    payload_ops = [r["op"] for r in records if "digest" in r]
    # Per step: reference log-probs for the whole batch, old log-probs once per mini-batch, then
    # 2 mini-batches x 2 update epochs of forward-backward.
    per_step = ["forward_ref", "forward", "forward"] + ["forward_backward"] * 4
    assert payload_ops == per_step * 3
    events = [r["op"] for r in records if "digest" not in r]
    assert events.count("step") == 12 and events.count("sync_weights") == 4  # initial sync + 3 steps
    assert events.count("save_checkpoint") == 2  # ckpt_interval=2, then the final step
    train = [r for r in records if r["op"] == "forward_backward"]
    assert all(r["processing"]["loss_fn"] == "verl_grpo" for r in train)
    assert all(r["meta"]["actor_config"]["use_kl_loss"] is True for r in train)
    assert all(r["processing"]["loss_fn"] is None for r in records if r["op"] in ("forward", "forward_ref"))
    # Entropy is computed where the loss uses it (entropy bonus on), never for the reference model.
    assert {r["op"]: r["meta"]["calculate_entropy"] for r in records if "digest" in r} == {
        "forward_ref": False,
        "forward": True,
        "forward_backward": True,
    }


def test_resume_from_checkpoint_is_bit_identical(grpo_run, tmp_path):
    exp, root, data = grpo_run
    resumed = _run(
        [
            f"data.train_data=['{data}']",
            "trainer.max_training_steps=3",
            "trainer.ckpt_interval=2",
            f"trainer.ckpt_path={tmp_path / 'ckpt'}",
            f"trainer.export_path={tmp_path / 'export'}",
            "trainer.resume_mode=from_path",
            f"trainer.resume_path={root / 'ckpt' / 'global_step_2'}",
        ]
    )
    assert sorted(_steps(resumed)) == [3]  # only the last step ran
    assert resumed.generator.batches[0]["texts"] == exp.generator.batches[2]["texts"]
    a, b = _backend_weights(root / "ckpt", 3), _backend_weights(tmp_path / "ckpt", 3)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert not all(torch.equal(a[n], w) for n, w in _backend_weights(root / "ckpt", 2).items() if n in a), (
        "step 3 changed nothing"
    )


def test_one_grpo_step_on_gsm8k(tmp_path):
    from arctic_rl_core.envs.gsm8k import build_rows, sample_problems

    rows = [dict(r, env_class="gsm8k_arctic") for r in build_rows(sample_problems(), "train")]
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    exp = _run(
        [
            f"data.train_data=['{data}']",
            f"data.val_data=['{data}']",  # SkyRL's eval path runs through the generator too
            "trainer.eval_interval=1",
            "trainer.eval_before_train=true",
            "trainer.dump_eval_results=false",
            "trainer.max_prompt_length=256",
            "trainer.max_training_steps=1",
            "trainer.ckpt_interval=0",
            f"trainer.ckpt_path={tmp_path / 'ckpt'}",
            f"trainer.export_path={tmp_path / 'export'}",
            "trainer.resume_mode=none",
        ]
    )
    from arctic_rl_core.envs.gsm8k import compute_score

    (step,) = _steps(exp).values()
    assert math.isfinite(step["policy/policy_loss"]) and step["generate/scoring_errors"] == 0
    train_batch = exp.generator.batches[1]  # [0] is the eval before training
    rescored = [  # judged by the core GSM8K reward
        compute_score("gsm8k", text, e["reward_model"]["ground_truth"])["score"]
        for text, e in zip(train_batch["texts"], train_batch["extras"], strict=True)
    ]
    assert rescored == train_batch["rewards"]
    assert all(r in (0.0, 1.0) for b in exp.generator.batches for r in b["rewards"])
    assert not (tmp_path / "ckpt" / "global_step_1").exists()  # ckpt_interval=0: no checkpoint
    evals = [step for step, logged in exp.recorded.logs if "eval/all/pass_at_1" in logged]
    assert evals == [0, 1]  # before training and after the (last) step


def test_two_grpo_steps_with_the_backend_as_a_ray_actor(tmp_path, bird_train_rows):
    ray = pytest.importorskip("ray")
    import os

    from arctic_rl_core.dispatch import run
    from arctic_rl_testbed.reference.ray_actor import launch_reference_actor
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

    data = tmp_path / "bird.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in bird_train_rows), encoding="utf-8")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="adapter_skyrl_tests")
    backend = None
    try:

        def factory(arctic_cfg):
            nonlocal backend
            backend = launch_reference_actor(ReferenceEngineSettings.from_config(arctic_cfg), num_cpus=0)
            return backend

        cfg = parse_cli(
            [
                *BASE,
                f"data.train_data=['{data}']",
                "trainer.max_training_steps=2",
                "trainer.ckpt_interval=0",
                f"trainer.ckpt_path={tmp_path / 'ckpt'}",
                f"trainer.export_path={tmp_path / 'export'}",
                "trainer.resume_mode=none",
            ]
        )
        exp = RecordingExp(cfg, backend_factory=factory)
        asyncio.run(exp._setup_trainer().train())
        steps = _steps(exp)
        assert sorted(steps) == [1, 2] and all(math.isfinite(s["policy/policy_loss"]) for s in steps.values())
        versions = [b["version"] for b in exp.generator.batches]
        assert versions[1] == steps[1]["arctic/weights_version"] > versions[0]
        # The engine really lives in another process: its state is reached through the actor.
        state = run(backend.state())
        assert state.trainer_version == steps[2]["arctic/optimizer_steps"]
        assert ray.get(backend._actor.__ray_call__.remote(lambda self: os.getpid())) != os.getpid()
    finally:
        if backend is not None:
            run(backend.shutdown())
        ray.shutdown()


def test_colocated_reference_engine_sleeps_and_wakes_through_the_core_policy(tmp_path, bird_train_rows):
    data = tmp_path / "bird.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in bird_train_rows), encoding="utf-8")
    exp = _run(
        [
            f"data.train_data=['{data}']",
            "trainer.placement.colocate_all=true",  # SkyRL's switch: colocated Arctic jobs
            "trainer.max_training_steps=2",
            "trainer.ckpt_interval=0",
            f"trainer.ckpt_path={tmp_path / 'ckpt'}",
            f"trainer.export_path={tmp_path / 'export'}",
            "trainer.resume_mode=none",
        ]
    )
    from arctic_rl_core.backends.protocol import InferenceState, TrainingState
    from arctic_rl_core.dispatch import run

    steps = _steps(exp)
    assert sorted(steps) == [1, 2] and all(math.isfinite(s["policy/policy_loss"]) for s in steps.values())
    state = run(exp.backend.state())
    # After the last sync the sampler holds the device and the trainer sleeps, as the policy says.
    assert (
        state.colocated and state.inference is InferenceState.AWAKE and state.training is TrainingState.ASLEEP
    )
    versions = [b["version"] for b in exp.generator.batches]
    assert versions[1] == steps[1]["arctic/weights_version"] > versions[0]


def test_run_shuts_down_the_backend_it_created(tmp_path, bird_train_rows):
    from arctic_rl_core.dispatch import run

    data = tmp_path / "bird.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in bird_train_rows), encoding="utf-8")
    exp = RecordingExp(
        parse_cli(
            [
                *BASE,
                f"data.train_data=['{data}']",
                "trainer.max_training_steps=1",
                "trainer.ckpt_interval=0",
                f"trainer.ckpt_path={tmp_path / 'ckpt'}",
                f"trainer.export_path={tmp_path / 'export'}",
            ]
        )
    )
    exp.run()
    assert sorted(_steps(exp)) == [1]
    with pytest.raises(RuntimeError, match="shut down"):
        run(exp.backend.state())


def test_a_fixed_seed_grpo_run_raises_the_reward(learnable_jsonl, tmp_path):
    """The graded vowel-share reward (tests/shared/learnable_reward.py) with only the policy term in
    the loss (no KL, no entropy bonus): every step has non-zero advantages and a gradient, and
    eight steps of GRPO raise the mean reward (seed 7: about 0.36 -> 0.55)."""
    exp = _run(
        [
            f"data.train_data=['{learnable_jsonl}']",
            "trainer.max_training_steps=8",
            "trainer.epochs=20",
            "trainer.ckpt_interval=0",
            f"trainer.ckpt_path={tmp_path / 'ckpt'}",
            f"trainer.export_path={tmp_path / 'export'}",
            "trainer.resume_mode=none",
            "trainer.policy.optimizer_config.lr=0.05",
            "generator.n_samples_per_prompt=8",
            "trainer.train_batch_size=4",
            "trainer.policy_mini_batch_size=4",
            "trainer.update_epochs_per_batch=1",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.algorithm.use_entropy_loss=false",
        ]
    )
    steps = _steps(exp)
    assert sorted(steps) == list(range(1, 9))
    for step in steps.values():
        assert step["loss/avg_raw_advantages_abs"] > 0.1  # rewards differ within the groups
        assert step["policy/grad_norm"] > 0  # from the policy term alone
    rewards = [steps[s]["reward/avg_raw_reward"] for s in sorted(steps)]
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.1, rewards


def test_kl_in_the_reward_runs_with_reference_log_probs(learnable_jsonl, tmp_path):
    """`use_kl_in_reward=true` (as in the verl adapter, tests/verl/test_verl_e2e.py's resumed step):
    reference log-probs from the backend's log-prob side, SkyRL's own apply_reward_kl_penalty
    subtracts the KL from the rewards, and the server loss has no KL term."""
    exp = _run(
        [
            f"data.train_data=['{learnable_jsonl}']",
            "trainer.max_training_steps=2",
            "trainer.ckpt_interval=0",
            f"trainer.ckpt_path={tmp_path / 'ckpt'}",
            f"trainer.export_path={tmp_path / 'export'}",
            "trainer.resume_mode=none",
            f"trainer.arctic_trace_path={tmp_path / 'trace.jsonl'}",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.algorithm.use_kl_in_reward=true",
            "trainer.algorithm.kl_loss_coef=0.5",
        ]
    )
    assert exp.arctic_cfg.loss.use_kl_in_reward and not exp.arctic_cfg.loss.use_kl_loss
    steps = _steps(exp)
    assert sorted(steps) == [1, 2]
    assert steps[1]["loss/avg_kl"] == 0.0  # the policy is still the reference
    assert steps[2]["loss/avg_kl"] != 0.0 and steps[2]["loss/kl_loss_coef"] == 0.5
    records = PayloadTrace(tmp_path / "trace.jsonl").read()
    assert [r["op"] for r in records if "digest" in r].count("forward_ref") == 2  # one per step
    train = [r for r in records if r["op"] == "forward_backward"]
    assert train and all(r["meta"]["actor_config"]["use_kl_loss"] is False for r in train)


def test_a_dapo_launchers_reduction_and_hf_schedule_run(learnable_jsonl, tmp_path):
    """What SkyRL's DAPO launchers set and the Arctic path now serves, in a real run: token_mean_legacy
    (SkyRL's own advantage scaling, the server's loss summing the policy term) and an HF export schedule
    (a backend checkpoint with its hf/ copy in export_path/global_step_<n>/policy, every step here)."""
    export = tmp_path / "export"
    exp = _run(
        [
            f"data.train_data=['{learnable_jsonl}']",
            "trainer.max_training_steps=2",
            "trainer.ckpt_interval=0",
            "trainer.hf_save_interval=1",
            f"trainer.ckpt_path={tmp_path / 'ckpt'}",
            f"trainer.export_path={export}",
            "trainer.resume_mode=none",
            "trainer.algorithm.loss_reduction=token_mean_legacy",
            f"trainer.arctic_trace_path={tmp_path / 'trace.jsonl'}",
        ]
    )
    assert (exp.arctic_cfg.loss.loss_agg_mode, exp.arctic_cfg.loss.pg_loss_agg_mode) == (
        "token-mean",
        "token-sum",
    )
    steps = _steps(exp)
    assert sorted(steps) == [1, 2] and all(math.isfinite(s["policy/policy_loss"]) for s in steps.values())
    train = [r for r in PayloadTrace(tmp_path / "trace.jsonl").read() if r["op"] == "forward_backward"]
    assert train and all(r["meta"]["policy_loss_config"]["pg_loss_agg_mode"] == "token-sum" for r in train)
    for step in (1, 2):
        marker = json.loads((export / f"global_step_{step}" / "policy" / "arctic_hf_export.json").read_text())
        # 2 mini-batches x 2 update epochs: 4 optimizer steps a training step
        assert marker["step"] == 4 * step and (Path(marker["hf_dir"]) / "config.json").is_file()
