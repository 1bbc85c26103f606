"""SkyRL's `WorkerDispatch`, served by a core `Backend` instead of Ray actor groups.

Every public method SkyRL 0.4.0's `WorkerDispatch` has is overridden here (a test enforces it), so
nothing falls through to the actor-group code. Payloads are built only by `arctic_rl_core.wire`,
calls go through `arctic_rl_core.dispatch.run`, weight sync only through
`arctic_rl_core.weight_sync`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from arctic_rl_core.async_grpo.is_weights import combined_is_stats
from arctic_rl_core.backends.old_logprobs import from_sampler, sampler_logprobs
from arctic_rl_core.checkpoint_folder import backend_checkpoint_root
from arctic_rl_core.checkpoint_manifest import backend_save
from arctic_rl_core.dispatch import run
from arctic_rl_core.weight_sync import prepare_for_training, sync_after_step
from arctic_rl_core.wire import build_forward_payload, build_train_payload, response_logprobs
from skyrl.backends.skyrl_train.distributed.dispatch import WorkerOutput
from skyrl.backends.skyrl_train.workers.worker_dispatch import WorkerDispatch

from adapter_skyrl.loop_bridge import on_backend_loop
from adapter_skyrl.samples import (
    behaviour_logprobs,
    off_policy_correction,
    response_lengths,
    to_rollout_samples,
    to_skyrl_rows,
)
from adapter_skyrl.skyrl_internals import no_actor_groups

if TYPE_CHECKING:
    from arctic_rl_core.async_grpo.is_weights import ISWeightStats
    from arctic_rl_core.async_grpo.sync_gate import GenerationSyncGate
    from arctic_rl_core.backends.protocol import Backend, WirePayload
    from arctic_rl_core.config.schema import CheckpointSettings
    from arctic_rl_core.weight_sync import WeightSyncPolicy
    from arctic_rl_core.wire import PayloadSpec
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.train.config import SkyRLTrainConfig

    from adapter_skyrl.trace import PayloadTrace

CHECKPOINT_MARKER = (
    "arctic_checkpoint.json"  # in SkyRL's global_step_<n>/policy: names the backend's checkpoint
)
# in SkyRL's <export_path>/global_step_<n>/policy: names the folder of the Hugging Face weights
HF_EXPORT_MARKER = "arctic_hf_export.json"
_MODELS = ("policy", "ref")


_ONE_ADAPTER = (
    "the Arctic jobs train one LoRA adapter per run (trainer.policy.model.lora.* -> training.peft, Cortex or "
    "the reference backend); multi-tenant named adapters are not supported"
)


class ArcticWorkerDispatch(WorkerDispatch):
    """Policy (and reference log-probs) on an Arctic backend; no critic, no SkyRL workers."""

    def __init__(
        self,
        cfg: SkyRLTrainConfig,
        backend: Backend,
        spec: PayloadSpec,
        sync_policy: WeightSyncPolicy,
        *,
        trace: PayloadTrace | None = None,
        call_timeout_s: float | None = None,
        checkpoint: CheckpointSettings | None = None,
        sync_gate: GenerationSyncGate | None = None,
    ):
        # The base keeps cfg/colocation flags; its actor-group table stays empty on purpose.
        super().__init__(cfg, policy_actor_group=None, inference_engine_client=None)
        no_actor_groups(self)
        self.backend = backend
        self.spec = spec
        self.sync_policy = sync_policy
        self.trace = trace
        self.call_timeout_s = call_timeout_s
        # the core checkpoint settings (export_hf, save_total_limit) every backend save passes on
        self.checkpoint = checkpoint
        # fully async: the weight sync waits for generate calls in flight and holds new ones back
        self.sync_gate = sync_gate
        self.weights_version: int | None = None
        # Where the weights version is reported after each sync (the trainer's metrics of the step).
        self.metrics_sink: Callable[[], dict[str, Any]] | None = None
        self.optimizer_steps = 0
        self._pending_lr: float | None = None
        # False after a weight sync: colocated, the sampler holds the GPUs until training resumes.
        self._training_ready = False
        self._metrics: dict[str, list[float]] = defaultdict(list)  # reported as means
        self._last: dict[str, float] = {}  # reported as the latest value
        self._timings: dict[str, float] = defaultdict(float)
        self._is_stats: list[ISWeightStats] = []  # the IS weights sent since the last pop

    # -- plumbing -----------------------------------------------------------------------------
    def _run(self, coro: Any) -> Any:
        return run(coro, timeout=self.call_timeout_s)

    def _check_model(self, model: str, allowed: tuple[str, ...] = _MODELS) -> None:
        if model not in allowed:
            raise ValueError(
                f"model={model!r}: the Arctic dispatch serves {list(allowed)} only "
                "(no critic: unset trainer.critic.model.path)"
            )

    def _ensure_training(self) -> None:
        """Before the first training-side call after a sync: the core policy's way back (colocated:
        sampler to sleep, trainer awake; otherwise only checked)."""
        if self._training_ready:
            return

        self._run(prepare_for_training(self.backend, self.sync_policy))
        self._training_ready = True

    def _timed(self, name: str, start: float) -> None:
        self._timings[f"arctic/{name}"] += time.perf_counter() - start

    def _record(self, op: str, payload: WirePayload) -> None:
        if self.trace is not None:
            self.trace.record(op, payload, optimizer_steps=self.optimizer_steps)

    def pop_is_weight_stats(self) -> ISWeightStats | None:
        """The statistics of every rollout_is_weights sent since the last call (token-weighted), or
        None when none were sent."""

        stats, self._is_stats = self._is_stats, []
        return combined_is_stats(stats)

    def pop_metrics(self) -> dict[str, float]:
        """Per-step metrics gathered by this dispatch (means over calls; counters as their latest
        value), then cleared."""
        out = {k: sum(v) / len(v) for k, v in self._metrics.items() if v}
        out.update(self._last)
        self._metrics.clear()
        self._last.clear()
        return out

    # -- sizes --------------------------------------------------------------------------------
    def get_lcm_dp_size(self) -> int:
        """Rows must split evenly across the backend's data-parallel ranks x accumulation steps."""
        return self.spec.dp_size * self.spec.grad_accum_steps

    def dp_size(self, model: str) -> int:
        self._check_model(model)
        return self.spec.dp_size

    # -- forward (old and reference log-probs) --------------------------------------------------
    def forward(
        self,
        model: str,
        data: TrainingInputBatch,
        loss_fn: str | None = None,
        loss_fn_config: dict[str, Any] | None = None,
        model_id: str | None = None,
        **worker_kwargs: Any,
    ) -> WorkerOutput:
        """Log-probs of the batch's responses under the policy (`"policy"`) or the backend's frozen
        reference model (`"ref"`), right-aligned per row as SkyRL's workers return them. On a backend
        without forward (Cortex) the policy's are the sampler's rollout log-probs."""

        self._check_model(model)
        self._reject_extras("forward", loss_fn, loss_fn_config, model_id, worker_kwargs)
        if model == "policy" and from_sampler(self.backend):
            # no server forward (Cortex): the old log-probs are the sampler's, already right-aligned
            # like SkyRL's workers' outputs
            start = time.perf_counter()
            values_B_R = sampler_logprobs(
                data.get("rollout_logprobs"), data["response_mask"].cpu(), where="rollout_logprobs"
            )
            self._timed("forward_policy_from_sampler", start)
            return WorkerOutput(
                loss_fn_outputs=[{"logprobs": row.tolist()} for row in values_B_R], metrics={}
            )
        self._ensure_training()
        start = time.perf_counter()
        samples = to_rollout_samples(data, with_advantages=False, with_old=False, with_ref=False)
        # The reference model's entropy is never used: do not make the server compute it.
        spec = self.spec
        if model == "ref":  # (entropy_coeff is not sent with a forward; the spec requires it to follow)
            spec = dataclasses.replace(spec, calculate_entropy=False, entropy_coeff=0.0)
        payload = build_forward_payload(samples, spec)
        self._record("forward_ref" if model == "ref" else "forward", payload)
        out = self._run(self.backend.forward(payload, reference_model=(model == "ref")))
        values_B_R, _mask_B_R = response_logprobs(out.logprobs_B_S, payload, spec)
        rows = to_skyrl_rows(values_B_R, response_lengths(data), data["response_mask"].shape[1])
        self._timed(f"forward_{model}", start)
        return WorkerOutput(loss_fn_outputs=rows, metrics={})

    def stage_data(
        self, model: str, data: TrainingInputBatch, mini_batch_boundaries: list[tuple[int, int]]
    ) -> list[list[TrainingInputBatch]]:
        """Mini-batches as `[[rows]]` (one chunk per mini-batch: the backend splits across its own
        data-parallel ranks). Nothing is put in a Ray object store."""
        self._check_model(model)
        staged = []
        for begin, end in mini_batch_boundaries:
            rows = end - begin
            if rows % self.get_lcm_dp_size():
                raise ValueError(
                    f"mini-batch rows [{begin}, {end}) = {rows} do not split across data-parallel x "
                    f"gradient-accumulation = {self.get_lcm_dp_size()}: make trainer.policy_mini_batch_size x "
                    "generator.n_samples_per_prompt a multiple of it"
                )
            staged.append([data[begin:end]])
        return staged

    def forward_from_staged(
        self,
        model: str,
        chunk_refs: list[TrainingInputBatch],
        loss_fn: str | None = None,
        loss_fn_config: dict[str, Any] | None = None,
        model_id: str | None = None,
        **worker_kwargs: Any,
    ) -> WorkerOutput:
        return self.forward(model, _one_chunk(chunk_refs), loss_fn, loss_fn_config, model_id, **worker_kwargs)

    # -- training -------------------------------------------------------------------------------
    def forward_backward(
        self,
        model: str,
        data: TrainingInputBatch,
        loss_fn: str | None = None,
        loss_fn_config: dict[str, Any] | None = None,
        model_id: str | None = None,
        **worker_kwargs: Any,
    ) -> WorkerOutput:
        """One mini-batch through the Arctic loss; gradients accumulate until `optim_step`."""

        self._check_model(model, ("policy",))
        self._reject_extras("forward_backward", loss_fn, loss_fn_config, model_id, worker_kwargs)
        self._ensure_training()
        start = time.perf_counter()
        with_ref = bool(self.spec.use_kl_loss)
        algorithm = self.cfg.trainer.algorithm
        correction = off_policy_correction(data, algorithm)
        for key, value in correction.metrics.items():
            self._metrics[f"off_policy/{key}"].append(value)
        if correction.is_stats is not None:
            self._is_stats.append(correction.is_stats)
        samples = to_rollout_samples(
            data,
            with_advantages=True,
            with_old=True,
            with_ref=with_ref,
            is_weights_B_R=correction.is_weights_B_R,
            old_B_R=behaviour_logprobs(data, algorithm),
            loss_mask_B_R=correction.loss_mask_B_R,
        )
        payload = build_train_payload(samples, self.spec)
        self._record("forward_backward", payload)
        out = self._run(self.backend.forward_backward(payload))
        if not math.isfinite(out.loss):
            raise FloatingPointError(
                f"Arctic backend returned a non-finite loss {out.loss} at step {self.optimizer_steps}"
            )
        self._timed("forward_backward", start)
        metrics = {
            "policy_loss": float(out.loss),
            **{f"arctic/{k}": float(v) for k, v in out.metrics.items()},
        }
        return WorkerOutput(loss_fn_outputs=[{} for _ in range(len(samples))], metrics=metrics)

    def forward_backward_from_staged(
        self,
        model: str,
        chunk_refs: list[TrainingInputBatch],
        loss_fn: str | None = None,
        loss_fn_config: dict[str, Any] | None = None,
        model_id: str | None = None,
        **worker_kwargs: Any,
    ) -> WorkerOutput:
        return self.forward_backward(
            model, _one_chunk(chunk_refs), loss_fn, loss_fn_config, model_id, **worker_kwargs
        )

    def optim_step(self, model: str, model_id: str | None = None) -> float | None:
        """Optimizer step on the backend; returns the grad norm (SkyRL logs it)."""
        self._check_model(model, ("policy",))
        self._reject_extras("optim_step", None, None, model_id, {})
        self._ensure_training()
        start = time.perf_counter()
        lr, self._pending_lr = self._pending_lr, None
        out = self._run(self.backend.step(learning_rate=lr))
        self._timed("step", start)
        self.optimizer_steps = out.step
        if self.trace is not None:
            self.trace.record_event("step", grad_norm=out.grad_norm, lr=out.learning_rate, step=out.step)
        self._metrics["lr"].append(float(out.learning_rate))
        self._last["optimizer_steps"] = float(out.step)
        for k, v in out.metrics.items():
            self._metrics[f"arctic/step/{k}"].append(float(v))
        return float(out.grad_norm)

    def set_lr(self, model: str, learning_rate: float, model_id: str | None = None) -> None:
        """The learning rate of the next `optim_step` (the backend's schedule is bypassed for it)."""
        self._check_model(model, ("policy",))
        self._reject_extras("set_lr", None, None, model_id, {})
        self._pending_lr = float(learning_rate)

    def set_algorithm_config(self, model: str, **kwargs: Any) -> None:
        raise NotImplementedError(
            f"set_algorithm_config({model!r}, {sorted(kwargs)}): the Arctic loss settings are fixed at "
            "startup from trainer.algorithm.*; restart with the new values"
        )

    # -- weight sync ----------------------------------------------------------------------------
    def init_weight_sync_state(self, inference_engine_client: Any) -> None:
        """Read the backend's state: the sampler's weights version before the first sync."""
        state = self._run(self.backend.state())
        self.weights_version = state.weights_version
        self.optimizer_steps = state.trainer_version

    async def save_weights_for_sampler(self, model_id: str | None = None) -> None:
        """Trainer weights -> sampler through the core weight-sync policy (wake, sync, reset...)."""

        self._reject_extras("save_weights_for_sampler", None, None, model_id, {})
        start = time.perf_counter()
        # The trainer awaits this on its own loop; the backend lives on the core's background loop.
        sync = sync_after_step(self.backend, self.sync_policy)
        if self.sync_gate is not None:
            sync = self.sync_gate.sync(sync)
        self.weights_version = await on_backend_loop(sync, self.call_timeout_s)
        self.last_weight_sync_seconds = time.perf_counter() - start
        self._training_ready = False
        if self.trace is not None:
            self.trace.record_event("sync_weights", weights_version=self.weights_version)
        if self.metrics_sink is not None:
            self.metrics_sink()["arctic/weights_version"] = float(self.weights_version)

    def get_timing_metrics(self) -> dict[str, float]:
        """Seconds spent per backend phase since the last call (SkyRL prefixes `timing/`)."""
        out = dict(self._timings)
        self._timings.clear()
        if self.last_weight_sync_seconds is not None:
            out["sync_weights_only_transfer"] = self.last_weight_sync_seconds
        return out

    # -- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(
        self, model: str, ckpt_dir: str, tokenizer: Any = None, model_id: str | None = None
    ) -> None:
        """Backend checkpoint (weights, optimizer, scheduler, RNG, step) in the run's backend folder
        (`<trainer.ckpt_path>/arctic_backend/checkpoint-<step>`, arctic_rl_core.checkpoint_folder),
        plus a marker in `ckpt_dir` (SkyRL's `global_step_<n>/policy`) naming it, so
        `load_checkpoint(ckpt_dir)` finds it."""
        self._check_model(model, ("policy",))
        self._reject_extras("save_checkpoint", None, None, model_id, {})
        self._ensure_training()
        start = time.perf_counter()
        os.makedirs(ckpt_dir, exist_ok=True)
        # One folder for the run's backend checkpoints, so that the server keeps the newest
        # checkpoint.save_total_limit of them (mapped from trainer.max_ckpts_to_keep; SkyRL's own
        # cleanup keeps as many global_step folders, each with its marker).
        backend_root = os.path.abspath(backend_checkpoint_root(ckpt_dir))
        with backend_save(backend_root, self.optimizer_steps):  # names the step and what a server leaves
            saved = self._run(
                self.backend.save_checkpoint(
                    backend_root,
                    self.optimizer_steps,
                    export_hf=bool(self.checkpoint and self.checkpoint.export_hf),
                    save_total_limit=self.checkpoint.save_total_limit if self.checkpoint else None,
                )
            )
        marker = {
            # relative to this folder, so that a run folder moved elsewhere still resumes
            "backend_path": os.path.relpath(backend_root, ckpt_dir),
            "step": self.optimizer_steps,
            "saved_dir": str(saved) if str(saved).startswith("cortex:") else os.path.relpath(saved, ckpt_dir),
            "weights_version": self.weights_version,
        }
        with open(os.path.join(ckpt_dir, CHECKPOINT_MARKER), "w", encoding="utf-8") as f:
            json.dump(marker, f)
        if self.trace is not None:
            self.trace.record_event("save_checkpoint", path=backend_root, step=self.optimizer_steps)
        if tokenizer is not None:
            tokenizer.save_pretrained(os.path.join(ckpt_dir, "tokenizer"))
        self._timed("save_checkpoint", start)

    def finalize_pending_saves(self, model: str) -> None:
        """Backend saves complete before `save_checkpoint` returns: nothing is ever pending."""
        self._check_model(model, ("policy",))

    def load_checkpoint(
        self,
        model: str,
        ckpt_dir: str,
        load_optimizer_states: bool = True,
        load_lr_scheduler_states: bool = True,
        model_id: str | None = None,
    ) -> None:
        """Restore weights, optimizer, scheduler, RNG and step from a `save_checkpoint` directory."""
        self._check_model(model, ("policy",))
        self._reject_extras("load_checkpoint", None, None, model_id, {})
        if not (load_optimizer_states and load_lr_scheduler_states):
            raise ValueError(
                f"load_checkpoint(load_optimizer_states={load_optimizer_states}, load_lr_scheduler_states="
                f"{load_lr_scheduler_states}): the Arctic backend restores weights, optimizer and schedule "
                "together; pass True for both"
            )
        self._ensure_training()
        marker_path = os.path.join(ckpt_dir, CHECKPOINT_MARKER)
        if not os.path.exists(marker_path):
            raise FileNotFoundError(
                f"{marker_path} not found: {ckpt_dir} was not saved by the Arctic dispatch"
            )
        with open(marker_path, encoding="utf-8") as f:
            marker = json.load(f)
        # relative (resolved from this folder, wherever the run folder now is), or absolute (older runs)
        backend_path = os.path.normpath(os.path.join(ckpt_dir, marker["backend_path"]))
        self._run(self.backend.load_checkpoint(backend_path, int(marker["step"])))
        self.optimizer_steps = int(marker["step"])
        if self.trace is not None:
            self.trace.record_event("load_checkpoint", path=backend_path, step=self.optimizer_steps)

    def save_hf_model(self, model: str, export_dir: str, tokenizer: Any) -> None:
        """SkyRL's HF export (`trainer.hf_save_interval`, into `<export_path>/global_step_<n>/policy`).
        The Arctic server writes Hugging Face weights only with a checkpoint
        (`save_checkpoint(export_hf=True)`), so the export is a backend checkpoint of the current
        step in `export_dir` (`checkpoint-<step>`, its `hf/` the weights, `save_pretrained`), and the
        tokenizer beside it, as SkyRL saves it; `arctic_hf_export.json` names the weights' folder."""
        self._check_model(model, ("policy",))
        self._ensure_training()
        start = time.perf_counter()
        os.makedirs(export_dir, exist_ok=True)
        saved = self._run(
            self.backend.save_checkpoint(
                os.path.abspath(export_dir), self.optimizer_steps, export_hf=True, save_total_limit=None
            )
        )
        with open(os.path.join(export_dir, HF_EXPORT_MARKER), "w", encoding="utf-8") as f:
            json.dump({"hf_dir": os.path.join(str(saved), "hf"), "step": self.optimizer_steps}, f)
        if tokenizer is not None:
            tokenizer.save_pretrained(export_dir)
        if self.trace is not None:
            self.trace.record_event("save_hf_model", path=str(saved), step=self.optimizer_steps)
        self._timed("save_hf_model", start)

    def init_model(self, model: str, model_path: str, num_training_steps: int | None = None) -> None:
        raise NotImplementedError(
            f"init_model({model!r}, {model_path!r}): the backend builds its models at startup; "
            "trainer.update_ref_every_epoch must be false"
        )

    # -- placement, memory, nodes -----------------------------------------------------------------
    def offload_for_sampling(self) -> None:
        """Nothing to offload: placement and sleep/wake are the backend's (weight-sync policy)."""

    def mark_all_offloaded(self) -> None:
        """No SkyRL-side models to track."""

    def mark_as_offloaded(self, model: str) -> None:
        """No SkyRL-side models to track."""

    def empty_cache(self, model: str | None = None) -> None:
        """No device cache lives in this process (the backend manages its own memory)."""

    def get_node_ids(self) -> list[str]:
        """No SkyRL worker nodes: checkpoints are cleaned on the driver only."""
        return []

    def set_inference_engine_client(self, inference_engine_client: Any) -> None:
        super().set_inference_engine_client(inference_engine_client)

    def register_actor_group(self, model: str, actor_group: Any) -> None:
        raise NotImplementedError(f"register_actor_group({model!r}): the Arctic dispatch has no actor groups")

    # -- LoRA adapters (multi-tenant Tinker path) ---------------------------------------------------
    # One adapter per run is trained (trainer.policy.model.lora.* -> training.peft); named adapters are not.
    def ensure_active_adapter(
        self, role: str, model_id: str | None, require_model_resident: bool = True
    ) -> None:
        if model_id is not None:
            raise NotImplementedError(f"ensure_active_adapter({role!r}, {model_id!r}): {_ONE_ADAPTER}")

    def register_adapter(self, role: str, model_id: str) -> None:
        raise NotImplementedError(f"register_adapter({role!r}, {model_id!r}): {_ONE_ADAPTER}")

    def delete_adapter(self, role: str, model_id: str) -> None:
        raise NotImplementedError(f"delete_adapter({role!r}, {model_id!r}): {_ONE_ADAPTER}")

    # -- profiling ---------------------------------------------------------------------------------
    def start_profile(self, model: str, config: dict | None = None, raise_on_error: bool = False) -> None:
        raise NotImplementedError(
            "torch profiling of SkyRL workers: there are none on the Arctic path; set "
            "trainer.policy.torch_profiler_config.enable=false and profile the Arctic server"
        )

    def profile_step(self, model: str) -> list[str | None] | None:
        raise NotImplementedError("profile_step: no SkyRL workers to profile on the Arctic path")

    def stop_profile(self, model: str, raise_on_error: bool = False) -> None:
        raise NotImplementedError("stop_profile: no SkyRL workers to profile on the Arctic path")

    def dump_profiler_summary(self, model: str) -> list | None:
        """No profiler ever runs here, so there is no summary."""
        return None

    # -- argument checks -----------------------------------------------------------------------
    @staticmethod
    def _reject_extras(
        method: str,
        loss_fn: str | None,
        loss_fn_config: dict[str, Any] | None,
        model_id: str | None,
        worker_kwargs: dict[str, Any],
    ) -> None:
        bad = {
            k: v
            for k, v in {"loss_fn": loss_fn, "loss_fn_config": loss_fn_config, "model_id": model_id}.items()
            if v is not None
        }
        bad.update(worker_kwargs)
        if bad:
            raise NotImplementedError(
                f"{method}({bad}): the Arctic loss is configured once from trainer.algorithm.*; "
                "per-call losses, LoRA model ids and worker options are not supported"
            )


def _one_chunk(chunk_refs: list[TrainingInputBatch]) -> TrainingInputBatch:
    if len(chunk_refs) != 1:
        raise ValueError(f"expected one staged chunk per mini-batch (from stage_data), got {len(chunk_refs)}")
    return chunk_refs[0]
