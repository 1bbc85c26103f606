"""SkyRL end-to-end runs (the SkyRL suite only: imports SkyRL): the tiny GRPO settings, and an
experiment that records what the trainer logs, every rollout batch and (optionally) every backend
call, shared by the in-process runs (tests/skyrl/test_skyrl_e2e.py) and the wire runs
(tests/skyrl/test_skyrl_wire_e2e.py)."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from adapter_skyrl.config import parse_cli
from adapter_skyrl.experiment import ArcticPPOExp
from adapter_skyrl.generator import ArcticGenerator
from arctic_rl_core.backends.forwarding import ForwardingBackend

# SkyRL's own settings of a tiny CPU GRPO run (no backend named). `generator.batched=true`, as SkyRL's
# stock GSM8K example: one generate call per step, so a resumed run samples exactly what the original
# did (SkyRL's agent loops call the engine in no fixed order).
TINY_GRPO = [
    "generator.batched=true",
    "trainer.placement.colocate_all=false",
    "generator.inference_engine.enable_ray_prometheus_stats=false",
    "trainer.enable_ray_gpu_monitor=false",
    "trainer.algorithm.policy_loss_type=dual_clip",
    "trainer.algorithm.use_kl_loss=true",
    "trainer.algorithm.kl_loss_coef=0.01",
    "trainer.algorithm.use_entropy_loss=true",  # a gradient even when every reward ties
    "trainer.algorithm.entropy_loss_coef=0.01",
    "trainer.policy.optimizer_config.lr=0.001",
    "trainer.train_batch_size=2",
    "trainer.policy_mini_batch_size=1",
    "trainer.update_epochs_per_batch=2",
    "generator.n_samples_per_prompt=2",
    "trainer.micro_train_batch_size_per_gpu=1",
    "trainer.max_prompt_length=128",
    "generator.sampling_params.max_generate_length=6",
    "trainer.epochs=1",
    "trainer.eval_interval=0",
    "trainer.eval_before_train=false",
    "trainer.print_example_interval=0",
    "trainer.logger=console",
    "trainer.seed=7",
    "data.dataloader.num_workers=0",
    "data.val_data=[]",
]
# SkyRL's own settings of a tiny fully asynchronous run (SkyRL's FullyAsyncRayPPOTrainer): one
# prompt group per step, two generation workers, one step of staleness, SkyRL's async loss
# (rollout_is) with its token TIS on (so the old-log-prob forward runs too).
TINY_FULLY_ASYNC = [
    *(
        a
        for a in TINY_GRPO
        if not a.startswith(
            (
                "trainer.algorithm.policy_loss_type",
                "trainer.train_batch_size",
                "trainer.update_epochs_per_batch",
                "trainer.algorithm.use_kl_loss",
                "generator.batched",
            )
        )
    ),
    "generator.batched=false",  # SkyRL's fully async trainer samples per trajectory
    "trainer.algorithm.use_kl_loss=false",
    "trainer.fully_async.enabled=true",
    "trainer.fully_async.max_staleness_steps=1",
    "trainer.fully_async.num_parallel_generation_workers=2",
    "trainer.algorithm.policy_loss_type=rollout_is",
    "trainer.algorithm.off_policy_correction.tis_ratio_type=token",
    "trainer.train_batch_size=1",
    "trainer.update_epochs_per_batch=1",
    "trainer.resume_mode=none",
    "trainer.ckpt_interval=0",
]
# The tiny reference model (the in-process engine's, and the directory the wire server serves).
TINY_MODEL = {
    "num_layers": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
IN_PROCESS = [
    "trainer.arctic_rl.backend.kind=reference",
    *(f"trainer.arctic_rl.backend.reference.{key}={value}" for key, value in TINY_MODEL.items()),
]


class RecordingTracker:
    """SkyRL's tracker surface (log / finish / log_exception), keeping what the trainer logs."""

    def __init__(self) -> None:
        self.logs: list[tuple[int, dict[str, Any]]] = []

    def log(self, data: dict[str, Any], step: int, commit: bool = False) -> None:
        self.logs.append((step, dict(data)))

    def finish(self) -> None:
        pass

    def log_exception(self, exc: BaseException, step: int) -> None:
        pass


