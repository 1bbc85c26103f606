"""A multi-turn run of SkyRL's real `RayPPOTrainer.train()` on the reference engine (in process) that
learns: the `vowel_turns` environment (tests/shared/skyrl_multi_turn.py: two turns, each rewarded with
its vowel share, turn-level rewards) through SkyRL's own generator, every turn a request through the
core's batcher; the mean reward of the last steps is above the first steps'. Each step logs the
generator's multi-turn metrics and the sampler's queue (`sampler_queue/*`)."""

from __future__ import annotations

import json
import math
import statistics

from skyrl_e2e_run import IN_PROCESS, TINY_GRPO, logged_steps, run_grpo
from skyrl_multi_turn import vowel_turns_rows

STEPS = 30
LEARNING = [  # SkyRL's own settings: 4 prompts x 4 samples, 2 turns of up to 8 tokens
    "generator.batched=false",
    "generator.max_turns=2",
    "trainer.train_batch_size=4",
    "trainer.policy_mini_batch_size=4",
    "trainer.micro_train_batch_size_per_gpu=4",
    "trainer.update_epochs_per_batch=1",
    "generator.n_samples_per_prompt=4",
    "generator.sampling_params.max_generate_length=8",
    "trainer.algorithm.use_kl_loss=false",
    "trainer.algorithm.use_entropy_loss=false",
    "trainer.policy.optimizer_config.lr=0.03",
    f"trainer.max_training_steps={STEPS}",
    f"trainer.epochs={STEPS}",
    "trainer.ckpt_interval=0",
    "trainer.resume_mode=none",
]


def run_vowel_turns(tmp_path, *overrides):
    """SkyRL's trainer in process on the `vowel_turns` rows with `overrides`, SkyRL's agent loops."""
    data = tmp_path / "vowel_turns.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in vowel_turns_rows()), encoding="utf-8")
    return run_grpo(
        [
            f"data.train_data=['{data}']",
            f"trainer.ckpt_path={tmp_path / 'ckpt'}",
            f"trainer.export_path={tmp_path / 'export'}",
            *overrides,
        ],
        base=[*(a for a in TINY_GRPO if not a.startswith("generator.batched")), *IN_PROCESS],
    )


def test_a_multi_turn_run_learns_on_cpu(tmp_path):
    exp = run_vowel_turns(tmp_path, *LEARNING)
    steps = logged_steps(exp)
    assert sorted(steps) == list(range(1, STEPS + 1))
    rewards = [steps[s]["reward/avg_raw_reward"] for s in sorted(steps)]
    first, last = statistics.mean(rewards[:3]), statistics.mean(rewards[-3:])
    print(f"multi-turn vowel_turns mean reward per step: {[round(r, 3) for r in rewards]}")
    assert last > first + 0.05, rewards
    for data in steps.values():
        assert math.isfinite(data["policy/policy_loss"])
        assert data["generate/turns_mean"] == data["generate/turns_max"] == 2.0
        assert data["token_drift/turns"] == 0.0  # token ids in: every turn is exact
        # 16 trajectories x 2 turns = 32 requests through the batcher, fewer backend calls
        assert data["sampler_queue/requests"] == 32
        assert 2 <= data["sampler_queue/calls"] < 32 and data["sampler_queue/batch_size_mean"] > 1
    for batch in exp.generator.batches:  # each row holds both turns and the observation between them
        assert all(text.count("Say more.") == 1 for text in batch["texts"])


def test_step_wise_trajectories_train_one_row_per_turn(tmp_path):
    """SkyRL's `generator.step_wise_trajectories`: each turn is its own row (its prompt the context the
    sampler read), SkyRL's trainer propagates the last step's advantage; two steps train on the backend."""
    exp = run_vowel_turns(
        tmp_path,
        *(a for a in LEARNING if not a.startswith(("trainer.max_training_steps", "trainer.epochs"))),
        "generator.step_wise_trajectories=true",
        "trainer.max_training_steps=2",
    )
    steps = logged_steps(exp)
    assert sorted(steps) == [1, 2]
    for batch in exp.generator.batches:
        out = batch["output"]
        assert len(out["response_ids"]) == 2 * 16  # 16 trajectories x 2 turns, one row each
        assert out["is_last_step"] == [False, True] * 16
    for data in steps.values():
        assert math.isfinite(data["policy/policy_loss"]) and data["policy/grad_norm"] > 0
