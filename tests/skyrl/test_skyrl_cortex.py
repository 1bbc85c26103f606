"""SkyRL on Cortex: the demo's GRPO phase (`arctic-rl demo --framework skyrl --backend cortex --server
URL --steps 2`) through SkyRL's trainer, `ArcticBackend` and the real 0.1.4 `CortexTransport` against
`arctic-rl serve --reference --api cortex` in its own process; and what the dry run refuses there."""

from __future__ import annotations

import pytest
from cortex_emulator import cortex_emulator  # noqa: F401

CORTEX = [
    "trainer.placement.colocate_all=false",
    "generator.inference_engine.enable_ray_prometheus_stats=false",
    "trainer.arctic_rl.backend.kind=cortex",
    "trainer.arctic_rl.backend.cortex.base_url=http://cortex.invalid",
    "trainer.algorithm.policy_loss_type=dual_clip",
    "trainer.algorithm.use_kl_loss=false",
    "trainer.policy_mini_batch_size=1024",
    "trainer.policy.model.path=Qwen/Qwen3-0.6B",
]


def test_demo_runs_grpo_on_the_cortex_emulator(cortex_emulator, tmp_path):  # noqa: F811
    from demo_checks import run_against_cortex

    summary = run_against_cortex("skyrl", tmp_path / "run", cortex_emulator)
    # SkyRL's demo keeps the backend it built: the accuracy after GRPO is measured on the Cortex sampler
    assert summary["after"]["heldout"]["total"] == 10 and summary["after"]["train"]["total"] == 16


@pytest.mark.parametrize(
    ("override", "field", "reason"),
    [
        ("trainer.resume_mode=from_path", "trainer.resume_mode", "resume is not available on Cortex"),
        ("trainer.algorithm.use_kl_loss=true", "trainer.algorithm.use_kl_loss", "no reference log-probs"),
        (
            "trainer.algorithm.policy_loss_type=gspo",
            "trainer.algorithm.policy_loss_type",
            "dual-clip PPO only",
        ),
    ],
)
def test_the_dry_run_refuses_what_cortex_cannot_serve(override, field, reason):
    from adapter_skyrl.config import UnsupportedSkyRLSettingError, check_supported, parse_cli

    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        check_supported(parse_cli([*CORTEX, override]), steps_per_epoch=4)
    text = "\n".join(info.value.problems)
    assert field in text and reason in text
    check_supported(parse_cli(CORTEX), steps_per_epoch=4)  # the base itself is fine


def test_an_hf_export_schedule_is_refused_on_cortex():
    """Cortex has no HF export (SkyRL's hf_save_interval is served on the on-prem server)."""
    from adapter_skyrl.config import parse_cli, translate

    result = translate(parse_cli([*CORTEX, "trainer.hf_save_interval=10"]), steps_per_epoch=None)
    assert [i.path for i in result.issues] == ["trainer.hf_save_interval"]
    assert translate(parse_cli([*CORTEX, "trainer.hf_save_interval=0"]), steps_per_epoch=None).issues == []
