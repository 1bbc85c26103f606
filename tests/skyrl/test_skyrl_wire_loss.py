"""SkyRL's policy losses run on the server by dotted path, end to end through the wire: the SkyRL
adapter's config translation (SkyRL CLI -> core config), then GRPO steps through `ArcticBackend` and
the real arctic-platform 0.1.4 client over HTTP to `arctic-rl serve --reference` in its own process
(tests/shared/wire_server.py); and SkyRL's own `RayPPOTrainer.train()` doing the same (issue 16's
done-when). Cases: SkyRL's default `regular`, and DAPO's clip-higher."""

from __future__ import annotations

import math

import pytest
from adapter_skyrl.config import parse_cli, to_arctic_config
from adapter_skyrl.trace import PayloadTrace
from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_losses import SERVER_LOSS_FN
from loss_wire_checks import check_wire_run, wire_grpo_steps
from skyrl_e2e_run import TINY_GRPO, TINY_MODEL, logged_steps, run_grpo
from wire_server import REFERENCE_MODEL_NAME, tiny_model_dir, wire, wire_server  # noqa: F401  (fixtures)

SKYRL = [
    "trainer.placement.colocate_all=false",
    "generator.inference_engine.enable_ray_prometheus_stats=false",
    "trainer.algorithm.use_kl_loss=false",
    "trainer.train_batch_size=2",
    "trainer.policy_mini_batch_size=2",
    "generator.n_samples_per_prompt=2",
    "trainer.micro_train_batch_size_per_gpu=2",
    "generator.sampling_params.max_generate_length=4",
    "trainer.max_prompt_length=16",
    f"trainer.policy.model.path={REFERENCE_MODEL_NAME}",
]


@pytest.mark.parametrize(
    ("overrides", "clip_high"),
    [([], 0.2), (["trainer.algorithm.eps_clip_high=0.28"], 0.28)],
    ids=["regular", "dapo"],
)
def test_skyrl_policy_loss_runs_on_the_server_through_the_wire(wire, tmp_path, overrides, clip_high):  # noqa: F811
    arctic = [o for o in wire.overrides("trainer.arctic_rl.") if ".model.name=" not in o]
    cfg = to_arctic_config(
        parse_cli([*SKYRL, *arctic, f"trainer.arctic_rl.checkpoint.path={tmp_path}", *overrides]),
        steps_per_epoch=2,
    )
    assert (cfg.backend.kind, cfg.loss.loss_fn, cfg.loss.policy_loss) == (
        "http",
        "arctic_rl_core",
        "ppo_clip",
    )
    assert cfg.loss.clip_ratio_high == clip_high
    run = wire_grpo_steps(cfg)
    check_wire_run(run, "ppo_clip")
    assert run["payloads"][0].meta["actor_config"]["clip_ratio_high"] == clip_high
    assert wire.jobs() == {}


@pytest.mark.parametrize(
    ("overrides", "clip_high"),
    [(["trainer.algorithm.policy_loss_type=regular"], 0.2), (["trainer.algorithm.eps_clip_high=0.28"], 0.28)],
    ids=["regular", "dapo"],
)
def test_skyrl_trainer_runs_the_policy_loss_on_the_server_through_the_wire(
    wire,  # noqa: F811
    tmp_path,
    learnable_jsonl,
    overrides,
    clip_high,
):
    """SkyRL's real trainer, 2 GRPO steps over the wire: every forward-backward names the server
    loss by dotted path with SkyRL's family and clip ratios, and the server trains with it."""
    model_dir = tiny_model_dir(tmp_path / "model", 7, **TINY_MODEL)
    backends = []

    def factory(arctic_cfg):
        assert arctic_cfg.backend.kind == "http" and arctic_cfg.loss.loss_fn == "arctic_rl_core"
        backends.append(ArcticBackend.from_config(arctic_cfg))  # the import probe runs here
        return backends[-1]

    exp = run_grpo(
        [
            *wire.overrides("trainer.arctic_rl.", model=False),
            f"trainer.policy.model.path={model_dir}",
            f"data.train_data=['{learnable_jsonl}']",
            "trainer.max_training_steps=2",
            "trainer.ckpt_interval=0",
            "trainer.resume_mode=none",
            f"trainer.ckpt_path={tmp_path / 'ckpt'}",
            f"trainer.export_path={tmp_path / 'export'}",
            f"trainer.arctic_rl.checkpoint.path={tmp_path / 'server'}",
            "trainer.arctic_rl.placement.log_prob_gpus=1",  # reference log-probs for the KL loss
            f"trainer.arctic_trace_path={tmp_path / 'trace.jsonl'}",
            "trainer.algorithm.policy_loss_type=regular",  # SkyRL's default (the tiny base sets dual_clip)
            *overrides,
        ],
        base=TINY_GRPO,
        backend_factory=factory,
        shutdown=True,
    )
    assert wire.jobs() == {}
    assert (exp.arctic_cfg.loss.policy_loss, exp.arctic_cfg.loss.clip_ratio_high) == ("ppo_clip", clip_high)
    steps = logged_steps(exp)
    assert sorted(steps) == [1, 2]
    for step in steps.values():
        assert math.isfinite(step["policy/policy_loss"]) and step["policy/grad_norm"] > 0
        assert "policy/arctic/actor/pg_loss" in step  # the server loss's own metrics, as logged
        assert "policy/arctic/actor/pg_clipfrac_lower" not in step  # no dual clip: SkyRL's regular
    train = [r for r in PayloadTrace(tmp_path / "trace.jsonl").read() if r["op"] == "forward_backward"]
    assert train
    for record in train:
        assert record["processing"]["loss_fn"] == SERVER_LOSS_FN
        assert record["meta"]["policy_loss_config"]["loss_mode"] == "ppo_clip"
        assert record["meta"]["actor_config"]["clip_ratio_high"] == clip_high
