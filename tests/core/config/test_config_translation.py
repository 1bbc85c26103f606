"""Translation pinned for the four scenarios of issue 3, checked against the real arctic-platform
0.1.4 client config (installed in the core environment)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from arctic_rl_core.config import ArcticRLConfig, ConfigError, load_config
from arctic_rl_core.config.engine_args import build_engine_args, deep_merge

CONFIGS = Path(__file__).resolve().parents[3] / "recipes" / "configs"

PRECISION = {
    "bf16": {"enabled": True},
    "data_types": {"grad_accum_dtype": "fp32"},
    "communication_data_type": "fp32",
    "torch_autocast": {"enabled": False},
}

GSM8K_CLIENT: dict[str, Any] = {
    "model_name": "Qwen/Qwen3-0.6B",
    "seed": 42,
    "max_seq_len": 1536,
    "training_gpus": 2,
    "sampling_gpus": 2,
    "log_prob_gpus": 0,
    "job_ready_timeout": 1800.0,
    "request_timeout": 1800.0,
    "training": {
        "full_determinism": False,
        "checkpoint_path": "checkpoints/gsm8k-qwen3-0.6b",
        "ds_config": {
            # 32 prompts x 8 rollouts = 256 rows = micro 8 x grad-accum 16 x data-parallel 2
            "train_batch_size": 256,
            "train_micro_batch_size_per_gpu": 8,
            "gradient_accumulation_steps": 16,
            "sequence_parallel_size": 1,
            "gradient_clipping": 1.0,
            "optimizer": {
                "type": "AdamW",
                "params": {
                    "lr": 1e-6,
                    "betas": [0.9, 0.999],
                    "eps": 1e-8,
                    "weight_decay": 0.01,
                    "torch_adam": True,
                },
            },
            **PRECISION,
            "zero_optimization": {"stage": 2},
        },
        # ZoRRo with memory-lean logits: the legacy integrations' default on the Arctic backends
        "ds_worker_config": {
            "attn_implementation": "flash_attention_2",
            "use_liger": True,
            "enable_gradient_checkpointing": True,
            "use_autocast": False,
            "zorro_train_enable": True,
            "response_len": 1024,
            "max_token_len": 512 + 8 * 1024,
            "rollout_n": 8,
            "temperature": 1.0,
            "use_unpad": True,
            "logits_optimization": "memory",
            "logits_optimization_peak_mem_size_in_gib": 4.0,
            "logits_compute_from_fp32_inputs": False,
            "logits_compute_in_fp32": False,
        },
        "cuda_ipc": False,
        "low_memory": False,
    },
    "sampling": {
        # Arctic Inference with FCA: the legacy integrations' default on the Arctic backends
        "vllm": {
            "tensor_parallel_size": 1,
            "gpu_memory_utilization": 0.85,
            "max_model_len": 1536,
            "max_num_seqs": 256,
            "enforce_eager": False,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": True,
            "logprobs_mode": "processed_logprobs",
            "forest_cascade_attn_configs": "{}",
            "compilation_config": {
                "cudagraph_mode": "PIECEWISE",
                "pass_config": {"fuse_allreduce_rms": False},
            },
        },
        "arctic_inference_config": {
            "zorro_inference": {"enable": True},
            "speculative_decoding": {"model": ""},
        },
        "log_prob_engine": "deepspeed",
        "log_prob_ds_config": None,
    },
    "backend": {"type": "onprem", "protocol": "ray", "colocate": False},
}

COLOCATED_CLIENT: dict[str, Any] = {
    "model_name": "Qwen/Qwen3-8B",
    "seed": 42,
    "max_seq_len": 3072,
    "training_gpus": 8,
    "sampling_gpus": 8,
    "log_prob_gpus": 8,
    "job_ready_timeout": 1800.0,
    "request_timeout": 1800.0,
    "training": {
        "full_determinism": False,
        "checkpoint_path": "checkpoints/colocated-8gpu",
        "ds_config": {
            # 32 prompts x 8 rollouts = 256 rows = micro 8 x grad-accum 4 x data-parallel 8
            "train_batch_size": 256,
            "train_micro_batch_size_per_gpu": 8,
            "gradient_accumulation_steps": 4,
            "sequence_parallel_size": 1,
            "gradient_clipping": 1.0,
            "optimizer": {
                "type": "AdamW",
                "params": {
                    "lr": 1e-6,
                    "betas": [0.9, 0.95],
                    "eps": 1e-8,
                    "weight_decay": 0.0,
                    "torch_adam": True,
                },
            },
            **PRECISION,
            "zero_optimization": {"stage": 3},
        },
        "ds_worker_config": {
            "attn_implementation": "flash_attention_2",
            "use_liger": True,
            "enable_gradient_checkpointing": True,
            "use_autocast": False,
            "zorro_train_enable": True,
            "response_len": 2048,
            "max_token_len": 1024 + 8 * 2048,
            "rollout_n": 8,
            "temperature": 1.0,
            "use_unpad": True,
            "logits_optimization": "memory",
            "logits_optimization_peak_mem_size_in_gib": 4.0,
            "logits_compute_from_fp32_inputs": False,
            "logits_compute_in_fp32": False,
        },
        "cuda_ipc": True,
        "low_memory": True,
    },
    "sampling": {
        "vllm": {
            "tensor_parallel_size": 2,
            "gpu_memory_utilization": 0.4,
            "max_model_len": 3072,
            "max_num_seqs": 256,
            "enforce_eager": True,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": True,
            "logprobs_mode": "processed_logprobs",
            "forest_cascade_attn_configs": "{}",
            "compilation_config": {
                "cudagraph_mode": "PIECEWISE",
                "pass_config": {"fuse_allreduce_rms": False},
            },
        },
        "arctic_inference_config": {
            "zorro_inference": {"enable": True},
            "speculative_decoding": {"model": ""},
        },
        "log_prob_engine": "deepspeed",
        "log_prob_ds_config": {
            "train_micro_batch_size_per_gpu": 8,
            "sequence_parallel_size": 1,
            "zero_optimization": {"stage": 3},
        },
    },
    "backend": {"type": "onprem", "protocol": "ray", "colocate": True},
}

BIRD_CLIENT: dict[str, Any] = {
    "model_name": "Qwen/Qwen3-32B",
    "seed": 42,
    "max_seq_len": 8192,
    "training_gpus": 32,
    "sampling_gpus": 32,
    "log_prob_gpus": 0,
    "job_ready_timeout": 1800.0,
    "request_timeout": 1800.0,
    "training": {
        "full_determinism": False,
        "checkpoint_path": "/shared/checkpoints/bird-qwen3-32b",
        "ds_config": {
            # 128 prompts x 8 rollouts = 1024 rows = micro 8 x grad-accum 4 x data-parallel 32
            "train_batch_size": 1024,
            "train_micro_batch_size_per_gpu": 8,
            "gradient_accumulation_steps": 4,
            "sequence_parallel_size": 1,
            "gradient_clipping": 1.0,
            "optimizer": {
                "type": "AdamW",
                "params": {"lr": 1e-6, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.0},
            },
            **PRECISION,
            "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
            # 200 steps x 1 optimizer step each; 5 % warmup = 10 steps, then constant
            "scheduler": {
                "type": "WarmupLR",
                "params": {
                    "warmup_min_lr": 0.0,
                    "warmup_max_lr": 1e-6,
                    "warmup_num_steps": 10,
                    "warmup_type": "linear",
                },
            },
        },
        "ds_worker_config": {
            "attn_implementation": "flash_attention_3",
            "use_liger": True,
            "enable_gradient_checkpointing": True,
            "use_autocast": False,
            "zorro_train_enable": True,
            "response_len": 2048,
            "max_token_len": 6144 + 8 * 2048,
            "rollout_n": 8,
            "temperature": 1.0,
            "use_unpad": True,
            "logits_optimization": "memory",
            "logits_optimization_peak_mem_size_in_gib": 4.0,
            "logits_compute_from_fp32_inputs": False,
            "logits_compute_in_fp32": True,  # no flash-attn cross-entropy kernel assumed with FA3
        },
        "cuda_ipc": True,
        "low_memory": False,
    },
    "sampling": {
        "vllm": {
            "tensor_parallel_size": 8,
            "gpu_memory_utilization": 0.5,
            "max_model_len": 8192,
            "max_num_seqs": 256,
            "enforce_eager": False,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": True,
            "logprobs_mode": "processed_logprobs",
            "max_num_batched_tokens": 40960,
            "forest_cascade_attn_configs": "{}",
            "compilation_config": {
                "cudagraph_mode": "PIECEWISE",
                "pass_config": {"fuse_allreduce_rms": False},
            },
            "speculative_config": {
                "method": "arctic",
                "model": "/models/arctic-speculator-qwen3-32b",
                "num_speculative_tokens": 3,
            },
        },
        "arctic_inference_config": {
            "zorro_inference": {"enable": True},
            "speculative_decoding": {"model": "/models/arctic-speculator-qwen3-32b"},
        },
        "log_prob_engine": "deepspeed",
        "log_prob_ds_config": None,
    },
    "backend": {"type": "onprem", "protocol": "ray", "colocate": True},
}

CORTEX_CLIENT: dict[str, Any] = {
    "model_name": "Qwen/Qwen3-0.6B",
    "seed": 42,
    "max_seq_len": 1536,
    "training_gpus": 4,
    "sampling_gpus": 4,
    "log_prob_gpus": 0,
    "job_ready_timeout": 1800.0,
    "request_timeout": 1800.0,
    "training": {
        "full_determinism": False,
        "checkpoint_path": "checkpoints/cortex-gsm8k",
        "ds_config": {
            # 64 prompts x 8 rollouts = 512 rows = micro 8 x grad-accum 16 x data-parallel 4
            "train_batch_size": 512,
            "train_micro_batch_size_per_gpu": 8,
            "gradient_accumulation_steps": 16,
            "sequence_parallel_size": 1,
            "gradient_clipping": 1.0,
            "optimizer": {
                "type": "AdamW",
                "params": {"lr": 1e-6, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
            },
            **PRECISION,
            "zero_optimization": {"stage": 2},
        },
        "ds_worker_config": {
            "attn_implementation": "sdpa",
            "use_liger": True,
            "enable_gradient_checkpointing": True,
            "use_autocast": False,
        },
        "cuda_ipc": False,
        "low_memory": False,
    },
    "sampling": {
        "vllm": {
            "tensor_parallel_size": 1,
            "gpu_memory_utilization": 0.8,
            "max_model_len": 1536,
            "max_num_seqs": 256,
            "enforce_eager": False,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": True,
            "logprobs_mode": "raw_logprobs",  # Cortex trains without temperature
        },
        # Arctic Inference is off on Cortex: 0.1.4's create-job body carries no config for it
        "arctic_inference_config": None,
        "log_prob_engine": "deepspeed",
        "log_prob_ds_config": None,
    },
    "backend": {
        "type": "remote",
        "protocol": "cortex",
        "base_url": None,
        "host": "example-account.snowflakecomputing.com",
        "database": "RL",
        "schema": "PUBLIC",
        "endpoint": "cortex-training",
        "max_retries": 10,
        "pat_from_env": "ARCTIC_CORTEX_PAT",
    },
}

SCENARIOS: dict[str, dict[str, Any]] = {
    "gsm8k-qwen3-0.6b-4gpu.yaml": GSM8K_CLIENT,
    "colocated-8gpu-cuda-ipc.yaml": COLOCATED_CLIENT,
    "bird-qwen3-32b-32gpu.yaml": BIRD_CLIENT,
    "cortex.yaml": CORTEX_CLIENT,
}
ONPREM = [name for name in SCENARIOS if name != "cortex.yaml"]
FAKE_TOKEN = "pat-test-0123456789-secret"


@pytest.fixture
def cortex_token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ARCTIC_CORTEX_PAT", FAKE_TOKEN)
    return FAKE_TOKEN


def _config(name: str) -> ArcticRLConfig:
    return load_config(CONFIGS / name)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_plan_pins_client_config(name: str) -> None:
    assert _config(name).plan()["client"] == SCENARIOS[name]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_batch_identity_is_computed(name: str) -> None:
    cfg = _config(name)
    ds = cfg.plan()["client"]["training"]["ds_config"]
    shape = cfg.shape
    assert ds["train_batch_size"] == (
        ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * shape.data_parallel_size
    )
    assert ds["train_batch_size"] == shape.mini_batch_prompts * cfg.batch.rollouts_per_prompt
    assert (
        shape.data_parallel_size
        == cfg.placement.training_gpus // cfg.placement.ulysses_sequence_parallel_size
    )


def _subset_mismatches(expected: Any, actual: Any, path: str = "") -> list[str]:
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: {actual!r} is not a mapping"]
        problems: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                problems.append(f"{path}.{key}: missing")
            else:
                problems += _subset_mismatches(value, actual[key], f"{path}.{key}")
        return problems
    return [] if expected == actual else [f"{path}: {actual!r} != {expected!r}"]


@pytest.mark.parametrize("name", ONPREM)
def test_real_client_config_and_initialize_bodies(name: str) -> None:
    from arctic_platform.client import ArcticClientConfig, OnPremConfig

    cfg = _config(name)
    client = cfg.to_client_config()
    assert isinstance(client, ArcticClientConfig)
    assert isinstance(client.backend, OnPremConfig)
    assert _subset_mismatches(SCENARIOS[name], client.model_dump(mode="json")) == []
    plan = cfg.plan()
    # The /initialize bodies in the plan are exactly what the real client sends, in creation order.
    assert list(plan["jobs"]) == [
        job for job in ("sampling", "log_prob", "training") if client.gpus_for(job) > 0
    ]
    for job, body in plan["jobs"].items():
        assert client.to_onprem(job) == body
    assert plan["jobs"]["training"]["checkpoint_path"] == cfg.checkpoint.path


def test_http_backend_connection() -> None:
    cfg = load_config(
        CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml",
        [
            "backend.kind=http",
            "backend.host=10.0.0.5",
            "backend.port=7000",
            "backend.launch_local_server=true",
        ],
    )
    backend = cfg.to_client_config().backend
    assert (backend.protocol, backend.host, backend.port, backend.launch_local_server) == (
        "http",
        "10.0.0.5",
        7000,
        True,
    )
    assert backend.startup_timeout == 600.0


def test_cortex_client_config_reads_the_token_by_name(
    cortex_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arctic_platform.client import CortexConfig

    # Values the settings class would pick up from the environment must not leak in.
    monkeypatch.setenv("ARCTIC_CORTEX_DATABASE", "FROM_ENV")
    monkeypatch.setenv("ARCTIC_CORTEX_BASE_URL", "http://from-env")
    cfg = _config("cortex.yaml")
    client = cfg.to_client_config()
    assert isinstance(client.backend, CortexConfig)
    assert client.backend.pat is not None and client.backend.pat.get_secret_value() == cortex_token
    assert (client.backend.database, client.backend.schema_, client.backend.base_url) == (
        "RL",
        "PUBLIC",
        None,
    )
    expected = {
        **CORTEX_CLIENT,
        "backend": {k: v for k, v in CORTEX_CLIENT["backend"].items() if k != "pat_from_env"},
    }
    expected["backend"]["schema_"] = expected["backend"].pop("schema")
    assert _subset_mismatches(expected, client.model_dump(mode="json")) == []
    # The token appears nowhere but in the SecretStr.
    for text in (repr(client), client.model_dump_json(), repr(cfg), str(cfg.plan())):
        assert cortex_token not in text
    # What Cortex receives: sub-jobs lifted from the canonical shape by the real client.
    sub_jobs = client.to_cortex()
    assert [sub["job_type"] for sub in sub_jobs] == ["sampling", "training"]
    sampling, training = sub_jobs
    assert sampling["inference_config"] == {
        "max_seq_len": 1536,
        "n_gpus": 4,
        "vllm_config": {
            "gpu_memory_utilization": 0.8,
            "max_num_seqs": 256,
            "enforce_eager": False,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": True,
            "logprobs_mode": "raw_logprobs",  # Cortex trains without temperature
            # no Arctic Inference / FCA on Cortex (off by default there: 0.1.4's create-job body drops
            # arctic_inference_config, so only half of the plugin's settings would arrive)
        },
    }
    train = training["training_config"]
    assert (train["train_batch_size"], train["gradient_clipping"], train["attn_implementation"]) == (
        512,
        1.0,
        "sdpa",
    )
    assert train["optimizer"] == {
        "name": "AdamW",
        "lr": 1e-6,
        "betas": [0.9, 0.999],
        "eps": 1e-8,
        "weight_decay": 0.0,
    }
    assert train["ds_config"] == CORTEX_CLIENT["training"]["ds_config"]


def test_cortex_without_the_token_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARCTIC_CORTEX_PAT", raising=False)
    with pytest.raises(ConfigError) as caught:
        _config("cortex.yaml").to_client_config()
    assert caught.value.issues[0].path == "backend.cortex.token_env"
    assert "export ARCTIC_CORTEX_PAT" in caught.value.issues[0].remedy


def test_cortex_base_url_needs_no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARCTIC_CORTEX_PAT", raising=False)
    cfg = load_config(
        CONFIGS / "cortex.yaml",
        ["backend.cortex.base_url=http://localhost:9000", "~backend.cortex.host"],
    )
    assert "pat_from_env" not in cfg.plan()["client"]["backend"]
    backend = cfg.to_client_config().backend
    assert (backend.base_url, backend.pat) == ("http://localhost:9000", None)


def test_reference_backend_has_no_client_config() -> None:
    with pytest.raises(ConfigError, match="reference backend does not use the Arctic client"):
        ArcticRLConfig().to_client_config()


# ----------------------------------------------------------------------------------------------
# vLLM engine arguments: injection, deep merge, provenance
# ----------------------------------------------------------------------------------------------


def test_bird_engine_args_provenance() -> None:
    engine = build_engine_args(_config("bird-qwen3-32b-32gpu.yaml"))
    assert engine.injected == (
        "compilation_config.cudagraph_mode",
        "compilation_config.pass_config.fuse_allreduce_rms",
        "forest_cascade_attn_configs",
        "speculative_config.method",
        "speculative_config.model",
        "speculative_config.num_speculative_tokens",
    )
    assert engine.from_user == () and engine.user_overrode == ()


def test_logprobs_mode_reaches_the_sampling_engine_config() -> None:
    """vllm.logprobs_mode is a typed knob: processed by default (the trainer's apply_temperature log-probs),
    raw on request, in the vllm_config the client sends; engine_args may not set it behind the knob."""
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

    reference = _config("reference-cpu.yaml")
    assert reference.vllm.logprobs_mode is None
    assert ReferenceEngineSettings.from_config(reference).logprobs_mode == "processed_logprobs"
    cfg = load_config(CONFIGS / "bird-qwen3-32b-32gpu.yaml", ["vllm.logprobs_mode=raw_logprobs"])
    assert cfg.plan()["client"]["sampling"]["vllm"]["logprobs_mode"] == "raw_logprobs"
    assert "logprobs_mode" in build_engine_args(cfg).from_typed_knobs
    with pytest.raises(ConfigError, match=r"vllm\.logprobs_mode"):
        load_config(CONFIGS / "reference-cpu.yaml", ["vllm.engine_args.logprobs_mode=raw_logprobs"])
    with pytest.raises(ConfigError, match="logprobs_mode"):
        load_config(CONFIGS / "reference-cpu.yaml", ["vllm.logprobs_mode=raw_logits"])
    # Cortex trains without temperature: raw by default there, processed at temperature != 1 refused
    cortex = load_config(CONFIGS / "cortex.yaml", ["loss.temperature=0.6"])
    assert build_engine_args(cortex).args["logprobs_mode"] == "raw_logprobs"
    with pytest.raises(ConfigError, match="Cortex's training body has no temperature"):
        load_config(
            CONFIGS / "cortex.yaml", ["loss.temperature=0.6", "vllm.logprobs_mode=processed_logprobs"]
        )


def test_truncated_training_sampling_is_refused_where_the_logprobs_are_processed() -> None:
    """Both adapters' rule (config.truncated_sampling): top-k/top-p with processed_logprobs is an issue
    naming the framework's fields and both fixes; off (top_p 1, top_k -1 or 0) or raw_logprobs is not."""
    from arctic_rl_core.config.truncated_sampling import truncated_sampling_issues

    names = {"top_p_field": "s.top_p", "top_k_field": "s.top_k", "logprobs_mode_field": "s.mode"}
    reference = _config("reference-cpu.yaml")  # logprobs_mode null -> processed here

    def issues(cfg, top_p, top_k):
        return truncated_sampling_issues(cfg, top_p=top_p, top_k=top_k, **names)

    (issue,) = issues(reference, 0.95, 40)
    assert (issue.path, issue.value) == ("s.top_p", 0.95)
    assert "s.top_p=0.95 and s.top_k=40" in issue.problem and "biased below 1" in issue.problem
    assert "s.top_p=1.0 and s.top_k=-1" in issue.remedy and "s.mode=raw_logprobs" in issue.remedy
    (issue,) = issues(reference, 1.0, 40)
    assert (issue.path, issue.value) == ("s.top_k", 40)
    assert issues(reference, 1.0, -1) == issues(reference, None, 0) == []
    raw = load_config(CONFIGS / "reference-cpu.yaml", ["vllm.logprobs_mode=raw_logprobs"])
    assert issues(raw, 0.5, 4) == []
    cortex = load_config(CONFIGS / "cortex.yaml")  # raw by default (no temperature in its training body)
    assert issues(cortex, 0.5, 4) == []
    cortex_processed = load_config(CONFIGS / "cortex.yaml", ["vllm.logprobs_mode=processed_logprobs"])
    assert [i.path for i in issues(cortex_processed, 0.5, -1)] == ["s.top_p"]
    # a run that builds no weight from the rollout log-probs never reads them: its truncation stands,
    # unless the core itself reads them (asynchronous: the truncated IS weights; Cortex: old log-probs)
    assert (
        truncated_sampling_issues(reference, top_p=0.95, top_k=40, reads_rollout_logprobs=False, **names)
        == []
    )
    stale = load_config(CONFIGS / "reference-cpu.yaml", ["async.max_staleness=1"])
    assert [
        i.path
        for i in truncated_sampling_issues(stale, top_p=0.95, top_k=-1, reads_rollout_logprobs=False, **names)
    ] == ["s.top_p"]
    assert [
        i.path
        for i in truncated_sampling_issues(
            cortex_processed, top_p=0.5, top_k=-1, reads_rollout_logprobs=False, **names
        )
    ] == ["s.top_p"]


def test_user_compilation_config_keeps_the_injected_workaround() -> None:
    cfg = load_config(
        CONFIGS / "bird-qwen3-32b-32gpu.yaml",
        ["vllm.engine_args.compilation_config.cudagraph_mode=FULL", "vllm.engine_args.quantization=fp8"],
    )
    engine = build_engine_args(cfg)
    assert engine.args["compilation_config"] == {
        "cudagraph_mode": "FULL",  # the user's leaf wins ...
        "pass_config": {"fuse_allreduce_rms": False},  # ... and the multi-engine workaround survives
    }
    assert engine.args["quantization"] == "fp8"
    assert engine.user_overrode == ("compilation_config.cudagraph_mode",)
    assert engine.from_user == ("compilation_config.cudagraph_mode", "quantization")
    plan = cfg.plan()
    assert plan["vllm"]["user_overrode"] == ["compilation_config.cudagraph_mode"]
    assert plan["jobs"]["sampling"]["vllm_config"]["compilation_config"]["cudagraph_mode"] == "FULL"


def test_user_replacing_an_injected_subtree_is_recorded_per_leaf() -> None:
    cfg = load_config(CONFIGS / "bird-qwen3-32b-32gpu.yaml", ["vllm.engine_args.speculative_config=null"])
    engine = build_engine_args(cfg)
    assert engine.args["speculative_config"] is None
    assert engine.user_overrode == (
        "speculative_config.method",
        "speculative_config.model",
        "speculative_config.num_speculative_tokens",
    )


def test_single_engine_fca_has_no_allreduce_workaround() -> None:
    cfg = load_config(
        CONFIGS / "bird-qwen3-32b-32gpu.yaml",
        [
            "placement.sampling_gpus=8",
            "~arctic_inference.speculative_model",
            "~arctic_inference.num_speculative_tokens",
        ],
    )
    assert cfg.shape.num_sampling_engines == 1
    args = build_engine_args(cfg).args
    assert args["compilation_config"] == {"cudagraph_mode": "PIECEWISE"}
    assert args["forest_cascade_attn_configs"] == "{}"
    assert "speculative_config" not in args
    assert cfg.plan()["client"]["sampling"]["arctic_inference_config"] == {
        "zorro_inference": {"enable": True},
        "speculative_decoding": {"model": ""},
    }


def test_suffix_decoding_speculative_configs() -> None:
    with_model = load_config(CONFIGS / "bird-qwen3-32b-32gpu.yaml", ["arctic_inference.suffix_decoding=true"])
    assert build_engine_args(with_model).args["speculative_config"] == {
        "method": "arctic",
        "model": "/models/arctic-speculator-qwen3-32b",
        "num_speculative_tokens": 3,
        "enable_suffix_decoding": True,
    }
    suffix_only = load_config(
        CONFIGS / "bird-qwen3-32b-32gpu.yaml",
        ["~arctic_inference.speculative_model", "arctic_inference.suffix_decoding=true"],
    )
    assert build_engine_args(suffix_only).args["speculative_config"] == {
        "method": "suffix",
        "num_speculative_tokens": 3,
        "enable_suffix_decoding": True,
    }


def test_arctic_inference_is_on_by_default_and_can_be_turned_off() -> None:
    default = _config("gsm8k-qwen3-0.6b-4gpu.yaml").plan()
    assert default["env"]["sampling_workers"] == {"ARCTIC_INFERENCE_ENABLED": "1"}
    assert default["env"]["workers"] == {"ARCTIC_INFERENCE_ENABLED": "1"}
    assert default["jobs"]["sampling"]["vllm_config"]["forest_cascade_attn_configs"] == "{}"
    off = load_config(CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml", ["arctic_inference.enable=false"])
    plan = off.plan()
    assert plan["env"]["sampling_workers"] == {} and plan["env"]["workers"] == {}
    assert "arctic_inference_config" not in plan["jobs"]["sampling"]
    assert plan["vllm"]["injected"] == []
    on = _config("bird-qwen3-32b-32gpu.yaml").plan()
    assert on["env"]["sampling_workers"] == {"ARCTIC_INFERENCE_ENABLED": "1"}
    # Plugin on without FCA or speculation: still "on" for the server, nothing injected.
    bare = load_config(CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml", ["arctic_inference.fca=false"]).plan()
    assert bare["env"]["sampling_workers"] == {"ARCTIC_INFERENCE_ENABLED": "1"}
    assert bare["jobs"]["sampling"]["arctic_inference_config"] == {
        "zorro_inference": {"enable": False},
        "speculative_decoding": {"model": ""},
    }
    assert bare["vllm"]["injected"] == []


def test_deep_merge_reports_replaced_leaves() -> None:
    merged, replaced = deep_merge({"a": {"b": 1, "c": {"d": 2}}, "e": 3}, {"a": {"c": 5}, "f": 6})
    assert merged == {"a": {"b": 1, "c": 5}, "e": 3, "f": 6}
    assert replaced == ["a.c.d"]


# ----------------------------------------------------------------------------------------------
# DeepSpeed: schedule, overrides, Ulysses, precision
# ----------------------------------------------------------------------------------------------


def test_cosine_schedule_horizon_counts_optimizer_steps() -> None:
    cfg = load_config(
        CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml",
        [
            "optimizer.scheduler=cosine",
            "optimizer.total_training_steps=100",
            "optimizer.warmup_ratio=0.1",
            "optimizer.min_lr_ratio=0.1",
            "batch.epochs=2",
        ],
    )
    # 64 prompts / 32 per mini-batch = 2 optimizer steps per epoch, 2 epochs, 100 steps
    assert cfg.shape.optimizer_steps_per_step == 4 and cfg.shape.training_horizon == 400
    assert cfg.plan()["client"]["training"]["ds_config"]["scheduler"] == {
        "type": "WarmupCosineLR",
        "params": {
            "total_num_steps": 400,
            "warmup_num_steps": 40,
            "warmup_min_ratio": 0.0,
            "cos_min_ratio": 0.1,
            "warmup_type": "linear",
        },
    }


def test_warmup_in_steps_needs_no_horizon() -> None:
    """SkyRL counts its warmup in optimizer steps (num_warmup_steps): the DeepSpeed warmup is that many
    steps whether or not the run's length is known, and with a horizon the cosine keeps it as given."""
    cfg = load_config(CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml", ["optimizer.warmup_steps=160"])
    assert cfg.optimizer.total_training_steps is None and cfg.shape.warmup_steps == 160
    assert cfg.plan()["client"]["training"]["ds_config"]["scheduler"] == {
        "type": "WarmupLR",
        "params": {"warmup_min_lr": 0.0, "warmup_max_lr": cfg.optimizer.lr, "warmup_num_steps": 160,
                   "warmup_type": "linear"},
    }  # fmt: skip
    cosine = load_config(
        CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml",
        ["optimizer.scheduler=cosine", "optimizer.total_training_steps=100", "optimizer.warmup_steps=7"],
    )
    params = cosine.plan()["client"]["training"]["ds_config"]["scheduler"]["params"]
    assert (params["warmup_num_steps"], params["total_num_steps"]) == (7, cosine.shape.training_horizon)


def test_warmup_given_twice_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(
            CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml",
            ["optimizer.warmup_steps=10", "optimizer.warmup_ratio=0.1", "optimizer.total_training_steps=100"],
        )
    (issue,) = info.value.issues
    assert issue.path == "optimizer.warmup_steps" and "also warmup_ratio=0.1" in issue.problem


def test_deepspeed_overrides_ulysses_and_autocast() -> None:
    cfg = load_config(
        CONFIGS / "colocated-8gpu-cuda-ipc.yaml",
        [
            "deepspeed.autocast=true",
            "deepspeed.offload_param=true",
            "deepspeed.config_overrides.zero_optimization.stage3_param_persistence_threshold=10000",
            "optimizer.grad_clip=null",
        ],
    )
    training = cfg.plan()["client"]["training"]
    ds = training["ds_config"]
    # data-parallel 8 (no sequence parallelism on 0.1.4): 256 rows = micro 8 x grad-accum 4 x 8
    assert (ds["sequence_parallel_size"], ds["gradient_accumulation_steps"]) == (1, 4)
    assert ds["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    assert ds["gradient_clipping"] == 0.0
    assert ds["zero_optimization"] == {
        "stage": 3,
        "offload_param": {"device": "cpu", "pin_memory": True},
        "stage3_param_persistence_threshold": 10000,
    }
    assert training["ds_worker_config"]["use_autocast"] is True
    assert cfg.plan()["client"]["sampling"]["log_prob_ds_config"] == {
        "train_micro_batch_size_per_gpu": 8,
        "sequence_parallel_size": 1,
        "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": True}},
    }


def test_reference_plan_lists_settings_it_does_not_apply() -> None:
    cfg = load_config(CONFIGS / "reference-cpu.yaml", ["vllm.max_num_seqs=8", "determinism.full=true"])
    plan = cfg.plan()
    assert plan["backend"] == "reference"
    assert plan["reference_model"]["hidden_size"] == 64
    assert plan["not_applied_by_reference_backend"] == ["vllm.max_num_seqs", "determinism.full"]
    assert plan["shape"]["train_batch_size"] == 16 and plan["shape"]["gradient_accumulation_steps"] == 4


def test_worker_env_reaches_the_plan_and_is_checked() -> None:
    """backend.worker_env + the Arctic Inference switch: every server worker's environment (0.1.4
    sets ARCTIC_INFERENCE_ENABLED only on its colocated branch, so the plan sets it for every run)."""
    separate = load_config(
        CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml",
        ["backend.worker_env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "backend.worker_env.X_Y=1"],
    )
    assert not separate.placement.colocate
    env = separate.plan()["env"]
    assert env["workers"] == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "X_Y": "1",
        "ARCTIC_INFERENCE_ENABLED": "1",
    }
    assert "set in this process before the server starts" in env["delivery"]
    remote = load_config(
        CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml", ["backend.kind=http", "backend.host=gpu-0"]
    ).plan()["env"]
    assert "export them on every node before `ray start`" in remote["delivery"]
    cases = [
        (["backend.worker_env.ARCTIC_INFERENCE_ENABLED=0"], "owned by arctic_inference.enable"),
        (["backend.worker_env.1BAD=1"], "not an environment variable name"),
        (
            [
                "placement.colocate=true",
                "backend.worker_env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            ],
            "Expandable segments are not compatible with memory pool",
        ),
        (["backend.kind=reference", "backend.worker_env.A=1"], "only the Arctic server's workers take it"),
    ]
    for overrides, message in cases:
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml", overrides)


def test_apply_worker_env_sets_it_where_the_workers_inherit_it() -> None:
    pytest.importorskip("arctic_platform.client")
    from arctic_rl_core.backends.arctic_compat import apply_worker_env

    cfg = load_config(
        CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml", ["backend.kind=http", "backend.launch_local_server=true"]
    )
    client = cfg.to_client_config()
    environ: dict[str, str] = {"PATH": "/bin"}
    done = apply_worker_env(client, {"ARCTIC_INFERENCE_ENABLED": "1", "A": "x"}, environ)
    assert environ == {"PATH": "/bin", "ARCTIC_INFERENCE_ENABLED": "1", "A": "x"} and done.startswith(
        "set in"
    )
    with pytest.raises(ValueError, match=r"this process has A='x' \(wanted 'y'\)"):
        apply_worker_env(client, {"A": "y"}, environ)
    remote = load_config(CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml", ["backend.kind=http"]).to_client_config()
    untouched: dict[str, str] = {}
    assert "export" in apply_worker_env(remote, {"A": "x"}, untouched) and untouched == {}
