"""The real arctic-platform 0.1.4 client over its real Ray transport (`RayTransport`: the client builds the
server's state actor `ArcticRLRayServerState` itself and calls the typed `ArcticRLRayServer` in its own
process) against the real server code under a local Ray: the state actor creates the training and
log-prob jobs' real `DeepSpeedWorker` Ray actors, which train on the CPU.

Where the real code stops here, and why:
- **No sampling job**: `sampling_gpus=0`. The state actor builds a vLLM `ReplicaPool`
  (`arctic_inference.server.replica_pool`, vLLM) for a sampling job, and neither runs on a CPU. So no
  `generate`, and no weight sync: every 0.1.4 sync path ends in vLLM workers (NCCL, CUDA IPC, or the
  colocated CPU file read by vLLM's `load_weights_from_shm_path`). The HTTP path (`serve --reference
  --trainer deepspeed`) keeps the reference sampler for that and runs the workers' half of the sync.
- **Ray's GPUs are logical**: `ray.init(num_gpus=2)` lets the server's `num_gpus=1` actors schedule; each
  worker applies `deepspeed_cpu_shims` at start (Ray's `worker_process_setup_hook`) and sees no GPU.
- **The client's extras check** (`make_transport` wants every distribution of arctic-platform's `sft`/`rl`
  extras, GPU stack included) is opened around the client's construction (`extras_gate_open`).
- **`torch_adam`**: the client config's DeepSpeed optimizer gets `torch_adam` (`cpu_ds_config`, as the
  HTTP path does), or DeepSpeed would JIT-compile its CPU Adam in the worker.
- The server's `forward_backward` / `forward` / `step` call `ray.get` inside `async def` (issue 28 item 3:
  the blocking Ray server); the calls below are one at a time, so they complete.

One client for the module: Ray's start, the state actor and two worker actors cost ~1-2 min on 2 cores.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("arctic_platform.client")
ray = pytest.importorskip("ray")

from arctic_rl_core.config import load_config  # noqa: E402
from arctic_rl_core.wire import (  # noqa: E402
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    response_logprobs,
    with_response_logprobs,
)
from arctic_rl_testbed.reference.deepspeed_backend import payload_dict  # noqa: E402
from arctic_rl_testbed.reference.deepspeed_cpu_shims import (  # noqa: E402
    WORKER_ENV,
    cpu_ds_config,
    extras_gate_open,
)
from wire_server import tiny_model_dir  # noqa: E402

SEED = 11


def _samples() -> list[RolloutSample]:
    g = torch.Generator().manual_seed(2)
    return [
        RolloutSample(
            prompt_ids=torch.randint(10, 900, (4,), generator=g).tolist(),
            response_ids=torch.randint(10, 900, (4,), generator=g).tolist(),
            advantages=[1.0 if i % 2 else -1.0] * 4,
        )
        for i in range(2)
    ]


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory):
    from arctic_platform.client import ArcticRLClient

    root = tmp_path_factory.mktemp("deepspeed-ray")
    model_dir = tiny_model_dir(root / "model", SEED)
    cfg = load_config(
        None,
        [
            "backend.kind=ray",
            f"model.name={model_dir}",
            f"checkpoint.path={root / 'server'}",
            f"determinism.seed={SEED}",
            "kernels.attn_implementation=sdpa",
            "zorro.enable=false",
            "kernels.use_liger=false",
            "deepspeed.zero_stage=3",  # the log-prob job starts on 3 only (0.1.4)
            "placement.log_prob_gpus=1",
            "loss.use_kl_loss=true",
            "optimizer.lr=0.001",  # the default 1e-6 moves no bf16 weight of a tiny model
            "batch.prompts_per_step=1",
            "batch.rollouts_per_prompt=2",
            "batch.micro_batch_size_per_gpu=1",  # one row per micro-batch: no packing across rows
        ],
    )
    client_cfg = cfg.to_client_config()
    ds_config, _ = cpu_ds_config(client_cfg.training.ds_config)
    client_cfg = client_cfg.model_copy(
        update={
            "sampling_gpus": 0,
            "training": client_cfg.training.model_copy(update={"ds_config": ds_config}),
        }
    )
    out = {"gas": ds_config["gradient_accumulation_steps"], "root": root}
    ray.init(
        num_cpus=8,  # logical: the state actor's placement group and two worker actors
        num_gpus=2,  # logical: the server's `num_gpus=1` worker actors
        include_dashboard=False,
        runtime_env={
            "env_vars": {**WORKER_ENV, "OMP_NUM_THREADS": "1", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"},
            "worker_process_setup_hook": "arctic_rl_testbed.reference.deepspeed_cpu_shims.install",
        },
    )
    client = None
    try:
        with extras_gate_open():
            client = ArcticRLClient(client_cfg)
        out["jobs"] = client.jobs
        out["server"] = client.transport._server
        spec = PayloadSpec(pad_token_id=0, max_prompt_len=4, max_response_len=4, rollout_n=2, temperature=1.0)
        samples = _samples()
        one_row = build_forward_payload(samples[:1], spec)
        out["reference"] = client.fwd_no_grad(payload_dict(one_row), reference_model=True)
        train_spec = PayloadSpec(
            pad_token_id=0,
            max_prompt_len=4,
            max_response_len=4,
            rollout_n=2,
            temperature=1.0,
            grad_accum_steps=out["gas"],
        )
        forward = build_forward_payload(samples, train_spec)
        out["old"] = client.fwd_no_grad(payload_dict(forward))
        old, _ = response_logprobs(out["old"]["batch"]["logprobs"].float(), forward, train_spec)
        out["train"] = client.fwd_bwd(
            payload_dict(
                build_train_payload(with_response_logprobs(samples, old, field="old_logprobs"), train_spec)
            )
        )
        out["step"] = client.step()
        out["after"] = client.fwd_no_grad(payload_dict(forward))
        out["saved"] = client.save_checkpoint(path=str(root / "saved"), step=1, export_hf=True)
        out["loaded"] = client.load_checkpoint(str(root / "saved"), step=1)
        out["reloaded"] = client.fwd_no_grad(payload_dict(forward))
        out["forward"], out["spec"], out["one_row"] = forward, train_spec, one_row
        out["worker_pids"] = [
            ray.get(w.__ray_call__.remote(lambda self: os.getpid())) for w in out["server"].training_workers
        ]
    finally:
        if client is not None:
            client.shutdown()
        ray.shutdown()
    return out


def test_the_real_ray_server_runs_the_jobs_on_real_worker_actors(ray_run):
    assert ray_run["jobs"].training is not None and ray_run["jobs"].log_prob is not None
    assert ray_run["jobs"].sampling is None
    server = ray_run["server"]
    assert type(server).__module__ == "arctic_platform.common.ray_server"
    assert type(server).__name__ == "ArcticRLRayServer"
    assert ray_run["worker_pids"] and os.getpid() not in ray_run["worker_pids"]


def test_reference_forward_train_and_step_through_the_ray_transport(ray_run):
    reference = ray_run["reference"]["batch"]["logprobs"]
    real = ray_run["one_row"].batch["attention_mask"][0].bool()
    values = reference[0, real][:-1].float()  # the last real position is meaningless
    assert torch.isfinite(values).all() and (values < 0).all()
    train = ray_run["train"]
    assert set(train["metrics"]) >= {"loss", "actor/pg_loss", "actor/ppo_kl"}
    assert train["metrics"]["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-3)  # old log-probs from this model
    assert ray_run["step"]["metrics"]["grad_norm"] > 0
    mask = ray_run["forward"].batch["attention_mask"].bool()
    moved = (ray_run["after"]["batch"]["logprobs"].float() - ray_run["old"]["batch"]["logprobs"].float())[
        mask
    ]
    assert moved.abs().max() > 0


def test_checkpoint_with_hf_export_and_reload_through_the_ray_transport(ray_run):
    saved = ray_run["saved"]
    folder = Path(saved["path"])
    assert folder == ray_run["root"] / "saved" / "checkpoint-1" and saved["global_step"] == 1
    assert (folder / "hf" / "model.safetensors").is_file() and (folder.parent / "latest").read_text() == "1"
    assert ray_run["loaded"]["global_step"] == 1
    assert torch.equal(ray_run["reloaded"]["batch"]["logprobs"], ray_run["after"]["batch"]["logprobs"])
