"""The translation plan as plain data: what the Arctic client is given, the `/initialize` body of
each job, the vLLM engine arguments with their provenance, and the sampling workers' environment.

Needs no arctic-platform install; `client_config.to_client_config` builds the real client config
from `client_fields`, and the tests check that the real client produces exactly these bodies.
"""

from __future__ import annotations

import copy
from typing import Any

from arctic_rl_core.config.deepspeed_config import ds_worker_config, log_prob_ds_config, training_ds_config
from arctic_rl_core.config.engine_args import build_engine_args
from arctic_rl_core.config.schema import LEGACY_OPTIMISATIONS, ArcticRLSettings
from arctic_rl_core.config.shape import TrainingShape

JOB_CREATION_ORDER: tuple[str, ...] = ("sampling", "log_prob", "training")

# Groups / fields the reference engine does not use (it runs no vLLM, DeepSpeed or server jobs).
_NOT_USED_BY_REFERENCE: dict[str, tuple[str, ...] | None] = {
    "model": None,
    "placement": (
        "sampling_gpus",
        "log_prob_gpus",
        "colocate",
        "sampling_tensor_parallel_size",
        "ulysses_sequence_parallel_size",
    ),
    "deepspeed": None,
    "kernels": None,
    "zorro": None,
    "arctic_inference": None,
    "vllm": None,
    "weight_sync": None,
    "determinism": ("full",),
}


def arctic_inference_config(cfg: ArcticRLSettings) -> dict[str, Any] | None:
    """`sampling.arctic_inference_config` in the schema the server reads; None when it is off
    (the server treats any non-empty mapping as "on")."""
    ai = cfg.arctic_inference
    if not ai.enable:
        return None
    return {
        "zorro_inference": {"enable": ai.fca},
        "speculative_decoding": {"model": ai.speculative_model or ""},
    }


def sampling_worker_env(cfg: ArcticRLSettings) -> dict[str, str]:
    """Environment the vLLM sampling workers need (Arctic Inference on: the plugin switch)."""
    return {"ARCTIC_INFERENCE_ENABLED": "1"} if cfg.arctic_inference.enable else {}


def worker_env(cfg: ArcticRLSettings) -> dict[str, str]:
    """Environment every Arctic server worker gets: `backend.worker_env` plus the sampling workers'
    switches. 0.1.4 sets ARCTIC_INFERENCE_ENABLED itself only on its colocated branch; without it
    arctic-inference drops FCA and Arctic speculative decoding, so it is set for every run."""
    return {**cfg.backend.worker_env, **sampling_worker_env(cfg)}


def worker_env_delivery(cfg: ArcticRLSettings) -> str:
    """How `worker_env` reaches the server's workers for this backend."""
    backend = cfg.backend
    if backend.kind == "cortex":
        return "not applicable: Cortex runs its own workers (the variables are not sent)"
    if backend.kind == "http" and not backend.launch_local_server:
        return (
            "a remote server: export them on every node before `ray start` and before starting the server "
            "(source recipes/worker-env.sh); 0.1.4 cannot report its workers' environment"
        )
    return (
        "set in this process before the server starts (its workers inherit it when this process starts Ray; "
        "with a running Ray cluster, export them before `ray start` on every node)"
    )


def _backend_fields(cfg: ArcticRLSettings) -> dict[str, Any]:
    backend = cfg.backend
    if backend.kind == "cortex":
        cortex = backend.cortex
        fields: dict[str, Any] = {
            "type": "remote",
            "protocol": "cortex",
            "base_url": cortex.base_url,
            "host": cortex.host,
            "database": cortex.database or "",
            "schema": cortex.schema_name or "",
            "endpoint": cortex.endpoint,
            "max_retries": cortex.max_retries,
        }
        # Only the variable's NAME: the token is read when the client config is built (required
        # with host; with base_url, sent when the variable is set, e.g. to the Cortex emulator)
        if cortex.host and not cortex.base_url:
            fields["pat_from_env"] = cortex.token_env
        else:
            fields["pat_from_env_if_set"] = cortex.token_env
        return fields
    fields = {"type": "onprem", "protocol": backend.kind, "colocate": cfg.placement.colocate}
    if backend.kind == "http":
        fields.update(
            host=backend.host,
            port=backend.port,
            launch_local_server=backend.launch_local_server,
            startup_timeout=backend.startup_timeout_s,
        )
    return fields


