"""The legacy integrations' optimisations: on by default with the Arctic backends (ZoRRo with memory-lean logits and
micro-batches of whole prompt groups, Liger, Arctic Inference with FCA), each one can be turned off,
and none of them runs on the reference backend, whose plan says so."""

from __future__ import annotations

from arctic_rl_core.config import ArcticRLConfig

_ARCTIC_MIN = {"backend": {"kind": "ray"}, "model": {"name": "Qwen/Qwen3-0.6B"}, "checkpoint": {"path": "/c"}}


def test_arctic_backends_default_to_the_legacy_optimisations() -> None:
    cfg = ArcticRLConfig.from_dict(
        {**_ARCTIC_MIN, "batch": {"rollouts_per_prompt": 8, "prompts_per_step": 8}}
    )
    assert (cfg.zorro.enable, cfg.zorro.logits_optimization) == (True, "memory")
    assert cfg.kernels.use_liger is True
    assert (cfg.arctic_inference.enable, cfg.arctic_inference.fca) == (True, True)
    # micro-batch sized to whole prompt groups: 8 rows = one group of 8 rollouts
    assert cfg.batch.micro_batch_size_per_gpu == 8
    assert cfg.plan()["client"]["training"]["ds_config"]["train_micro_batch_size_per_gpu"] == 8
    # a smaller ZoRRo group sizes the micro-batch too
    small = ArcticRLConfig.from_dict(
        {**_ARCTIC_MIN, "batch": {"rollouts_per_prompt": 8}, "zorro": {"max_rollouts": 4}}
    )
    assert small.batch.micro_batch_size_per_gpu == 4
    # resolved defaults are not "set by the user"
    assert "enable" not in cfg.zorro.model_fields_set
    assert "micro_batch_size_per_gpu" not in cfg.batch.model_fields_set


def test_each_legacy_optimisation_can_be_turned_off() -> None:
    cfg = ArcticRLConfig.from_dict(
        {
            **_ARCTIC_MIN,
            "zorro": {"enable": False},
            "kernels": {"use_liger": False},
            "arctic_inference": {"enable": False},
        }
    )
    assert (cfg.zorro.enable, cfg.zorro.logits_optimization, cfg.batch.micro_batch_size_per_gpu) == (
        False,
        "none",
        1,
    )
    assert (cfg.kernels.use_liger, cfg.arctic_inference.enable, cfg.arctic_inference.fca) == (
        False,
        False,
        False,
    )
    plan = cfg.plan()
    assert plan["env"]["sampling_workers"] == {} and plan["env"]["workers"] == {}
    assert "zorro_train_enable" not in plan["client"]["training"]["ds_worker_config"]
    fca_off = ArcticRLConfig.from_dict({**_ARCTIC_MIN, "arctic_inference": {"fca": False}})
    assert (fca_off.arctic_inference.enable, fca_off.arctic_inference.fca) == (True, False)
    logits = ArcticRLConfig.from_dict({**_ARCTIC_MIN, "zorro": {"logits_optimization": "compute"}})
    assert (logits.zorro.enable, logits.zorro.logits_optimization) == (True, "compute")


def test_reference_backend_runs_none_of_them_and_the_plan_says_so() -> None:
    cfg = ArcticRLConfig()
    assert (cfg.zorro.enable, cfg.kernels.use_liger, cfg.arctic_inference.enable) == (False, False, False)
    assert cfg.batch.micro_batch_size_per_gpu == 1
    assert cfg.plan()["no_cpu_meaning"] == [
        "zorro.enable (on by default with the Arctic backends)",
        "zorro.logits_optimization (on by default with the Arctic backends)",
        "kernels.use_liger (on by default with the Arctic backends)",
        "arctic_inference.enable (on by default with the Arctic backends)",
        "arctic_inference.fca (on by default with the Arctic backends)",
    ]
