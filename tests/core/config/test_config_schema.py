"""The schema itself: documented, strict, light to import, and embedding the reference model."""

from __future__ import annotations

import subprocess
import sys

import pytest
from arctic_rl_core.config import ArcticRLConfig, load_config
from arctic_rl_core.config.errors import all_leaf_paths, schema_paths
from arctic_rl_core.config.reference_model import ReferenceModelConfig
from pydantic import ValidationError

CORE_API_GROUPS = (
    "async",
    "backend",
    "placement",
    "batch",
    "optimizer",
    "loss",
    "deepspeed",
    "kernels",
    "zorro",
    "arctic_inference",
    "vllm",
    "weight_sync",
    "determinism",
    "checkpoint",
)


def test_every_field_is_documented_and_every_group_forbids_extras() -> None:
    groups = schema_paths(ArcticRLConfig)
    assert len(groups) >= 17
    for path, model in groups.items():
        assert model.model_config.get("extra") == "forbid", path
        assert model.__doc__ and model.__doc__.strip(), path
        for name, info in model.model_fields.items():
            assert info.description and len(info.description) > 8, f"{path}.{name}"


def test_groups_named_in_the_core_api() -> None:
    assert set(CORE_API_GROUPS) <= set(ArcticRLConfig.model_fields)
    assert "backend.reference" in schema_paths(ArcticRLConfig)
    assert ArcticRLConfig.model_fields["backend"].annotation.model_fields["reference"].annotation is (
        ReferenceModelConfig
    )


def test_loss_fields_the_wire_builder_reads() -> None:
    loss = ArcticRLConfig().loss
    assert (loss.loss_fn, loss.clip_ratio_low, loss.clip_ratio_high, loss.clip_ratio_c) == (
        "verl_grpo",
        0.2,
        0.2,
        3.0,
    )
    assert (loss.loss_agg_mode, loss.use_kl_loss, loss.kl_loss_type, loss.loss_scale_factor) == (
        "token-mean",
        False,
        "low_var_kl",
        None,
    )
    for kl_type in ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl", "k3+", "low_var_kl+"):
        assert load_config(None, [f"loss.kl_loss_type={kl_type}"]).loss.kl_loss_type == kl_type
    assert load_config(None, ["loss.loss_fn=sft"]).loss.loss_fn == "sft"


def test_leaf_paths_cover_the_knobs_of_the_legacy_integrations() -> None:
    paths = set(all_leaf_paths(ArcticRLConfig))
    legacy_knobs = {
        # SkyRL trainer.arctic_rl.* and the verl remote_backend yaml, by their names here
        "placement.colocate",
        "zorro.enable",
        "deepspeed.zero_stage",
        "placement.log_prob_gpus",
        "deepspeed.offload_optimizer",
        "deepspeed.offload_param",
        "kernels.use_liger",
        "kernels.attn_implementation",
        "kernels.gradient_checkpointing",
        "placement.ulysses_sequence_parallel_size",
        "zorro.logits_optimization",
        "zorro.logits_peak_mem_gib",
        "zorro.logits_compute_from_fp32_inputs",
        "zorro.logits_compute_in_fp32",
        "zorro.load_balancer",
        "zorro.max_rollouts",
        "determinism.full",
        "determinism.seed",
        "weight_sync.cuda_ipc",
        "weight_sync.low_memory",
        "deepspeed.autocast",
        "deepspeed.autocast_dtype",
        "wire.drop_position_ids",
        "optimizer.warmup_ratio",
        "optimizer.scheduler",
        "optimizer.betas",
        "optimizer.eps",
        "optimizer.weight_decay",
        "optimizer.grad_clip",
        "optimizer.min_lr_ratio",
        "optimizer.total_training_steps",
        "vllm.max_num_seqs",
        "vllm.enforce_eager",
        "vllm.enable_chunked_prefill",
        "vllm.enable_prefix_caching",
        "vllm.max_model_len",
        "vllm.max_num_batched_tokens",
        "vllm.gpu_memory_utilization",
        "vllm.engine_args",
        "arctic_inference.enable",
        "arctic_inference.fca",
        "arctic_inference.speculative_model",
        "arctic_inference.num_speculative_tokens",
        "arctic_inference.suffix_decoding",
        "backend.host",
        "backend.port",
        "backend.startup_timeout_s",
        "backend.kind",
        "placement.training_gpus",
        "placement.sampling_gpus",
        "placement.sampling_tensor_parallel_size",
        "batch.max_token_len_per_gpu",
        "checkpoint.path",
    }
    assert legacy_knobs <= paths, sorted(legacy_knobs - paths)


def test_config_is_frozen() -> None:
    cfg = ArcticRLConfig()
    with pytest.raises(ValidationError):
        cfg.batch.epochs = 3  # type: ignore[misc]


def test_placement_gives_the_data_parallel_size() -> None:
    cfg = load_config(None, ["placement.training_gpus=8", "placement.ulysses_sequence_parallel_size=2"])
    assert cfg.placement.data_parallel_size == 4 == cfg.shape.data_parallel_size


def test_importing_the_config_stays_light() -> None:
    code = (
        "import sys\n"
        "import arctic_rl_core.config as c\n"
        "c.load_config(None).plan()\n"
        "heavy = [m for m in ('torch', 'ray', 'vllm', 'transformers', 'arctic_platform', 'skyrl', 'verl')"
        " if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