def client_fields(cfg: ArcticRLSettings) -> dict[str, Any]:
    """Keyword arguments of `ArcticClientConfig` as plain data (no secret, only its env name)."""
    shape = TrainingShape.from_config(cfg)
    place = cfg.placement
    return {
        "model_name": cfg.model.name,
        "seed": cfg.determinism.seed,
        "max_seq_len": shape.max_model_len,
        "training_gpus": place.training_gpus,
        "sampling_gpus": place.sampling_gpus,
        "log_prob_gpus": place.log_prob_gpus,
        "job_ready_timeout": cfg.backend.job_ready_timeout_s,
        "request_timeout": cfg.backend.request_timeout_s,
        "training": {
            "full_determinism": cfg.determinism.full,
            "checkpoint_path": cfg.checkpoint.path,
            "ds_config": training_ds_config(cfg),
            "ds_worker_config": ds_worker_config(cfg),
            "cuda_ipc": cfg.weight_sync.cuda_ipc,
            "low_memory": cfg.weight_sync.low_memory,
            **({"peft": cfg.peft.peft_config()} if cfg.peft.enabled else {}),
        },
        "sampling": {
            "vllm": build_engine_args(cfg).args,
            "arctic_inference_config": arctic_inference_config(cfg),
            "log_prob_engine": "deepspeed",
            "log_prob_ds_config": log_prob_ds_config(cfg),
        },
        "backend": _backend_fields(cfg),
    }


def initialize_bodies(fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The on-prem `/initialize` body of each job, in creation order (jobs with GPUs only)."""
    training = fields["training"]
    sampling = fields["sampling"]
    bodies: dict[str, dict[str, Any]] = {}
    for job in JOB_CREATION_ORDER:
        if fields[f"{job}_gpus"] <= 0:
            continue
        body: dict[str, Any] = {"model_name": fields["model_name"], "job_type": job, "seed": fields["seed"]}
        if job == "sampling":
            if sampling["arctic_inference_config"]:
                body["arctic_inference_config"] = sampling["arctic_inference_config"]
            vllm = dict(sampling["vllm"])
            vllm.setdefault("max_model_len", fields["max_seq_len"])
            body["vllm_config"] = vllm
        else:
            body["full_determinism"] = training["full_determinism"]
            body["ds_config"] = training["ds_config"]
            body["ds_worker_config"] = training["ds_worker_config"]
            if job == "training":
                body["checkpoint_path"] = training["checkpoint_path"]
                body["cuda_ipc"] = training["cuda_ipc"]
                body["low_memory"] = training["low_memory"]
            elif sampling["log_prob_ds_config"]:
                body["log_prob_config"] = sampling["log_prob_ds_config"]
        bodies[job] = copy.deepcopy(body)
    return bodies


def _explicit_fields(cfg: ArcticRLSettings, group: str, names: tuple[str, ...] | None) -> list[str]:
    settings = getattr(cfg, group)
    chosen = sorted(settings.model_fields_set)
    if names is not None:
        chosen = [name for name in chosen if name in names]
    return [f"{group}.{name}" for name in chosen]


def build_plan(cfg: ArcticRLSettings) -> dict[str, Any]:

    shape = TrainingShape.from_config(cfg).as_dict()
    if cfg.backend.kind == "reference":
        not_applied: list[str] = []
        for group, names in _NOT_USED_BY_REFERENCE.items():
            not_applied.extend(_explicit_fields(cfg, group, names))
        return {
            "backend": "reference",
            "shape": shape,
            "reference_model": cfg.backend.reference.model_dump(mode="json"),
            "not_applied_by_reference_backend": not_applied,
            # The legacy integrations' optimisations the Arctic backends turn on by default: off here.
            "no_cpu_meaning": [
                f"{path} (on by default with the Arctic backends)" for path in LEGACY_OPTIMISATIONS
            ],
            **({"peft": cfg.peft.peft_config(), "weight_format": "lora"} if cfg.peft.enabled else {}),
        }
    fields = client_fields(cfg)
    engine = build_engine_args(cfg).as_dict()
    plan: dict[str, Any] = {
        "backend": cfg.backend.kind,
        "shape": shape,
        "client": copy.deepcopy(fields),
        "vllm": {key: value for key, value in engine.items() if key != "engine_args"},
        "env": {
            "sampling_workers": sampling_worker_env(cfg),
            "workers": worker_env(cfg),
            "delivery": worker_env_delivery(cfg),
        },
    }
    if cfg.backend.kind == "cortex":
        plan["cortex_sub_jobs"] = [job for job in JOB_CREATION_ORDER if fields[f"{job}_gpus"] > 0]
        if cfg.peft.enabled:  # training.peft goes to the training and the sampling sub-job
            plan["weight_format"] = "lora"
    else:
        plan["jobs"] = initialize_bodies(fields)
    return plan
