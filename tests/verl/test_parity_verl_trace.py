"""Parity trace, verl side: the canonical scenario through the verl adapter, recorded for the
cross-framework comparison in tests/parity (run in the core environment after this suite).

The config is verl's own Hydra config (`CANONICAL.verl_overrides()` composed with the adapter's
group) and must map back onto the scenario's core config. Each step then does what verl 0.9.1's V1
trainer (`PPOTrainer` in `verl/trainer/ppo/v1/trainer_base.py`) asks of the actor/ref worker, on the
fixed rollouts of the scenario stored as its agent loop stores them (jagged TensorDicts):
`_compute_old_log_prob` (`compute_log_prob` with `calculate_entropy=True`, sliced with verl's
`response_from_nested`), `_compute_ref_log_prob`, `_compute_advantage` (verl's own GRPO,
`core_algos.compute_grpo_outcome_advantage`, written back with `response_to_nested`), then
`_update_actor` (the worker runs verl's own mini-batch iterator). Every backend call is recorded
with its tensors into `<trace dir>/verl.trace` (trace dir: `$ARCTIC_RL_PARITY_DIR`, else
`.test-results/parity` under the repository root).
"""

from __future__ import annotations

import asyncio

import numpy as np
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


def _rows_tensordict(rows):
    from verl.utils import tensordict_utils as tu

    items = []
    for r in rows:
        prompts = torch.tensor(r.prompt_ids, dtype=torch.int64)
        responses = torch.tensor(r.response_ids, dtype=torch.int64)
        items.append(
            {
                "prompts": prompts,
                "responses": responses,
                "response_mask": torch.ones(len(r.response_ids), dtype=torch.int64),
                "input_ids": torch.cat([prompts, responses]),
            }
        )
    return tu.list_of_dict_to_tensordict(items)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from adapter_verl.config import settings_from_verl
    from adapter_verl.main import compose, with_arctic_defaults
    from adapter_verl.session import SessionInfo
    from adapter_verl.worker import ArcticActorRolloutRefWorker
    from arctic_rl_core.config import ArcticRLConfig
    from arctic_rl_testbed.parity.recording import RecordingBackend, weights_digest
    from arctic_rl_testbed.parity.scenario import CANONICAL, canonical_rollouts, token_level_rewards
    from arctic_rl_testbed.parity.trace_file import ParityTraceWriter, read_trace
    from arctic_rl_testbed.reference.engine import ReferenceBackend
    from arctic_rl_testbed.reference.model import save_model_dir
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import response_from_nested, response_to_nested

    scenario = CANONICAL
    root = tmp_path_factory.mktemp("verl_parity")
    core_model = scenario.core_config()["backend"]["reference"]
    model_dir = save_model_dir(
        root / "model", ArcticRLConfig.from_dict(scenario.core_config()).backend.reference, scenario.seed
    )
    overrides = [*scenario.verl_overrides(), f"actor_rollout_ref.model.path={model_dir}"]
    config = compose(with_arctic_defaults(overrides)[0])
    settings = settings_from_verl(config, total_training_steps=scenario.steps)
    arctic = settings.arctic_config()
    assert arctic.backend.reference.model_dump(include=set(core_model)) == core_model
    mapped = projection(arctic.model_dump(mode="json"), scenario.core_config())
    engine = ReferenceBackend(ReferenceEngineSettings.from_config(arctic))
    writer = ParityTraceWriter(trace_dir() / "verl.trace")
    writer.record_event("config", core=mapped)
    backend = RecordingBackend(engine, writer)
    rollouts = canonical_rollouts(scenario, engine)
    env = {"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29556"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        worker = ArcticActorRolloutRefWorker(
            config=OmegaConf.create({"model": {"path": str(model_dir)}}), role="actor_rollout_ref"
        )
    worker.attach(SessionInfo(handle=backend.handle(), settings=settings))
    actor = config.actor_rollout_ref.actor
    temperature = config.actor_rollout_ref.rollout.temperature
    mini_rows = actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n
    try:
        for step, rows in enumerate(rollouts):
            writer.record_event(
                "rollouts",
                step=step,
                prompt_ids=[list(r.prompt_ids) for r in rows],
                response_ids=[list(r.response_ids) for r in rows],
                rewards=[r.reward for r in rows],
            )
            data = _rows_tensordict(rows)
            # _compute_old_log_prob
            tu.assign_non_tensor(data, calculate_entropy=True, compute_loss=False, temperature=temperature)
            old = response_from_nested(worker.compute_log_prob(data)["log_probs"], data["response_mask"])
            # _compute_ref_log_prob
            tu.assign_non_tensor(data, calculate_entropy=False, compute_loss=False, temperature=temperature)
            ref = response_from_nested(worker.compute_ref_log_prob(data)["log_probs"], data["response_mask"])
            # _compute_advantage: verl's GRPO on the padded batch, written back jagged
            response_mask = data["response_mask"]
            width = max(len(r.response_ids) for r in rows)
            mask_B_R = response_mask.to_padded_tensor(padding=0).to(torch.float32)
            rewards_B_R = torch.tensor(token_level_rewards(rows, width), dtype=torch.float32)
            advantages_B_R, _ = compute_grpo_outcome_advantage(
                rewards_B_R,
                mask_B_R,
                np.array([f"{step}-{r.group}" for r in rows], dtype=object),
                norm_adv_by_std_in_grpo=config.algorithm.norm_adv_by_std_in_grpo,
            )
            data["old_log_probs"], data["ref_log_prob"] = old, ref
            data["advantages"] = response_to_nested(advantages_B_R, response_mask)
            # _update_actor
            tu.assign_non_tensor(
                data,
                calculate_entropy=bool(actor.calculate_entropy or actor.entropy_coeff != 0.0),
                global_batch_size=mini_rows,
                mini_batch_size=mini_rows,
                epochs=actor.ppo_epochs,
                seed=actor.data_loader_seed,
                dataloader_kwargs={"shuffle": actor.shuffle},
                temperature=temperature,
            )
            worker.update_actor(data)
        writer.record_event("weights", digest=weights_digest(engine.trainer_parameters()))
    finally:
        writer.close()
        asyncio.run(engine.shutdown())
    return scenario, mapped, rollouts, read_trace(writer.path)


def test_verl_config_maps_onto_the_scenario_core_config(recorded):
    scenario, mapped, _, _ = recorded
    assert_config_maps_onto_the_scenario(scenario, mapped)


def test_verl_trace_has_every_call_of_the_scenario(recorded):
    scenario, _, _, calls = recorded
    assert_every_call_of_the_scenario(scenario, calls, logprob_ops=("forward", "forward_ref"))


def test_verl_advantages_are_the_core_grpo_advantages_of_the_rewards(recorded):
    scenario, _, rollouts, calls = recorded
    assert_advantages_are_the_core_grpo_advantages(scenario, rollouts, calls)
