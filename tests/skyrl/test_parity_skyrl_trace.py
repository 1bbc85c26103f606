"""Parity trace, SkyRL side: the canonical scenario through the SkyRL adapter, recorded for the
cross-framework comparison in tests/parity (run in the core environment after this suite).

The config is SkyRL's own (`CANONICAL.skyrl_overrides()` through the adapter's parser) and must map
back onto the scenario's core config. Each step then does what SkyRL 0.4.0's `RayPPOTrainer` does
with its dispatch (`fwd_logprobs_values_reward`, `compute_advantages_and_returns`,
`_execute_training_step`): reference log-probs of the whole batch, policy (old) log-probs, SkyRL's
own GRPO advantages (`ppo_utils.compute_advantages_and_returns`), then for every epoch and
mini-batch `forward_backward_from_staged` + `optim_step`, on the fixed rollouts of the scenario.
Every backend call is recorded with its tensors into `<trace dir>/skyrl.trace` (trace dir:
`$ARCTIC_RL_PARITY_DIR`, else `.test-results/parity` under the repository root).
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from parity_trace_checks import (
    assert_advantages_are_the_core_grpo_advantages,
    assert_config_maps_onto_the_scenario,
    assert_every_call_of_the_scenario,
    projection,
    trace_dir,
)

pytest.importorskip("arctic_rl_testbed.reference.engine", reason="reference engine not landed yet")


@pytest.fixture(scope="module")
def recorded():
    from adapter_skyrl.config import parse_cli, to_arctic_config
    from adapter_skyrl.dispatch import ArcticWorkerDispatch
    from arctic_rl_core.backends.registry import create_backend
    from arctic_rl_core.weight_sync import WeightSyncPolicy
    from arctic_rl_core.wire import PayloadSpec
    from arctic_rl_testbed.parity.recording import RecordingBackend, weights_digest
    from arctic_rl_testbed.parity.scenario import CANONICAL, canonical_rollouts, token_level_rewards
    from arctic_rl_testbed.parity.trace_file import ParityTraceWriter, read_trace
    from skyrl.backends.skyrl_train.distributed.dispatch import loss_fn_outputs_to_tensor
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.backends.skyrl_train.utils import ppo_utils
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors

    scenario = CANONICAL
    cfg = parse_cli(scenario.skyrl_overrides())
    arctic = to_arctic_config(cfg, steps_per_epoch=scenario.steps)
    mapped = projection(arctic.model_dump(mode="json"), scenario.core_config())
    engine = create_backend(arctic)
    writer = ParityTraceWriter(trace_dir() / "skyrl.trace")
    writer.record_event("config", core=mapped)
    backend = RecordingBackend(engine, writer)
    rollouts = canonical_rollouts(scenario, engine)
    spec = PayloadSpec.from_config(arctic, pad_token_id=engine.pad_token_id)
    dispatch = ArcticWorkerDispatch(cfg, backend, spec, WeightSyncPolicy.from_config(arctic))
    algorithm = cfg.trainer.algorithm
    mini_rows = cfg.trainer.policy_mini_batch_size * cfg.generator.n_samples_per_prompt
    try:
        for step, rows in enumerate(rollouts):
            writer.record_event(
                "rollouts",
                step=step,
                prompt_ids=[list(r.prompt_ids) for r in rows],
                response_ids=[list(r.response_ids) for r in rows],
                rewards=[r.reward for r in rows],
            )
            responses = [list(r.response_ids) for r in rows]
            seqs, attn, resp_mask, rewards, loss_mask, _lp, _e, _s = convert_prompts_responses_to_batch_tensors(
                engine.pad_token_id,
                [list(r.prompt_ids) for r in rows],
                responses,
                [torch.tensor(line[: len(r)]) for line, r in zip(token_level_rewards(rows, 10**4), responses, strict=True)],
                [[1] * len(r) for r in responses],
            )  # fmt: skip
            data = TrainingInputBatch(
                {"sequences": seqs, "attention_mask": attn, "response_mask": resp_mask, "loss_mask": loss_mask,
                 "rewards": rewards}
            )  # fmt: skip
            boundaries = [(b, b + mini_rows) for b in range(0, len(rows), mini_rows)]
            data.metadata = {
                "response_length": resp_mask.shape[1],
                "uids": [f"{step}-{r.group}" for r in rows],
                "policy_mini_batch_boundaries": boundaries,
            }
            fwd = data.select(keys=["sequences", "attention_mask"], metadata_keys=["response_length"])
            fwd["response_mask"] = data["response_mask"]  # as ArcticPPOTrainer._execute_forward_pass adds it
            # fwd_logprobs_values_reward: the reference forward (whole batch), then the policy's
            if cfg.trainer.recompute_old_logprobs_per_minibatch:
                raise AssertionError("the canonical scenario sets recompute_old_logprobs_per_minibatch=false")
            data["base_action_log_probs"] = loss_fn_outputs_to_tensor(
                dispatch.forward("ref", fwd).loss_fn_outputs, key="logprobs"
            )
            data["action_log_probs"] = loss_fn_outputs_to_tensor(
                dispatch.forward("policy", fwd).loss_fn_outputs, key="logprobs"
            )
            data["values"] = None
            # compute_advantages_and_returns
            advantages, _returns = ppo_utils.compute_advantages_and_returns(
                token_level_rewards=data["rewards"],
                response_mask=data["response_mask"],
                index=data.metadata["uids"],
                adv_estimator=algorithm.advantage_estimator,
                config=algorithm,
                values=None,
                gamma=algorithm.gamma,
                lambd=algorithm.lambd,
                grpo_norm_by_std=algorithm.grpo_norm_by_std,
            )
            data["advantages"] = advantages
            # _execute_training_step
            chunks = dispatch.stage_data("policy", data, boundaries)
            for _epoch in range(cfg.trainer.update_epochs_per_batch):
                for chunk in chunks:
                    dispatch.forward_backward_from_staged("policy", chunk)
                    dispatch.optim_step("policy")
        writer.record_event("weights", digest=weights_digest(engine.trainer_parameters()))
    finally:
        writer.close()
        asyncio.run(engine.shutdown())
    return scenario, mapped, rollouts, read_trace(writer.path)


def test_skyrl_config_maps_onto_the_scenario_core_config(recorded):
    scenario, mapped, _, _ = recorded
    assert_config_maps_onto_the_scenario(scenario, mapped)


def test_skyrl_trace_has_every_call_of_the_scenario(recorded):
    scenario, _, _, calls = recorded
    assert_every_call_of_the_scenario(scenario, calls, logprob_ops=("forward_ref", "forward"))


def test_skyrl_advantages_are_the_core_grpo_advantages_of_the_rewards(recorded):
    scenario, _, rollouts, calls = recorded
    assert_advantages_are_the_core_grpo_advantages(scenario, rollouts, calls)


def test_per_mini_batch_old_log_probs_equal_the_whole_batch_ones(recorded):
    """Pinned: SkyRL's default (`recompute_old_logprobs_per_minibatch=true`) sends one policy forward
    per mini-batch where verl sends one per step; the scenario turns it off so the calls pair one to
    one. On the reference engine the values are the same bit for bit either way (rows are
    independent); only the packing of the calls differs."""
    from adapter_skyrl.config import parse_cli, to_arctic_config
    from adapter_skyrl.dispatch import ArcticWorkerDispatch
    from arctic_rl_core.backends.registry import create_backend
    from arctic_rl_core.weight_sync import WeightSyncPolicy
    from arctic_rl_core.wire import PayloadSpec
    from skyrl.backends.skyrl_train.distributed.dispatch import loss_fn_outputs_to_tensor
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors

    scenario, _, rollouts, _ = recorded
    overrides = [o for o in scenario.skyrl_overrides() if "recompute_old_logprobs_per_minibatch" not in o]
    cfg = parse_cli(overrides)
    assert cfg.trainer.recompute_old_logprobs_per_minibatch  # SkyRL's default
    arctic = to_arctic_config(cfg, steps_per_epoch=scenario.steps)
    engine = create_backend(arctic)
    try:
        dispatch = ArcticWorkerDispatch(
            cfg,
            engine,
            PayloadSpec.from_config(arctic, pad_token_id=engine.pad_token_id),
            WeightSyncPolicy.from_config(arctic),
        )
        rows = rollouts[0]
        responses = [list(r.response_ids) for r in rows]
        seqs, attn, resp_mask, _r, _m, _lp, _e, _s = convert_prompts_responses_to_batch_tensors(
            engine.pad_token_id, [list(r.prompt_ids) for r in rows], responses,
            [[0.0] * len(r) for r in responses], [[1] * len(r) for r in responses],
        )  # fmt: skip
        data = TrainingInputBatch({"sequences": seqs, "attention_mask": attn, "response_mask": resp_mask})
        data.metadata = {"response_length": resp_mask.shape[1]}
        mini_rows = cfg.trainer.policy_mini_batch_size * cfg.generator.n_samples_per_prompt
        boundaries = [(b, b + mini_rows) for b in range(0, len(rows), mini_rows)]
        whole = loss_fn_outputs_to_tensor(dispatch.forward("policy", data).loss_fn_outputs, key="logprobs")
        per_mini_batch = []
        for chunk in dispatch.stage_data("policy", data, boundaries):
            per_mini_batch.extend(dispatch.forward_from_staged("policy", chunk).loss_fn_outputs)
        assert len(boundaries) > 1
        torch.testing.assert_close(
            loss_fn_outputs_to_tensor(per_mini_batch, key="logprobs"), whole, rtol=0, atol=0
        )
    finally:
        asyncio.run(engine.shutdown())
