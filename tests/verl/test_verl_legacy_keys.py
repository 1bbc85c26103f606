"""Arctic-Platform's verl launchers with only the entry point changed: every `remote_backend.*` key
is translated with a notice, the one setting each launcher gets wrong for the 0.1.4 server is the
one problem reported, and with it fixed the plan equals what the legacy integration sends
(`arctic_platform/integrations/verl/adapter.py` `_initialize_client`), but for the differences the
README's "Coming from Arctic's verl integration" table explains."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


# The override lists of Arctic-Platform's two verl launchers (`arctic_platform/integrations/verl/
# examples/run_bird_grpo_arl.sh`, `run_gsm8k_grpo_arl.sh` in its repository) as they pass them on a
# machine without an H200 (`flash_attention_v=flash_attention_2`); DATA_DIR and the config directory
# are arguments. Only the entry point changes: `python -m adapter_verl.main`.


def bird(config_dir: str, data_dir: str) -> list[str]:
    return [
        f"hydra.searchpath=[file://{config_dir}]",
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=True",
        "algorithm.use_kl_in_reward=False",
        "algorithm.kl_ctrl.kl_coef=0.001",
        f"data.train_files={data_dir}/train.parquet",
        f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=8",
        "data.max_prompt_length=4096",
        "data.max_response_length=2048",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        "data.shuffle=False",
        "+data.seed=42",
        "actor_rollout_ref.actor.data_loader_seed=42",
        "reward.num_workers=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.model.path=Qwen/Qwen3-0.6B",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.name=arctic",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "actor_rollout_ref.rollout.enforce_eager=True",
        "actor_rollout_ref.rollout.n=16",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.ref.fsdp_config.param_offload=False",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "trainer.use_legacy_worker_impl=disable",
        "trainer.remote_backend=arctic",
        "remote_backend=arctic",
        "remote_backend.colocate=True",
        "remote_backend.training_gpus=1",
        "remote_backend.sampling_gpus=1",
        "remote_backend.log_prob_gpus=0",
        "remote_backend.train.deepspeed.zero_optimization.stage=2",
        "remote_backend.train.deepspeed.zero_optimization.offload_optimizer.device=none",
        "remote_backend.train.deepspeed.zero_optimization.offload_param.device=none",
        "remote_backend.train.zorro_train.enable=True",
        "remote_backend.weight_sync.cuda_ipc=True",
        "trainer.critic_warmup=0",
        "trainer.logger=['console']",
        "trainer.experiment_name=bird_grpo_qwen3_0p6b_ngpu1_gbs8_rolln16_zorroTrue",
        "trainer.project_name=arctic_rl_bird_arctic_platform",
        "trainer.val_before_train=True",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.save_freq=-1",
        "trainer.test_freq=4",
        "trainer.total_training_steps=4",
        "trainer.total_epochs=1",
    ]


def gsm8k(config_dir: str, data_dir: str) -> list[str]:
    return [
        f"hydra.searchpath=[file://{config_dir}]",
        "algorithm.adv_estimator=grpo",
        f"data.train_files={data_dir}/train.parquet",
        f"data.val_files={data_dir}/test.parquet",
        "data.train_batch_size=16",
        "data.max_prompt_length=512",
        "data.max_response_length=1024",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        "data.shuffle=False",
        "+data.seed=42",
        "actor_rollout_ref.actor.data_loader_seed=42",
        "reward.num_workers=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.model.path=Qwen/Qwen3-0.6B",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.name=arctic",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "actor_rollout_ref.rollout.enforce_eager=True",
        "actor_rollout_ref.rollout.n=5",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.ref.fsdp_config.param_offload=False",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "algorithm.use_kl_in_reward=False",
        "trainer.use_legacy_worker_impl=disable",
        "trainer.remote_backend=arctic",
        "remote_backend=arctic",
        "remote_backend.colocate=False",
        "remote_backend.training_gpus=1",
        "remote_backend.sampling_gpus=1",
        "remote_backend.log_prob_gpus=0",
        "remote_backend.train.deepspeed.zero_optimization.stage=2",
        "remote_backend.train.deepspeed.zero_optimization.offload_optimizer.device=none",
        "remote_backend.train.deepspeed.zero_optimization.offload_param.device=none",
        "remote_backend.train.zorro_train.enable=True",
        "remote_backend.weight_sync.cuda_ipc=False",
        "trainer.critic_warmup=0",
        "trainer.logger=['console']",
        "trainer.experiment_name=gsm8k_grpo_qwen3_0p6b_ngpu1_gbs16_rolln5_zorroTrue",
        "trainer.project_name=arctic_rl_gsm8k_arctic_platform",
        "trainer.val_before_train=False",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "trainer.total_training_steps=80",
        "trainer.total_epochs=15",
    ]


LAUNCHERS = {"bird": bird, "gsm8k": gsm8k}


def dry_run(capsys, argv: list[str]) -> tuple[int, str, str]:
    from adapter_verl.main import main

    with pytest.raises(SystemExit) as info:
        main(["--dry-run", *argv])
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def problems_of(err: str) -> list[str]:
    return [line[4:] for line in err.splitlines() if line.startswith("  - ")]


# What the legacy integration's `_initialize_client` builds from each launcher (read from its source): the
# client config fields, by dotted path. `checkpoint_path` is verl's trainer.default_local_dir as is.
LEGACY_CLIENT_FIELDS = {
    "bird": {
        "model_name": "Qwen/Qwen3-0.6B",
        "seed": 42,
        "max_seq_len": 6144,
        "training_gpus": 1,
        "sampling_gpus": 1,
        "log_prob_gpus": 0,
        "backend.protocol": "ray",
        "backend.colocate": True,
        "training.full_determinism": False,
        "training.checkpoint_path": "checkpoints/arctic_rl_bird_arctic_platform/"
        "bird_grpo_qwen3_0p6b_ngpu1_gbs8_rolln16_zorroTrue",
        "training.cuda_ipc": True,
        "training.low_memory": False,
        "training.ds_config.train_micro_batch_size_per_gpu": 16,
        "training.ds_config.train_batch_size": 128,
        "training.ds_config.gradient_accumulation_steps": 8,
        "training.ds_config.sequence_parallel_size": 1,
        "training.ds_config.zero_optimization.stage": 2,
        "training.ds_config.optimizer": {
            "type": "AdamW",
            "params": {"lr": 1e-6, "weight_decay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8},
        },
        "training.ds_config.gradient_clipping": 1.0,
        # the rest of its remote_backend.train.deepspeed block (arctic.yaml), passed through as is
        "training.ds_config.zero_optimization.offload_optimizer.device": "none",
        "training.ds_config.zero_optimization.offload_param.device": "none",
        "training.ds_config.log_level": "INFO",
        "training.ds_worker_config.use_liger": False,
        "training.ds_worker_config.enable_gradient_checkpointing": True,
        "training.ds_worker_config.attn_implementation": "flash_attention_2",
        "training.ds_worker_config.zorro_train_enable": True,
        "training.ds_worker_config.response_len": 2048,
        "training.ds_worker_config.max_token_len": 16384,
        "training.ds_worker_config.rollout_n": 16,
        "training.ds_worker_config.temperature": 1.0,
        "training.ds_worker_config.use_unpad": True,
        "training.ds_worker_config.logits_optimization": "none",
        "training.ds_worker_config.logits_optimization_peak_mem_size_in_gib": 4,
        "training.ds_worker_config.logits_compute_from_fp32_inputs": False,
        "training.ds_worker_config.logits_compute_in_fp32": False,
        "sampling.vllm.tensor_parallel_size": 1,
        "sampling.vllm.gpu_memory_utilization": 0.6,
        "sampling.vllm.max_model_len": 6144,
        "sampling.vllm.max_num_seqs": 256,
        "sampling.vllm.enforce_eager": True,
        "sampling.vllm.enable_chunked_prefill": True,
        "sampling.arctic_inference_config": {
            "zorro_inference": {"enable": False},
            "speculative_decoding": {"model": ""},
        },
        "sampling.log_prob_engine": "deepspeed",
        "sampling.log_prob_ds_config": None,
        # what 0.1.4's ArcticRLClientConfig / OnPremConfig fill in for fields it does not set
        "job_ready_timeout": 1800.0,
        "request_timeout": 1800.0,
        "backend.type": "onprem",
    },
}
LEGACY_CLIENT_FIELDS["gsm8k"] = {
    **LEGACY_CLIENT_FIELDS["bird"],
    "max_seq_len": 1536,
    "backend.colocate": False,
    "training.checkpoint_path": "checkpoints/arctic_rl_gsm8k_arctic_platform/"
    "gsm8k_grpo_qwen3_0p6b_ngpu1_gbs16_rolln5_zorroTrue",
    "training.cuda_ipc": False,
    "training.ds_config.train_micro_batch_size_per_gpu": 16,
    "training.ds_config.train_batch_size": 80,
    "training.ds_config.gradient_accumulation_steps": 5,
    "training.ds_config.scheduler": None,
    "training.ds_worker_config.response_len": 1024,
    "training.ds_worker_config.rollout_n": 5,
    "sampling.vllm.max_model_len": 1536,
}
del LEGACY_CLIENT_FIELDS["gsm8k"]["training.ds_config.scheduler"]

# The one problem each launcher has on the 0.1.4 server, and its fix (README table).
FIXES = {
    "bird": (
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu / actor_rollout_ref.actor.ulysses_sequence_parallel_size / "
        "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size (core batch.max_token_len_per_gpu) = "
        "16384: a prompt group needs up to max_prompt_length + 16 x max_response_length = 36864",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=36864",
    ),
    "gsm8k": (
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu / actor_rollout_ref.actor.use_dynamic_bsz (core "
        "batch.micro_batch_size_per_gpu) = 16: with ZoRRo a micro-batch must hold whole prompt groups of 5 rollouts",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=20",
    ),
}
MISSING = "(not sent)"
# Where our plan differs from the legacy integration's, by field: the first cell of the README table's row that
# says why, and what ours must be. Fields only our plan sends are compared with "not sent".
DIFFERENCES = {
    "training.checkpoint_path": (
        "`checkpoint_path`",
        lambda ours, theirs: ours == str(Path(theirs).resolve()),
    ),
    "training.ds_worker_config.max_token_len": ("`max_token_len` (BIRD)", lambda ours, theirs: ours == 36864),
    "training.ds_config.train_micro_batch_size_per_gpu": (
        "`train_micro_batch_size_per_gpu`, `gradient_accumulation_steps` (GSM8K)",
        lambda ours, theirs: ours == 20,
    ),
    "training.ds_config.gradient_accumulation_steps": (
        "`train_micro_batch_size_per_gpu`, `gradient_accumulation_steps` (GSM8K)",
        lambda ours, theirs: ours == 4,
    ),
    "sampling.arctic_inference_config": (
        "`arctic_inference_config`",
        lambda ours, theirs: ours["zorro_inference"]["enable"] is True,
    ),
    "sampling.vllm.forest_cascade_attn_configs": ("`arctic_inference_config`", lambda ours, _: ours == "{}"),
    "sampling.vllm.compilation_config.cudagraph_mode": (
        "`arctic_inference_config`",
        lambda ours, theirs: ours == "PIECEWISE",
    ),
    "training.ds_worker_config.logits_optimization": (
        "`logits_optimization`",
        lambda ours, _: ours == "memory",
    ),
    "training.ds_worker_config.use_liger": ("`use_liger`", lambda ours, theirs: ours is True),
    "training.ds_config.zero_optimization.offload_optimizer.device": (
        "`offload_optimizer` / `offload_param`",
        lambda ours, theirs: (theirs, ours) == ("none", MISSING),
    ),
    "training.ds_config.zero_optimization.offload_param.device": (
        "`offload_optimizer` / `offload_param`",
        lambda ours, theirs: (theirs, ours) == ("none", MISSING),
    ),
    "training.ds_config.log_level": ("`log_level`", lambda ours, theirs: ours == MISSING),
    "training.ds_config.optimizer": (
        "`optimizer.params.torch_adam`",
        lambda ours, theirs: (
            ours["params"].get("torch_adam") is True
            and {**ours, "params": {k: v for k, v in ours["params"].items() if k != "torch_adam"}} == theirs
        ),
    ),
    **{
        f"training.ds_config.{key}": (
            "`torch_autocast`, `data_types`",
            lambda ours, theirs, v=value: ours == v,
        )
        for key, value in (
            ("bf16.enabled", True),
            ("torch_autocast.enabled", False),
            ("data_types.grad_accum_dtype", "fp32"),
            ("communication_data_type", "fp32"),
        )
    },
    "training.ds_worker_config.use_autocast": (
        "`torch_autocast`, `data_types`",
        lambda ours, _: ours is False,
    ),
    "sampling.vllm.logprobs_mode": (
        "`logprobs_mode`",
        lambda ours, theirs: (theirs, ours) == (MISSING, "processed_logprobs"),
    ),
    "sampling.vllm.enable_prefix_caching": (
        "`enable_prefix_caching`, `max_num_batched_tokens`",
        lambda o, _: o,
    ),
    "sampling.vllm.max_num_batched_tokens": (
        "`enable_prefix_caching`, `max_num_batched_tokens`",
        lambda ours, theirs: ours == 8192,
    ),
}


def _leaves(data, prefix: str = ""):
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], data


def _get(data: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return MISSING
        data = data[part]
    return data


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("legacy") / "config")


@pytest.mark.parametrize("launcher", ["bird", "gsm8k"])
def test_legacy_launcher_dry_run(launcher, capsys, config_dir, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    argv = LAUNCHERS[launcher](config_dir, "/data")
    # as shipped: every remote_backend key translated, exactly one problem, the 0.1.4 server's
    code, out, err = dry_run(capsys, argv)
    assert code == 2 and out == ""
    problem, fix = FIXES[launcher]
    (only,) = problems_of(err)
    assert only.startswith(problem), only
    for key in (o.split("=")[0] for o in argv if o.startswith("remote_backend.")):
        assert f"adapter_verl: {key}=" in err, key
    assert "trainer.remote_backend=arctic: dropped" in err and "+data.seed: data.seed already exists" in err

    code, out, err = dry_run(capsys, [*argv, fix])
    assert code == 0, err
    client = yaml.safe_load(out.partition("Arctic RL run settings")[0])["plan"]["client"]
    theirs_all = LEGACY_CLIENT_FIELDS[launcher]
    differing = {}
    for path, theirs in theirs_all.items():
        ours = _get(client, path)
        if ours != theirs:
            differing[path] = (ours, theirs)
    for path, ours in _leaves(client):  # and every field only our plan sends
        if not any(path == p or path.startswith(p + ".") for p in theirs_all):
            differing[path] = (ours, MISSING)
    assert "training.checkpoint_path" in differing
    unexplained = {path: v for path, v in differing.items() if path not in DIFFERENCES}
    assert not unexplained, unexplained
    for path, (ours, theirs) in differing.items():
        assert DIFFERENCES[path][1](ours, theirs), (path, ours, theirs)
    readme = (REPO / "packages" / "adapter-verl" / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Coming from Arctic's verl integration") :]
    section = section[: section.index("## The verl mapping table")]
    for path in differing:
        assert f"| {DIFFERENCES[path][0]} |" in section, path


def test_legacy_keys_are_all_translated_or_named(capsys):
    """Every key of the legacy integration's `remote_backend/arctic.yaml` has a translation; a key it never
    had is rejected naming where core settings go."""
    from adapter_verl.legacy_keys import ALIASES, GPU_COUNTS, translate

    legacy_keys = {
        "colocate", "training_gpus", "sampling_gpus", "log_prob_gpus", "sampling_tp_size",
        "weight_sync.cuda_ipc", "weight_sync.low_memory", "train.load_balancer", "train.zorro_train.enable",
        "train.zorro_train.max_rollouts", "train.logits.optimization",
        "train.logits.optimization_peak_mem_size_in_gib", "train.logits.compute_in_fp32",
        "train.logits.compute_from_fp32_inputs", "train.determinism.full", "train.determinism.seed",
        "train.deepspeed.zero_optimization.stage", "train.deepspeed.zero_optimization.offload_optimizer.device",
        "train.deepspeed.zero_optimization.offload_param.device", "rollout.zorro_inference.enable",
        "rollout.speculative_decoding.model", "comms.protocol", "comms.drop_position_ids",
    }  # fmt: skip
    assert legacy_keys == set(ALIASES) | set(GPU_COUNTS)
    out = translate(
        [
            "remote_backend.train.deepspeed.log_level=INFO",
            "remote_backend.rollout.zorro_inference.enable=True",
            "remote_backend.rollout.speculative_decoding.model=org/spec",
            "remote_backend.train.zorro_train.max_rollouts=${actor_rollout_ref.rollout.n}",
            "remote_backend.comms.protocol=http",
            "remote_backend.zorro=on",
            "remote_backend.train.deepspeed.zero_optimization.offload_param.device=nvme",
        ]
    )
    assert out.overrides == [
        "++remote_backend.core.deepspeed.config_overrides.log_level=INFO",
        "++remote_backend.core.arctic_inference.fca=true",
        "++remote_backend.core.arctic_inference.enable=true",
        "++remote_backend.core.arctic_inference.speculative_model=org/spec",
        "++remote_backend.core.arctic_inference.enable=true",
    ]
    assert len(out.problems) == 3
    assert "launch_local_server=true" in out.problems[0] and "port=7000" in out.problems[0]
    assert out.problems[1].startswith(
        "remote_backend.zorro=on: not a key of Arctic-Platform's verl integration"
    )
    assert "device must be none or cpu" in out.problems[2]
