"""The SkyRL field table covers the installed SkyRL 0.4.0: every leaf of `SkyRLTrainConfig` (walked with
`dataclasses.fields`) is classified, no entry names a field SkyRL no longer has, and the README's
mapping and legacy-key tables are the ones the code generates."""

from __future__ import annotations

from pathlib import Path

from adapter_skyrl import field_table, field_transforms
from adapter_skyrl.legacy_keys import LEGACY_KEYS
from arctic_rl_core.config.framework_fields import marked_section
from field_table_checks import assert_functions_are_named_transforms
from skyrl.train.config import SkyRLTrainConfig

README = Path(__file__).resolve().parents[2] / "packages" / "adapter-skyrl" / "README.md"


def test_every_leaf_of_the_installed_skyrl_config_is_classified():
    from adapter_skyrl.config import ArcticSkyRLConfig
    from adapter_skyrl.dapo import DAPO_FIELDS, ArcticDAPOConfig

    skyrl = list(field_table.leaves(SkyRLTrainConfig()))
    assert len(skyrl) > 350  # the whole tree, not a truncated walk
    ours = list(
        field_table.leaves(ArcticSkyRLConfig())
    )  # SkyRL's tree plus trainer.arctic_rl / arctic_trace_path
    assert set(skyrl) < set(ours)
    # the DAPO entry point's config: ours plus the two fields of SkyRL's DAPO example
    dapo = list(field_table.leaves(ArcticDAPOConfig()))
    assert set(dapo) - set(ours) == set(DAPO_FIELDS)
    field_table.TABLE.check_complete(dapo)
    assert field_table.TABLE.unclassified(skyrl) == []


def test_the_issue_fields_are_mapped_not_dropped():
    mapped = {
        "trainer.placement.policy_num_gpus_per_node": "placement.training_gpus",
        "trainer.placement.policy_num_nodes": "placement.training_gpus",
        "generator.inference_engine.num_engines": "placement.sampling_gpus",
        "trainer.placement.colocate_all": "placement.colocate",
        "generator.inference_engine.gpu_memory_utilization": "vllm.gpu_memory_utilization",
        "generator.inference_engine.max_num_seqs": "vllm.max_num_seqs",
        "generator.inference_engine.enable_prefix_caching": "vllm.enable_prefix_caching",
        "generator.inference_engine.max_num_batched_tokens": "vllm.max_num_batched_tokens",
        "generator.inference_engine.enforce_eager": "vllm.enforce_eager",
        "trainer.flash_attn": "kernels.attn_implementation",
        "trainer.gradient_checkpointing": "kernels.gradient_checkpointing",
        "trainer.policy.fsdp_config.cpu_offload": "deepspeed.offload_optimizer",
        "trainer.policy.sequence_parallel_size": "placement.ulysses_sequence_parallel_size",
        "trainer.max_tokens_per_microbatch": "batch.max_token_len_per_gpu",
        "trainer.seed": "determinism.seed",
        "trainer.ckpt_path": "checkpoint.path",
        "trainer.algorithm.use_kl_in_reward": "loss.use_kl_in_reward",
        "trainer.max_ckpts_to_keep": "checkpoint.save_total_limit",
    }
    for skyrl, core in mapped.items():
        assert field_table.TABLE.kind_of(skyrl) == "mapped", skyrl
        assert skyrl in field_table.TABLE.sources_of(core), (skyrl, core)


def test_readme_tables_are_generated_from_the_code():
    text = README.read_text(encoding="utf-8")
    assert marked_section(text, "skyrl-fields") == field_table.TABLE.markdown()
    assert marked_section(text, "skyrl-legacy-keys") == LEGACY_KEYS.markdown()


def test_the_table_calls_only_named_transforms():
    assert_functions_are_named_transforms(field_table.TABLE, field_transforms)
