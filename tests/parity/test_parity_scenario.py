"""The canonical scenario is valid core config, its rollouts are reproducible with a reward spread
per group, and the recording backend traces what a driver sends to the reference engine."""

from __future__ import annotations

import asyncio

import pytest
import torch
from arctic_rl_testbed.parity.scenario import (
    CANONICAL,
    ParityScenario,
    canonical_rollouts,
    gold_response,
    token_level_rewards,
)


def _engine(scenario: ParityScenario):
    from arctic_rl_core.config import ArcticRLConfig
    from arctic_rl_testbed.reference.engine import ReferenceBackend
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

    return ReferenceBackend(
        ReferenceEngineSettings.from_config(ArcticRLConfig.from_dict(scenario.core_config()))
    )


@pytest.fixture(scope="module")
def engine():
    backend = _engine(CANONICAL)
    yield backend
    asyncio.run(backend.shutdown())


@pytest.fixture(scope="module")
def rollouts(engine):
    return canonical_rollouts(CANONICAL, engine)


def test_core_config_is_valid_and_carries_the_scenario(engine):
    from arctic_rl_core.config import ArcticRLConfig

    cfg = ArcticRLConfig.from_dict(CANONICAL.core_config())
    assert cfg.batch.prompts_per_step == 2 and cfg.batch.rollouts_per_prompt == 2
    assert cfg.loss.clip_ratio_high == 0.28 and cfg.loss.use_kl_loss and cfg.determinism.seed == 7
    assert cfg.shape.train_batch_size == CANONICAL.mini_batch_prompts * CANONICAL.rollouts_per_prompt


def test_rollouts_have_gold_and_sampled_rows_with_a_reward_spread(rollouts):
    assert len(rollouts) == CANONICAL.steps >= 3
    for step, rows in zip(CANONICAL.question_indices, rollouts, strict=True):
        assert [r.question_index for r in rows] == [
            i for i in step for _ in range(CANONICAL.rollouts_per_prompt)
        ]
        assert [r.group for r in rows] == [
            g for g in range(len(step)) for _ in range(CANONICAL.rollouts_per_prompt)
        ]
        for group in range(len(step)):
            gold, sampled = rows[2 * group], rows[2 * group + 1]
            assert gold.reward == 1.0 and gold.response_text.startswith("<think>plan</think><answer>")
            assert sampled.reward < 1.0 and 0 < len(sampled.response_ids) <= CANONICAL.max_response_length
            assert (
                gold.prompt_ids == sampled.prompt_ids and len(gold.prompt_ids) <= CANONICAL.max_prompt_length
            )


def test_rollouts_are_reproducible_in_a_fresh_engine(rollouts):
    other = _engine(CANONICAL)
    try:
        again = canonical_rollouts(CANONICAL, other)
    finally:
        asyncio.run(other.shutdown())
    assert again == rollouts


def test_token_level_rewards_sit_on_the_last_response_token(rollouts):
    rows = rollouts[0]
    values = token_level_rewards(rows, CANONICAL.max_response_length)
    for row, line in zip(rows, values, strict=True):
        assert line[len(row.response_ids) - 1] == row.reward and sum(line) == row.reward


def test_bad_scenarios_are_refused():
    with pytest.raises(ValueError, match="at least 3"):
        ParityScenario(question_indices=((0, 1), (1, 0)))
    with pytest.raises(ValueError, match="same number of prompts"):
        ParityScenario(question_indices=((0, 1), (1,), (0, 1)))
    with pytest.raises(ValueError, match="mini_batch_prompts=3"):
        ParityScenario(mini_batch_prompts=3)
    assert gold_response("SELECT 1").count("```sql") == 1


def test_recording_backend_traces_forward_train_and_step(tmp_path, engine, rollouts):
    from arctic_rl_core.dispatch import run
    from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_forward_payload, build_train_payload
    from arctic_rl_testbed.parity.recording import RecordingBackend, weights_digest
    from arctic_rl_testbed.parity.trace_file import ParityTraceWriter, read_trace

    writer = ParityTraceWriter(tmp_path / "t.trace")
    backend = RecordingBackend(engine, writer).handle().connect()
    assert backend.pad_token_id == engine.pad_token_id  # delegated attribute
    spec = PayloadSpec(
        pad_token_id=engine.pad_token_id,
        max_prompt_len=CANONICAL.max_prompt_length,
        max_response_len=CANONICAL.max_response_length,
        rollout_n=2,
        temperature=1.0,
        loss_fn="verl_grpo",
    )
    samples = [
        RolloutSample(
            prompt_ids=list(r.prompt_ids), response_ids=list(r.response_ids), advantages=1.0 - 2 * (i % 2),
            old_logprobs=[-1.0] * len(r.response_ids),
        )
        for i, r in enumerate(rollouts[0])
    ]  # fmt: skip
    before = weights_digest(engine.trainer_parameters())
    forward = build_forward_payload(samples, spec)
    run(backend.forward(forward))
    train = run(backend.forward_backward(build_train_payload(samples, spec)))
    step = run(backend.step())
    writer.record_event("weights", digest=weights_digest(engine.trainer_parameters()))
    calls = read_trace(writer.close())
    assert [c.op for c in calls] == ["forward", "forward_backward", "step", "weights"]
    assert torch.equal(calls[0].tensors[(0, "input_ids")], forward.batch["input_ids"])
    assert calls[1].record["loss"] == train.loss and calls[2].record["grad_norm"] == step.grad_norm
    assert calls[3].record["digest"] != before  # the step moved the weights


def test_fixed_rollouts_file_serves_each_step_its_rollouts_in_any_order_within_a_group(rollouts):
    """The `--fixed-rollouts` document of the scenario, served as the server does: prompts of step s,
    asked for in any order within a group, get exactly step s's responses; the dataset rows hold the
    prompts in step order."""
    from arctic_rl_testbed.parity.scenario import dataset_rows, fixed_rollouts_document
    from arctic_rl_testbed.reference.fixed_rollouts import FixedRollouts, FixedRolloutsError

    fixed = FixedRollouts.from_document(fixed_rollouts_document(CANONICAL, rollouts))
    rows = dataset_rows(CANONICAL)
    assert [r["extra_info"]["index"] for r in rows] == [
        i for step in CANONICAL.question_indices for i in step
    ]
    n = CANONICAL.rollouts_per_prompt
    for step, expected in enumerate(rollouts):
        prompts = [
            rows[step * CANONICAL.prompts_per_step + r.group]["prompt"][0]["content"] for r in expected
        ]
        templated = [f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n" for p in reversed(prompts)]
        served = fixed.serve(
            templated, max_tokens=CANONICAL.max_response_length, stop_ids=frozenset(), decode=str
        )
        assert sorted(s.token_ids for s in served) == sorted(r.response_ids for r in expected)
        for g in range(CANONICAL.prompts_per_step):  # a group's rows are its question's responses
            group = [r.response_ids for r in expected[g * n : (g + 1) * n]]
            mine = [
                s.token_ids for s, p in zip(served, reversed(prompts), strict=True) if p == prompts[g * n]
            ]
            assert sorted(mine) == sorted(group)
    with pytest.raises(FixedRolloutsError, match="asked for completion"):
        fixed.serve([rows[0]["prompt"][0]["content"]], max_tokens=8, stop_ids=frozenset(), decode=str)
