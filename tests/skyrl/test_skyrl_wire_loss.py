"""SkyRL's policy losses run on the server by dotted path, end to end through the wire: the SkyRL
adapter's config translation (SkyRL CLI -> core config), then GRPO steps through `ArcticBackend` and
the real arctic-platform 0.1.4 client over HTTP to `arctic-rl serve --reference` in its own process
(tests/shared/wire_server.py). Cases: SkyRL's default `regular`, and DAPO's clip-higher."""

from __future__ import annotations

import pytest
from adapter_skyrl.config import parse_cli, to_arctic_config
from loss_wire_checks import check_wire_run, wire_grpo_steps
from wire_server import REFERENCE_MODEL_NAME, wire, wire_server  # noqa: F401  (fixtures)

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
