"""Invalid configurations: each is rejected with an error naming the field, the value and the fix."""

from __future__ import annotations

from typing import Any

import pytest
from arctic_rl_core.config import ArcticRLConfig, ConfigError
from arctic_rl_core.config.sources import apply_overrides

RAY: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3-0.6B"},
    "backend": {"kind": "ray"},
    "placement": {"training_gpus": 2, "sampling_gpus": 2},
    "batch": {
        "prompts_per_step": 64,
        "rollouts_per_prompt": 8,
        "mini_batch_prompts": 32,
        "micro_batch_size_per_gpu": 8,
        "max_prompt_length": 512,
        "max_response_length": 1024,
    },
    "checkpoint": {"path": "ckpt"},
}
CORTEX: dict[str, Any] = {
    **RAY,
    "backend": {
        "kind": "cortex",
        "cortex": {"host": "acct.example.com", "database": "DB", "schema_name": "S"},
    },
    "batch": {**RAY["batch"], "mini_batch_prompts": None},
    "kernels": {"attn_implementation": "sdpa"},
    "zorro": {"enable": False},  # ZoRRo (on by default) needs flash attention
}
REFERENCE: dict[str, Any] = {"backend": {"kind": "reference"}}

# (id, base, overrides, field path the error must name, text the remedy must contain)
CASES: list[tuple[str, dict[str, Any], list[str], str, str]] = [
    (
        "zero0-bf16-fp32-accum",
        RAY,
        ["deepspeed.zero_stage=0"],
        "deepspeed.zero_stage",
        "grad_accum_dtype=bf16",
    ),
    (
        "optimizer-offload-zero1",
        RAY,
        ["deepspeed.zero_stage=1", "deepspeed.offload_optimizer=true"],
        "deepspeed.offload_optimizer",
        "zero_stage to 2 or 3",
    ),
    ("param-offload-zero2", RAY, ["deepspeed.offload_param=true"], "deepspeed.offload_param", "zero_stage=3"),
    (
        "cuda-ipc-not-colocated",
        RAY,
        ["weight_sync.cuda_ipc=true"],
        "weight_sync.cuda_ipc",
        "placement.colocate=true",
    ),
    (
        "low-memory-without-ipc",
        RAY,
        ["weight_sync.low_memory=true"],
        "weight_sync.low_memory",
        "cuda_ipc=true",
    ),
    (
        "mini-batch-not-dividing",
        RAY,
        ["batch.mini_batch_prompts=24"],
        "batch.mini_batch_prompts",
        "divides prompts_per_step",
    ),
    (
        "rows-not-divisible-by-dp-x-micro",
        RAY,
        ["batch.micro_batch_size_per_gpu=3", "zorro.enable=false"],
        "batch.micro_batch_size_per_gpu",
        "divide evenly",
    ),
    (
        "sampling-gpus-not-divisible-by-tp",
        RAY,
        ["placement.sampling_tensor_parallel_size=4"],
        "placement.sampling_gpus",
        "multiple of sampling_tensor_parallel_size",
    ),
    (
        "training-gpus-not-divisible-by-ulysses",
        REFERENCE,
        ["placement.training_gpus=2", "placement.ulysses_sequence_parallel_size=4"],
        "placement.training_gpus",
        "multiple of ulysses_sequence_parallel_size",
    ),
    (
        "ulysses-on-an-arctic-backend",
        RAY,
        ["placement.ulysses_sequence_parallel_size=2"],
        "placement.ulysses_sequence_parallel_size",
        "ulysses_sequence_parallel_size=1",
    ),
    ("max-model-len-too-short", RAY, ["vllm.max_model_len=1000"], "vllm.max_model_len", ">= 1536"),
    (
        "speculative-model-without-arctic-inference",
        RAY,
        ["arctic_inference.enable=false", "arctic_inference.speculative_model=/models/draft"],
        "arctic_inference.speculative_model",
        "arctic_inference.enable=true",
    ),
    (
        "fca-without-arctic-inference",
        RAY,
        ["arctic_inference.enable=false", "arctic_inference.fca=true"],
        "arctic_inference.fca",
        "enable=true",
    ),
    (
        "memory-logits-without-zorro",
        RAY,
        ["zorro.enable=false", "zorro.logits_optimization=memory"],
        "zorro.logits_optimization",
        "zorro.enable=true",
    ),
    (
        "cortex-without-url-or-host",
        CORTEX,
        ["~backend.cortex.host"],
        "backend.cortex.base_url",
        "backend.cortex.host + database + schema_name",
    ),
    (
        "cortex-host-without-database",
        CORTEX,
        ["~backend.cortex.database"],
        "backend.cortex.database",
        "database",
    ),
    ("cortex-colocated", CORTEX, ["placement.colocate=true"], "placement.colocate", "colocate=false"),
    ("cortex-with-kl", CORTEX, ["loss.use_kl_loss=true"], "loss.use_kl_loss", "use_kl_loss=false"),
    (
        "cortex-arctic-inference",
        CORTEX,
        ["arctic_inference.enable=true"],
        "arctic_inference.enable",
        "remove arctic_inference.enable",
    ),
    (
        "cortex-export-hf",
        CORTEX,
        ["checkpoint.export_hf=true"],
        "checkpoint.export_hf",
        "remove checkpoint.export_hf",
    ),
    (
        "cortex-save-limit",
        CORTEX,
        ["checkpoint.save_total_limit=2"],
        "checkpoint.save_total_limit",
        "remove checkpoint.save_total_limit",
    ),
    ("cortex-sft", CORTEX, ["loss.loss_fn=sft"], "loss.loss_fn", "loss.loss_fn=verl_grpo"),
    (
        "cortex-log-prob-job",
        CORTEX,
        ["placement.log_prob_gpus=1"],
        "placement.log_prob_gpus",
        "log_prob_gpus=0",
    ),
    ("unknown-top-level-key", RAY, ["lr=0.1"], "lr", "optimizer.lr"),
    ("unknown-key-typo", RAY, ["batch.epoch=2"], "batch.epoch", "batch.epochs"),
    (
        "unknown-nested-key",
        CORTEX,
        ["backend.cortex.hots=x"],
        "backend.cortex.hots",
        "backend.cortex.host",
    ),
    ("framework-name", RAY, ["loss.eps_clip_low=0.1"], "loss.eps_clip_low", "loss.clip_ratio_low"),
    ("wrong-type-int", RAY, ["batch.epochs=abc"], "batch.epochs", "whole number"),
    ("wrong-type-bool", RAY, ["placement.colocate=maybe"], "placement.colocate", "true or false"),
    ("wrong-type-literal", RAY, ["loss.loss_agg_mode=mean"], "loss.loss_agg_mode", "'token-mean'"),
    ("out-of-range", RAY, ["optimizer.lr=0"], "optimizer.lr", "greater than 0"),
    (
        "engine-args-not-a-mapping",
        RAY,
        ["vllm.engine_args=[1,2]"],
        "vllm.engine_args",
        "mapping of vLLM engine argument names",
    ),
    (
        "engine-args-typed-key",
        RAY,
        ["vllm.engine_args.max_model_len=4096"],
        "vllm.engine_args.max_model_len",
        "vllm.max_model_len",
    ),
    (
        "clip-high-on-arctic",
        RAY,
        ["loss.clip_ratio_high=0.28"],
        "loss.clip_ratio_high",
        "loss_fn=arctic_rl_core",
    ),
    ("gspo-on-cortex", CORTEX, ["loss.policy_loss=gspo"], "loss.policy_loss", "loss.policy_loss=dual_clip"),
    ("dual-clip-on-http", RAY, ["backend.kind=http", "loss.clip_ratio_c=5"], "loss.clip_ratio_c", "=3.0"),
    (
        "scale-factor-without-norm-mode",
        REFERENCE,
        ["loss.loss_scale_factor=512"],
        "loss.loss_scale_factor",
        "seq-mean-token-sum-norm",
    ),
    (
        "scale-factor-on-arctic",
        RAY,
        ["loss.loss_agg_mode=seq-mean-token-sum-norm", "loss.loss_scale_factor=512"],
        "loss.loss_agg_mode",
        "loss.loss_fn=arctic_rl_core",
    ),
    (
        "builtin-is-dual-clip-only",
        REFERENCE,
        ["loss.policy_loss=gspo"],
        "loss.policy_loss",
        "loss.loss_fn=arctic_rl_core",
    ),
    (
        "builtin-has-no-token-sum",
        REFERENCE,
        ["loss.loss_agg_mode=token-sum"],
        "loss.loss_agg_mode",
        "arctic_rl_core",
    ),
    (
        "builtin-packs-sequences-on-arctic",
        RAY,
        ["loss.loss_agg_mode=seq-mean-token-mean"],
        "loss.loss_agg_mode",
        "loss.loss_fn=arctic_rl_core",
    ),
    (
        "core-loss-on-cortex",
        CORTEX,
        ["loss.loss_fn=arctic_rl_core", "loss.policy_loss=gspo"],
        "loss.loss_fn",
        "loss.loss_fn=verl_grpo",
    ),
    (
        "core-loss-on-http-without-the-package",
        RAY,
        ["backend.kind=http", "backend.server_has_arctic_rl_core=false", "loss.loss_fn=arctic_rl_core"],
        "loss.loss_fn",
        "install arctic-rl-losses",
    ),
    (
        "server-package-flag-off-http",
        RAY,
        ["backend.server_has_arctic_rl_core=false"],
        "backend.server_has_arctic_rl_core",
        "backend.kind=http",
    ),
    (
        "family-knob-of-another-family",
        RAY,
        ["loss.loss_fn=arctic_rl_core", "loss.policy_loss=gspo", "loss.tau_pos=2"],
        "loss.tau_pos",
        "loss.policy_loss=sapo",
    ),
    (
        "kl-without-log-prob-job",
        RAY,
        ["loss.use_kl_loss=true"],
        "placement.log_prob_gpus",
        "log_prob_gpus >= 1",
    ),
    (
        "log-prob-job-without-kl",
        RAY,
        ["placement.log_prob_gpus=2"],
        "placement.log_prob_gpus",
        "log_prob_gpus=0",
    ),
    ("arctic-without-model", RAY, ["~model.name"], "model.name", "set model.name"),
    ("arctic-without-checkpoint", RAY, ["~checkpoint.path"], "checkpoint.path", "set checkpoint.path"),
    (
        "zorro-without-flash-attention",
        RAY,
        ["zorro.enable=true", "kernels.attn_implementation=sdpa"],
        "kernels.attn_implementation",
        "flash_attention_2",
    ),
    (
        "zorro-partial-groups",
        RAY,
        ["zorro.enable=true", "batch.micro_batch_size_per_gpu=4"],
        "batch.micro_batch_size_per_gpu",
        "multiple of 8",
    ),
    (
        "token-budget-too-small",
        RAY,
        ["batch.max_token_len_per_gpu=4096"],
        "batch.max_token_len_per_gpu",
        ">= 8704",
    ),
    (
        "cosine-without-horizon",
        RAY,
        ["optimizer.scheduler=cosine"],
        "optimizer.total_training_steps",
        "total_training_steps",
    ),
    ("min-lr-ratio-on-constant", RAY, ["optimizer.min_lr_ratio=0.1"], "optimizer.min_lr_ratio", "cosine"),
    ("http-fields-on-ray", RAY, ["backend.port=7000"], "backend.port", "backend.kind=http"),
    (
        "reference-block-on-ray",
        RAY,
        ["backend.reference.num_layers=4"],
        "backend.reference",
        "kind=reference",
    ),
    (
        "deepspeed-override-of-computed-key",
        RAY,
        ["deepspeed.config_overrides.train_batch_size=64"],
        "deepspeed.config_overrides.train_batch_size",
        "batch.*",
    ),
    (
        "deepspeed-override-of-typed-zero-stage",
        RAY,
        ["deepspeed.config_overrides.zero_optimization.stage=3"],
        "deepspeed.config_overrides.zero_optimization.stage",
        "deepspeed.zero_stage",
    ),
    (
        "deepspeed-override-section-not-a-mapping",
        RAY,
        ["deepspeed.config_overrides.zero_optimization=3"],
        "deepspeed.config_overrides.zero_optimization",
        "key: value pairs",
    ),
    (
        "zorro-max-rollouts-too-large",
        RAY,
        ["zorro.max_rollouts=16", "~batch.micro_batch_size_per_gpu"],
        "zorro.max_rollouts",
        "<= 8",
    ),
    (
        "zorro-default-micro-batch-splits-groups",
        RAY,
        ["batch.micro_batch_size_per_gpu=4"],
        "batch.micro_batch_size_per_gpu",
        "multiple of 8",
    ),
    (
        "reference-model-too-short",
        REFERENCE,
        ["batch.max_prompt_length=4000", "batch.max_response_length=1000"],
        "backend.reference.max_position_embeddings",
        ">= 5000",
    ),
    (
        "speculative-tokens-without-speculation",
        RAY,
        ["arctic_inference.num_speculative_tokens=5"],
        "arctic_inference.num_speculative_tokens",
        "speculative_model",
    ),
    (
        "reference-model-heads",
        REFERENCE,
        ["backend.reference.hidden_size=66"],
        "backend.reference",
        "change the value",
    ),
    ("beta-out-of-range", RAY, ["optimizer.betas=[0.9,1.5]"], "optimizer.betas.1", "0.999"),
    (
        "bf16-accum-without-bf16",
        RAY,
        ["deepspeed.bf16=false", "deepspeed.grad_accum_dtype=bf16"],
        "deepspeed.grad_accum_dtype",
        "grad_accum_dtype=fp32",
    ),
    (
        "rl-without-sampling",
        RAY,
        ["placement.sampling_gpus=0"],
        "placement.sampling_gpus",
        "sampling_gpus >= 1",
    ),
]