class RecordingGenerator(ArcticGenerator):
    """Keeps every rollout batch (texts, each row's reward: SkyRL's per-token rewards summed, the
    environments' metrics, prompts as sent) for the assertions."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.batches: list[dict[str, Any]] = []

    async def generate(self, input_batch, disable_tqdm: bool = True):
        fresh = {**input_batch, "env_extras": [dict(e) for e in input_batch["env_extras"]]}  # as sent
        out = await super().generate(input_batch, disable_tqdm=disable_tqdm)
        texts = [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in out["response_ids"]]
        self.batches.append(
            {"extras": input_batch["env_extras"], "texts": texts,
             "rewards": [float(sum(r)) if isinstance(r, list) else float(r) for r in out["rewards"]],
             "verdicts": out.get("env_metrics"), "version": self.weights_versions[-1],
             "input": fresh, "output": copy.deepcopy(dict(out)), "reports": list(self.last_call.trajectories)}
        )  # fmt: skip
        return out


class CallLog(ForwardingBackend):
    """The backend with every protocol call's name (and each generate's prompt types) recorded."""

    def __init__(self, target: Any) -> None:
        super().__init__(target)
        self.calls: list[str] = []
        self.prompt_types: set[type] = set()

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name in _PROTOCOL_CALLS:
            calls = super().__getattribute__("calls")

            async def recorded(*args: Any, **kwargs: Any) -> Any:
                calls.append(name)
                if name == "generate":
                    self.prompt_types.update(type(p) for p in args[0])
                return await attr(*args, **kwargs)

            return recorded
        return attr


_PROTOCOL_CALLS = frozenset(
    {
        "generate", "forward", "forward_backward", "step", "sync_weights", "sleep_inference",
        "wake_inference", "sleep_training", "wake_training", "reset_prefix_cache", "save_checkpoint",
        "load_checkpoint",
    }
)  # fmt: skip


class RecordingExp(ArcticPPOExp):
    def get_tracker(self) -> RecordingTracker:
        self.recorded = RecordingTracker()
        return self.recorded

    def get_generator(self, cfg, tokenizer, inference_engine_client) -> RecordingGenerator:
        self.generator = self.build_generator(RecordingGenerator, tokenizer)
        return self.generator


def run_grpo(
    overrides: Sequence[str],
    *,
    base: Sequence[str] = (*TINY_GRPO, *IN_PROCESS),
    backend_factory: Callable[[Any], Any] | None = None,
    shutdown: bool = False,
) -> RecordingExp:
    """SkyRL's real `RayPPOTrainer.train()` on `base + overrides`; with `shutdown` the backend is
    shut down after, however the run ended (a wire run must not leave jobs on the server)."""
    exp = RecordingExp(parse_cli([*base, *overrides]), backend_factory=backend_factory)
    try:
        asyncio.run(exp._setup_trainer().train())
    finally:
        if shutdown:
            from arctic_rl_core.dispatch import run

            run(exp.backend.shutdown())
    return exp


def logged_steps(exp: RecordingExp) -> dict[int, dict[str, Any]]:
    """What the trainer logged at each training step."""
    return {step: data for step, data in exp.recorded.logs if "policy/policy_loss" in data}


def backend_weights(ckpt_root: Path, step: int) -> dict[str, torch.Tensor]:
    """Every tensor of the backend checkpoint SkyRL saved at `step` under `ckpt_root`."""
    policy = ckpt_root / f"global_step_{step}" / "policy"
    marker = json.loads((policy / "arctic_checkpoint.json").read_text())
    # the run's backend checkpoints share one folder: <ckpt_path>/arctic_backend/checkpoint-<step>, named
    # relative to the marker's folder (a moved run folder still resumes)
    files = sorted(((policy / marker["backend_path"]).resolve() / f"checkpoint-{marker['step']}").rglob("*"))
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        # data files carry their save's generation ("model.<generation>.safetensors"): key by role
        role = f"{f.name.split('.', 1)[0]}{f.suffix}"
        if f.suffix == ".safetensors":
            from safetensors.torch import load_file

            tensors.update({f"{role}:{k}": v for k, v in load_file(f).items()})
        elif f.suffix in (".pt", ".bin"):
            state = torch.load(f, map_location="cpu", weights_only=False)
            if isinstance(state, dict):
                tensors.update({f"{role}:{k}": v for k, v in state.items() if isinstance(v, torch.Tensor)})
    assert tensors, f"no tensors found in the backend checkpoint: {files}"
    return tensors
