"""verl's GSPO runs on the server by dotted path, end to end through the wire: the verl adapter's
config translation (composed Hydra config -> core config), then GRPO steps through `ArcticBackend`
and the real arctic-platform 0.1.4 client over HTTP to `arctic-rl serve --reference` in its own
process (tests/shared/wire_server.py)."""

from __future__ import annotations

from loss_wire_checks import check_wire_run, wire_grpo_steps
from wire_server import REFERENCE_MODEL_NAME

VERL = [
    "algorithm.adv_estimator=grpo",
    f"actor_rollout_ref.model.path={REFERENCE_MODEL_NAME}",
    "data.train_batch_size=2",
    "data.max_prompt_length=16",
    "data.max_response_length=4",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
    "actor_rollout_ref.actor.clip_ratio_low=0.0003",
    "actor_rollout_ref.actor.clip_ratio_high=0.0004",
    # one training GPU (verl's default is 8), TP 1 (verl's default is 2), and sampling on its own GPU
    # (verl's hybrid engine, its default, is a colocated Arctic run)
    "trainer.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.hybrid_engine=false",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
]


def test_verl_gspo_runs_on_the_server_through_the_wire(wire, tmp_path):
    from adapter_verl.config import arctic_config_from_verl
    from adapter_verl.main import compose, with_arctic_defaults

    core = [
        "++remote_backend.core." + o.split("=", 1)[0] + "=" + o.split("=", 1)[1]
        for o in wire.overrides()
        if not o.startswith("model.name=")
    ]
    config = compose(with_arctic_defaults([*VERL, *core, f"trainer.default_local_dir={tmp_path}"])[0])
    cfg = arctic_config_from_verl(config, 2)
    assert (cfg.backend.kind, cfg.loss.loss_fn, cfg.loss.policy_loss) == ("http", "arctic_rl_core", "gspo")
    run = wire_grpo_steps(cfg)
    check_wire_run(run, "gspo")
    assert run["payloads"][0].meta["actor_config"]["loss_agg_mode"] == "seq-mean-token-mean"
    assert wire.jobs() == {}