def _validate(base: dict[str, Any], overrides: list[str]) -> ArcticRLConfig:
    return ArcticRLConfig.from_dict(apply_overrides(base, overrides))


def test_the_bases_are_valid() -> None:
    for base in (RAY, CORTEX, REFERENCE):
        _validate(base, [])


def test_the_table_is_large_and_names_distinct_fields() -> None:
    assert len(CASES) >= 25
    assert len({case[0] for case in CASES}) == len(CASES)
    assert len({case[3] for case in CASES}) >= 35


@pytest.mark.parametrize(
    ("base", "overrides", "path", "remedy"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_invalid_config_names_field_and_remedy(
    base: dict[str, Any], overrides: list[str], path: str, remedy: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _validate(base, overrides)
    matching = [issue for issue in caught.value.issues if issue.path == path]
    assert matching, f"no issue for {path}: {caught.value}"
    assert any(remedy in issue.remedy for issue in matching), f"remedy lacks {remedy!r}: {caught.value}"
    message = str(caught.value)
    assert path in message and remedy in message
    # The case triggers its own problem only: a table row that trips several rules would hide one.
    assert len(caught.value.issues) == 1, str(caught.value)


def test_every_problem_is_reported_at_once() -> None:
    overrides = [
        "deepspeed.zero_stage=0",
        "weight_sync.cuda_ipc=true",
        "loss.clip_ratio_high=0.3",
        "batch.epoch=2",  # unknown key: a field-level error...
        "batch.epochs=zero",  # ... and a type error
    ]
    with pytest.raises(ConfigError) as caught:
        _validate(RAY, overrides)
    paths = {issue.path for issue in caught.value.issues}
    # field-level errors and the cross-field rules, in one report
    assert paths == {
        "batch.epoch",
        "batch.epochs",
        "deepspeed.zero_stage",
        "weight_sync.cuda_ipc",
        "loss.clip_ratio_high",
    }
    assert str(caught.value).startswith("5 problems in the configuration")


def test_the_value_is_shown_as_written() -> None:
    with pytest.raises(ConfigError) as caught:
        _validate(RAY, ["weight_sync.cuda_ipc=true", "batch.epochs=abc"])
    rendered = {issue.path: issue.render() for issue in caught.value.issues}
    assert rendered["batch.epochs"].startswith('batch.epochs = "abc": ')
    # Cross-field rules still run past the type error of batch.epochs.
    assert rendered["weight_sync.cuda_ipc"].startswith("weight_sync.cuda_ipc = true: ")


def test_core_loss_on_ray_honours_every_family_setting() -> None:
    """With loss_fn=arctic_rl_core the server computes what is sent: DAPO's clip-higher, sequence
    modes, token-sum and a family's own knobs validate on an Arctic backend."""
    cfg = _validate(
        RAY,
        [
            "loss.loss_fn=arctic_rl_core",
            "loss.policy_loss=sapo",
            "loss.clip_ratio_high=0.28",
            "loss.loss_agg_mode=seq-mean-token-sum-norm",
            "loss.loss_scale_factor=512",
            "loss.tau_pos=2",
        ],
    )
    assert cfg.server_loss_fn == "arctic_rl_losses.server.policy_loss"
    assert cfg.loss.family_params() == {"tau_pos": 2.0}
    assert _validate(RAY, ["loss.loss_fn=arctic_rl_core", "loss.loss_agg_mode=token-sum"]).server_imports_core


def test_reference_backend_honours_any_clip_ratio() -> None:
    cfg = _validate(
        REFERENCE, ["loss.clip_ratio_low=0.1", "loss.clip_ratio_high=0.28", "loss.clip_ratio_c=10"]
    )
    assert (cfg.loss.clip_ratio_low, cfg.loss.clip_ratio_high, cfg.loss.clip_ratio_c) == (0.1, 0.28, 10.0)
    norm = _validate(REFERENCE, ["loss.loss_agg_mode=seq-mean-token-sum-norm", "loss.loss_scale_factor=512"])
    assert norm.loss.loss_scale_factor == 512.0


def test_direct_construction_also_rejects() -> None:
    with pytest.raises(ValueError, match=r"weight_sync\.cuda_ipc"):
        ArcticRLConfig.model_validate(apply_overrides(RAY, ["weight_sync.cuda_ipc=true"]))


def test_cortex_honours_clip_ratios_and_several_updates_per_batch() -> None:
    """Cortex's grpo loss takes eps_clip / eps_clip_higher / c_clip, and its old log-probs are the
    sampler's (not recomputed from the live policy), so several epochs / mini-batches are sound."""
    cfg = ArcticRLConfig.from_dict(
        apply_overrides(
            CORTEX,
            [
                "loss.clip_ratio_low=0.1",
                "loss.clip_ratio_high=0.28",
                "batch.epochs=2",
                "batch.mini_batch_prompts=32",
            ],
        )
    )
    assert (cfg.loss.clip_ratio_low, cfg.loss.clip_ratio_high, cfg.batch.epochs) == (0.1, 0.28, 2)


def test_cortex_defaults_leave_out_what_its_bodies_cannot_carry() -> None:
    """ZoRRo and Arctic Inference default off on Cortex (on with ray/http); Liger stays on."""
    base = {key: value for key, value in CORTEX.items() if key != "zorro"}
    cortex = ArcticRLConfig.from_dict(base)
    ray = ArcticRLConfig.from_dict(
        {**{k: v for k, v in base.items() if k != "kernels"}, "backend": {"kind": "ray"}}
    )
    assert (cortex.zorro.enable, cortex.arctic_inference.enable, cortex.kernels.use_liger) == (
        False,
        False,
        True,
    )
    assert (ray.zorro.enable, ray.arctic_inference.enable) == (True, True)


# A framework's own config (dotted paths, groups and leaves), as the adapters name misspelt keys in it.
FRAMEWORK_PATHS = [
    "trainer", "trainer.policy", "trainer.policy.optimizer_config", "trainer.policy.optimizer_config.lr",
    "trainer.policy.optimizer_config.num_warmup_steps", "trainer.train_batch_size", "trainer.epochs",
    "generator", "generator.inference_engine", "generator.inference_engine.num_engines",
    "generator.inference_engine.tensor_parallel_size", "generator.n_samples_per_prompt",
]  # fmt: skip


@pytest.mark.parametrize(
    ("group", "key", "remedy"),
    [
        # a close name in the same group
        ("trainer", "train_bacth_size", "did you mean 'trainer.train_batch_size'? Remove or rename the key"),
        # the same name in another group
        ("generator", "num_engines", "'num_engines' lives at 'generator.inference_engine.num_engines'; move it there"),
        # a close leaf name anywhere else
        ("trainer", "num_warmup_step",
         "did you mean 'trainer.policy.optimizer_config.num_warmup_steps'? Remove or rename the key"),
        # nothing close: the valid keys of the group
        ("generator.inference_engine", "zzz", "remove it; valid keys here are: num_engines, tensor_parallel_size"),
    ],
)  # fmt: skip
def test_suggest_key_among_a_frameworks_own_paths(group: str, key: str, remedy: str) -> None:
    from arctic_rl_core.config.errors import suggest_key_among

    assert suggest_key_among(FRAMEWORK_PATHS, group, key) == remedy


def test_the_core_schema_keeps_its_suggestions() -> None:
    from arctic_rl_core.config.errors import suggest_key

    assert (
        suggest_key(ArcticRLConfig, "zorro", "enabel")
        == "did you mean 'zorro.enable'? Remove or rename the key"
    )
    assert (
        suggest_key(ArcticRLConfig, "", "rollout_n")
        == "this knob is 'batch.rollouts_per_prompt' here; move it there"
    )
    assert suggest_key(ArcticRLConfig, "batch", "lr") == "'lr' lives at 'optimizer.lr'; move it there"
