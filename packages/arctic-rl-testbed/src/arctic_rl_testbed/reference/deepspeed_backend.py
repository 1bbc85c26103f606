"""`DeepSpeedReferenceBackend`: the reference engine with `trainer="deepspeed"`: its training side is
arctic-platform 0.1.4's own server code driving its own `DeepSpeedWorker`s on the CPU
(`deepspeed_server_jobs`), its sampler stays the engine's (the stand-in for vLLM).

What runs where:
- **Training job** (started on first use, or by `start_training_job` with a client's `/initialize`
  body): forward-backward, forward, step, save (with HF export), load go through the 0.1.4 server's
  route functions to the real workers (one process per data-parallel rank). The engine still validates
  every payload first (`validation`: the guard the real server lacks) and keeps its sleep/wake state
  machine.
- **Log-prob job** (the reference model: `forward(reference_model=True)`, the DeepSpeed `/log-probs`):
  a second real job, started on first use or by `start_log_prob_job`.
- **Weight sync**: the workers' half of the 0.1.4 colocated CPU-file sync (`gather_and_save_state_dict`),
  loaded into the sampler in place of vLLM's `load_weights_from_shm_path`. Every sync sends the real
  workers' weights (bf16, as the worker loads the model).
- **Not here**: vLLM-style prompt log-probs (a vLLM log-prob job) stay the engine's frozen torch
  reference; LoRA (the 0.1.4 worker trains full weights) is refused.

The sampler and the engine's torch reference start from the workers' initial weights rounded to bf16
(the worker always loads bf16), so that weights version 0 samples what a bf16 server would.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.protocol import (
    ForwardOutput,
    InferenceState,
    StepOutput,
    TrainOutput,
    WirePayload,
)

from arctic_rl_testbed.reference.checkpoint import check_save_total_limit
from arctic_rl_testbed.reference.deepspeed_job_bodies import grad_accum_steps_of, log_prob_body, training_body
from arctic_rl_testbed.reference.deepspeed_server_jobs import ServerJobs
from arctic_rl_testbed.reference.engine import ReferenceBackend, SyncReport, TrainResult
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings
from arctic_rl_testbed.reference.validation import parse_payload
from arctic_rl_testbed.reference.weight_transfer import TransferReport

if TYPE_CHECKING:
    import torch

SAMPLER_RNG_FILE = "sampler_rng.pt"  # the engine's own state beside a DeepSpeed checkpoint


def create_reference_backend(settings: ReferenceEngineSettings | None = None) -> ReferenceBackend:
    """The reference engine for `settings.trainer`: `ReferenceBackend` (torch) or `DeepSpeedReferenceBackend`."""
    settings = settings or ReferenceEngineSettings()
    if settings.trainer == "deepspeed":
        return DeepSpeedReferenceBackend(settings)
    return ReferenceBackend(settings)


def payload_dict(payload: WirePayload | dict[str, Any]) -> dict[str, Any]:
    """The `{batch, meta, processing}` dict a client sends as the DSSST1 body."""
    if isinstance(payload, WirePayload):
        batch = payload.batch if isinstance(payload.batch, list) else dict(payload.batch)
        return {"batch": batch, "meta": dict(payload.meta), "processing": dict(payload.processing)}
    return dict(payload)


class DeepSpeedReferenceBackend(ReferenceBackend):
    """The reference engine trained by arctic-platform 0.1.4's own code (module docstring)."""

    def __init__(self, settings: ReferenceEngineSettings | None = None) -> None:
        settings = settings or ReferenceEngineSettings(trainer="deepspeed")
        if settings.trainer != "deepspeed":
            raise ValueError(
                f"DeepSpeedReferenceBackend with trainer={settings.trainer!r}: set trainer='deepspeed'"
            )
        super().__init__(settings)
        self._scratch = Path(tempfile.mkdtemp(prefix="arctic-rl-deepspeed-"))
        self._jobs: ServerJobs | None = None
        self._training_job: int | None = None
        self._log_prob_job: int | None = None
        try:
            self._model_dir = self._initial_model_dir()
            self._round_to_bf16()
            self._jobs = ServerJobs(
                training_gpus=self.settings.dp_size,
                log_prob_gpus=1,
                num_threads=self.settings.num_threads or 1,
            )
        except BaseException:
            asyncio.run(super().shutdown())
            shutil.rmtree(self._scratch, ignore_errors=True)
            raise

    def _initial_model_dir(self) -> str:
        """The directory the workers load: `model.model_path`, else the engine's tiny model saved here."""
        if self.settings.model.model_path is not None:
            return self.settings.model.model_path
        directory = self._scratch / "model"
        self._trainer.save_pretrained(str(directory))
        self.tokenizer.save_pretrained(str(directory))
        return str(directory)

    def _round_to_bf16(self) -> None:
        import torch

        with torch.no_grad():
            for model in (self._sampler, self._reference, self._trainer):
                for param in model.parameters():
                    param.copy_(param.to(torch.bfloat16).to(param.dtype))

    @property
    def server_jobs(self) -> ServerJobs:
        if self._jobs is None:
            raise RuntimeError("the DeepSpeed trainer is shut down: create a new engine")
        return self._jobs

    @property
    def model_dir(self) -> str:
        """The model directory the workers load (a job body's model_name)."""
        return self._model_dir

    # -- jobs ---------------------------------------------------------------------------------------
    async def start_training_job(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create the training job from a client's `/initialize` body (its `model_name` replaced by the
        engine's model directory); returns the 0.1.4 server's job info."""
        return await self._run(self._start_training, dict(body))

    def _start_training(self, body: dict[str, Any]) -> dict[str, Any]:
        if self._training_job is not None:
            raise RuntimeError("the DeepSpeed training job is already running")
        body["model_name"] = self._model_dir
        answer = self.server_jobs.initialize(body)
        self._training_job = int(answer["job_id"])
        gas = grad_accum_steps_of(body.get("ds_config") or {}, self.settings.dp_size)
        self.settings = self.settings.model_copy(update={"grad_accum_steps": gas})
        return self.server_jobs.state.jobs[self._training_job]

    async def start_log_prob_job(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create the log-prob (reference) job from a client's `/initialize` body."""
        return await self._run(self._start_log_prob, dict(body))

    def _start_log_prob(self, body: dict[str, Any]) -> dict[str, Any]:
        if self._log_prob_job is not None:
            raise RuntimeError("the DeepSpeed log-prob job is already running")
        body["model_name"] = self._model_dir
        answer = self.server_jobs.initialize(body)
        self._log_prob_job = int(answer["job_id"])
        return self.server_jobs.state.jobs[self._log_prob_job]

    def _training(self) -> int:
        if self._training_job is None:
            self._start_training(training_body(self.settings, self._model_dir, str(self._scratch / "jobs")))
        assert self._training_job is not None
        return self._training_job

    def _log_prob(self) -> int:
        if self._log_prob_job is None:
            self._start_log_prob(log_prob_body(self.settings, self._model_dir))
        assert self._log_prob_job is not None
        return self._log_prob_job

    # -- training -------------------------------------------------------------------------------------
    def _parse(self, payload, op: str, *, reference_model: bool = False):
        """The engine's payload checks (the real server has none), for the job's ranks and micro-batches:
        the log-prob job has one rank and no gradient accumulation."""

        return parse_payload(
            payload,
            op=op,
            dp_size=1 if reference_model else self.settings.dp_size,
            grad_accum_steps=1 if reference_model else self.settings.grad_accum_steps,
            vocab_size=self.vocab_size,
            honour_clip_ratios=False,  # the 0.1.4 loss always clips at 0.2 / 0.2 / 3.0
        )

    def _forward(self, payload, reference_model: bool) -> ForwardOutput:
        if not reference_model:
            self._state.check_trainer_forward()
        self._parse(payload, "forward", reference_model=reference_model)
        job = self._log_prob() if reference_model else self._training()
        answer = self.server_jobs.forward(job, payload_dict(payload))
        batch = answer["batch"]
        return ForwardOutput(
            logprobs_B_S=batch["logprobs"], entropy_B_S=batch.get("entropy"), metrics=dict(answer["metrics"])
        )

    def _train(self, payload) -> TrainResult:
        self._state.check_training("forward_backward")
        job = (
            self._training()
        )  # first: its ds_config sets the gradient accumulation the payload is checked for
        self._parse(payload, "train")
        answer = self.server_jobs.forward_backward(job, payload_dict(payload))
        self._has_grads = True
        batch = answer.get("batch") or {}
        output = TrainOutput(loss=float(answer["avg_loss"]), metrics=dict(answer["metrics"]))
        return TrainResult(output, batch.get("logprobs"), batch.get("entropy"))

    def _step(self, learning_rate: float | None) -> StepOutput:
        self._check_step(learning_rate)
        answer = self.server_jobs.step(self._training())
        self._has_grads = False
        self._global_step += 1
        metrics = {k: float(v) for k, v in answer["metrics"].items() if isinstance(v, int | float)}
        grad_norm = metrics.get("grad_norm", 0.0)
        return StepOutput(
            grad_norm=grad_norm, learning_rate=metrics["last_lr"], step=self._global_step, metrics=metrics
        )

    def _configure_training(self, optimizer, schedule, grad_accum_steps) -> None:
        if self._training_job is not None:
            raise RuntimeError(
                "configure_training after the DeepSpeed training job started: its ds_config is fixed at /initialize"
            )
        super()._configure_training(optimizer, schedule, grad_accum_steps)

    # -- weight sync ----------------------------------------------------------------------------------
    def trainer_parameters(self) -> dict[str, torch.Tensor]:
        """The workers' weights (bf16), gathered as a weight sync gathers them."""
        return dict(self.server_jobs.export_weights(self._training()))

    def _sync(self, cuda_ipc: bool | None, low_memory: bool | None, weight_format: str | None) -> SyncReport:
        if weight_format not in (None, "vllm", "hf"):
            raise ValueError(
                f"weight_format={weight_format!r}: the DeepSpeed trainer syncs full weights ('vllm', 'hf' or None)"
            )
        ipc, low = self._sync_strategy(cuda_ipc, low_memory)
        if (
            self._state.inference == InferenceState.ASLEEP
        ):  # only without the state guard (see the torch engine)
            return SyncReport(self._weights_version, TransferReport(0, 0, 0), ipc, low, "full")
        weights = self.server_jobs.export_weights(self._training())
        report = _load_into(self._sampler, weights)
        self._weights_version = self._global_step
        self._state.synced()
        self._last_sync = SyncReport(self._weights_version, report, ipc, low, "full")
        return self._last_sync

    # -- checkpoints ----------------------------------------------------------------------------------
    async def save_checkpoint(
        self, path: str, step: int, *, export_hf: bool = False, save_total_limit: int | None = None
    ) -> str:
        """The 0.1.4 server's `/save` with path, step, export_hf and save_total_limit (its own
        `checkpoint-<step>` folder, `latest` pointer and pruning), plus the sampler's RNG beside it."""

        check_save_total_limit(save_total_limit)
        request = {
            "path": str(path),
            "step": int(step),
            "export_hf": export_hf,
            "save_total_limit": save_total_limit,
        }
        answer = await self._run(self._with_sampler_lock, self._server_save, request, None)
        return str(answer["path"])

    async def server_save(
        self, request: dict[str, Any], extra: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The 0.1.4 server's `/save` with this `SaveRequest` body; its answer (path, hf_path, global_step)."""
        answer = await self._run(self._with_sampler_lock, self._server_save, dict(request), extra)
        return {key: answer[key] for key in ("path", "hf_path", "global_step")}

    async def load_checkpoint(self, path: str, step: int) -> None:
        await self._run(self._with_sampler_lock, self._server_load, {"path": str(path), "step": int(step)})

    def _save(self, directory: Path, export_hf: bool, extra: dict[str, Any] | None) -> int:
        answer = self._server_save({"path": str(directory), "export_hf": export_hf}, extra)
        return int(answer["global_step"])

    def _server_save(self, request: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
        import torch

        self._state.check_training("save_checkpoint")
        if self._has_grads:
            raise RuntimeError(
                "save_checkpoint with gradients accumulated since the last step: they are not saved; step() first"
            )
        answer = self.server_jobs.save(self._training(), **request)
        if answer.get("hf_path"):
            # 0.1.4's HF export writes the model only; the tokenizer makes the folder loadable as a model
            # (what the demo's warm start hands to the framework), as the torch engine's export is
            self.tokenizer.save_pretrained(answer["hf_path"])
        torch.save(
            {"sampler_rng": self._sampler_rng_state(), "global_step": self._global_step, "extra": extra},
            Path(answer["path"]) / SAMPLER_RNG_FILE,
        )
        return answer

    def _load(self, directory: Path) -> int:
        return self._server_load({"path": str(directory)})

    def _server_load(self, request: dict[str, Any]) -> int:
        import torch

        self._state.check_training("load_checkpoint")
        answer = self.server_jobs.load_checkpoint(self._training(), **request)
        if not answer["global_step"]:
            raise FileNotFoundError(f"no DeepSpeed checkpoint at {answer['path']}: nothing was loaded")
        own = Path(answer["path"]) / SAMPLER_RNG_FILE
        if own.is_file():
            state = torch.load(own, weights_only=True)
            self._set_sampler_rng_state(state["sampler_rng"])
        self._global_step = int(answer["global_step"])
        self._has_grads = False
        return self._global_step

    # -- sleep / wake of the jobs ---------------------------------------------------------------------
    async def sleep_training(self, mode: str = "all") -> None:
        """The state machine's checks, then what 0.1.4's `/sleep-training` runs on every rank: `all` ->
        `offload_to_cpu`, `non_lp` -> `offload_non_lp_states`, `lp_params` -> `offload_lp_params`."""
        await self._run(self._sleep_training, mode)

    def _sleep_training(self, mode: str) -> None:
        self._state.sleep_training(mode)
        if self._training_job is not None:
            method = {"non_lp": "offload_non_lp_states", "lp_params": "offload_lp_params"}.get(
                mode, "offload_to_cpu"
            )
            self.server_jobs.call_ranks(self._training_job, method)

    async def wake_training(self) -> None:
        await self._run(self._wake_training)

    def _wake_training(self) -> None:
        self._state.wake_training()
        if self._training_job is not None:
            self.server_jobs.call_ranks(self._training_job, "backload_to_gpu")

    async def set_log_prob_residency(self, *, offloaded: bool) -> list[dict[str, Any]]:
        """0.1.4's `/sleep-log-prob` (`offload_to_cpu`) or `/wake-log-prob` (`backload_to_gpu`) on the
        log-prob job's ranks; their answers."""
        method = "offload_to_cpu" if offloaded else "backload_to_gpu"
        return await self._run(lambda: self.server_jobs.call_ranks(self._log_prob(), method))

    # -- log-prob job ---------------------------------------------------------------------------------
    def _reference_token_logprobs(self, texts: list[str]) -> torch.Tensor:
        return self.server_jobs.log_probs(self._log_prob(), texts)

    # -- lifecycle ------------------------------------------------------------------------------------
    async def shutdown(self) -> None:
        if self._closed:
            return
        await super().shutdown()
        jobs, self._jobs = self._jobs, None
        if jobs is not None:
            await asyncio.to_thread(jobs.close)
        shutil.rmtree(self._scratch, ignore_errors=True)

    def worker_pids(self) -> Sequence[int | None]:
        """Process ids of the running DeepSpeed workers (training ranks, then log-prob ranks)."""
        return [] if self._jobs is None else [p.pid for p in self._jobs.processes]


def _load_into(sampler, weights: list[tuple[str, Any]]):
    """Copy the workers' (name, tensor) pairs into the sampler by name (the receiving side of the sync)."""
    import torch

    params = dict(sampler.named_parameters())
    names = [name for name, _ in weights]
    if sorted(names) != sorted(params):
        missing = sorted(set(names) ^ set(params))
        raise ValueError(f"the workers' weights and the sampler's parameters differ by name: {missing[:5]}")
    total = 0
    with torch.no_grad():
        for name, tensor in weights:
            dest = params[name]
            if tuple(dest.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"parameter {name}: workers {tuple(tensor.shape)} vs sampler {tuple(dest.shape)}"
                )
            dest.copy_(tensor.to(dtype=dest.dtype, device=dest.device))
            total += tensor.numel() * tensor.element_size()
    return TransferReport(num_buckets=1, num_tensors=len(weights), num_bytes=total)
