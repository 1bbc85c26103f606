"""What both adapters' parity traces must satisfy, checked the same way for SkyRL and verl
(`tests/skyrl/test_parity_skyrl_trace.py`, `tests/verl/test_parity_verl_trace.py`): where the trace
goes, the config mapping, every call of the scenario, and the advantages sent."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]


def trace_dir() -> Path:
    """`$ARCTIC_RL_PARITY_DIR`, else `.test-results/parity` under the repository root."""
    from arctic_rl_testbed.parity.scenario import DEFAULT_TRACE_SUBDIR, TRACE_DIR_ENV

    return Path(os.environ.get(TRACE_DIR_ENV) or REPO_ROOT / DEFAULT_TRACE_SUBDIR)


def projection(full: dict, shape: dict) -> dict:
    """The entries of `full` at the keys of `shape` (recursively)."""
    return {k: projection(full[k], v) if isinstance(v, dict) else full[k] for k, v in shape.items()}


def assert_config_maps_onto_the_scenario(scenario, mapped: dict) -> None:
    """The adapter's config, mapped to the core schema, holds the scenario's core values."""
    from arctic_rl_core.config import ArcticRLConfig

    expected = ArcticRLConfig.from_dict(scenario.core_config()).model_dump(mode="json")
    assert mapped == projection(expected, scenario.core_config())


def assert_every_call_of_the_scenario(scenario, calls, logprob_ops: tuple[str, str]) -> None:
    """Config, then per step: rollouts, the two log-prob forwards in the framework's order
    (`logprob_ops`), forward-backward + step per mini-batch and epoch; then the final weights."""
    mini_batches = scenario.prompts_per_step // scenario.mini_batch_prompts * scenario.epochs
    per_step = ["rollouts", *logprob_ops, *["forward_backward", "step"] * mini_batches]
    assert [c.op for c in calls] == ["config", *per_step * scenario.steps, "weights"]
    steps = [c for c in calls if c.op == "step"]
    assert [c.record["step"] for c in steps] == list(range(1, len(steps) + 1))
    assert all(np.isfinite(c.record["grad_norm"]) and c.record["grad_norm"] > 0 for c in steps)
    for call in calls:
        if call.op == "forward_backward":
            # the gold row of each group makes GRPO advantages non-zero
            assert call.tensors[(0, "advantages")].abs().sum() > 0
            assert (
                call.record["meta"]["global_batch_size"]
                == scenario.mini_batch_prompts * scenario.rollouts_per_prompt
            )


def assert_advantages_are_the_core_grpo_advantages(scenario, rollouts, calls) -> None:
    """The framework's own GRPO advantages, as sent at columns P + j, equal the core ones of the
    scenario's rewards, exactly."""
    from arctic_rl_core.advantages import token_level_grpo_advantages

    train = [c for c in calls if c.op == "forward_backward"]
    per_step = len(train) // scenario.steps
    P = scenario.max_prompt_length
    for step, rows in enumerate(rollouts):
        lengths = [len(r.response_ids) for r in rows]
        width = max(lengths)
        rewards = torch.zeros(len(rows), width)
        mask = torch.zeros(len(rows), width)
        for b, (row, n) in enumerate(zip(rows, lengths, strict=True)):
            rewards[b, n - 1] = row.reward
            mask[b, :n] = 1.0
        expected = token_level_grpo_advantages(
            rewards, mask, [r.group for r in rows], epsilon=1e-6, norm_by_std=True
        )
        sent = torch.cat(
            [c.tensors[(0, "advantages")] for c in train[step * per_step : (step + 1) * per_step]]
        )
        for b, n in enumerate(lengths):
            torch.testing.assert_close(sent[b, P : P + n], expected[b, :n], rtol=0, atol=0)
