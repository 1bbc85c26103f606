"""verl on Cortex: the demo's GRPO phase (`arctic-rl demo --framework verl --backend cortex --server
URL --steps 2`) through verl's `run_ppo`, the adapter's worker and rollout server (each with its own
client) and the real 0.1.4 `CortexTransport` against `arctic-rl serve --reference --api cortex` in its
own process; and what the dry run refuses there."""

from __future__ import annotations

import pytest
from cortex_emulator import cortex_emulator  # noqa: F401

BASE = [
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.model.path=/models/tiny",
    "data.train_batch_size=4",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "trainer.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "trainer.default_local_dir=/ckpt",
    "++remote_backend.core.backend.kind=cortex",
    "++remote_backend.core.backend.cortex.base_url=http://c",
    "actor_rollout_ref.hybrid_engine=false",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
]


def test_demo_runs_grpo_on_the_cortex_emulator(cortex_emulator, tmp_path):  # noqa: F811
    from demo_checks import run_against_cortex

    summary = run_against_cortex("verl", tmp_path / "run", cortex_emulator)
    # the jobs end with verl's trainer and 0.1.4 cannot load a Cortex checkpoint into new ones
    assert summary["after"] is None


@pytest.mark.parametrize(
    ("override", "field", "reason"),
    [
        ("trainer.resume_mode=resume_path", "trainer.resume_mode", "resume is not available on Cortex"),
        ("actor_rollout_ref.actor.use_kl_loss=true", "use_kl_loss", "no reference log-probs"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "loss_mode", "dual-clip PPO only"),
        ("actor_rollout_ref.hybrid_engine=true", "hybrid_engine", "separate sub-jobs"),
    ],
)
def test_the_dry_run_refuses_what_cortex_cannot_serve(override, field, reason):
    from adapter_verl.config import resolve
    from adapter_verl.main import compose, with_arctic_defaults

    problems = resolve(compose(with_arctic_defaults([*BASE, override])[0]), 5).problems
    text = "\n".join(problems)
    assert field in text and reason in text, text
    assert resolve(compose(with_arctic_defaults(BASE)[0]), 5).problems == []  # the base itself is fine
