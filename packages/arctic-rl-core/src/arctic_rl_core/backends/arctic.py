"""`ArcticBackend`: the backend protocol over arctic-platform's real async client (0.1.4).

Deployments (from the client config's `backend`): a remote on-prem HTTP server (needs only
`arctic-platform[transport]`), a local server or the in-process Ray server (need the `rl` extra),
or Cortex (`cortex` extra). Version and dependency handling live in `arctic_compat`.

- Construction creates the jobs (sampling, log_prob, training: those with GPUs) with blocking
  HTTP: `ArcticBackend.create(...)` from sync code, `await ArcticBackend.acreate(...)` from async
  code (it runs the constructor in a worker thread). `create` refuses to run on an event loop.
- Payloads: numpy arrays/scalars are converted to torch/Python before sending and every payload
  is checked with `arctic_rl_core.wire.validate_payload`; log-probs come back as float32 CPU
  tensors whatever the transport returned.
- Errors: every call is bounded by the client's `request_timeout` (`backend.request_timeout_s`) on
  every transport; failures raise `arctic_errors.ArcticServerError` (with the server's error body),
  `ArcticTimeoutError` or `ArcticConnectionError`, each naming the op, the job, the payload size and
  the server, and, where the server gives no cause, where its log is.
- State: the 0.1.4 server has no state query, so the clients keep the record of the sleep/wake
  state and the weights/trainer versions in a `StateLedger` (`arctic_state`) that every object
  connected from one handle shares: in this process by default, in a Ray actor
  (`RayStateLedger`) when several processes transition the server (verl's worker and replicas).
  Each transition holds the ledger around check + call + record; asking for a state the server
  is already in sends nothing.
- Cortex (`backend.protocol == "cortex"`): the forward-backward body is Cortex's (`cortex_body`), the
  step result has no metrics (grad_norm NaN), `serves_forward` is False (the adapters' old-log-prob
  pass serves the sampler's log-probs), and forward, load_checkpoint and sleep raise the limit
  (`cortex_limits`) instead of sending an op Cortex lacks; a save is a resumable Cortex checkpoint.
- `shutdown()` is idempotent, closes the HTTP session on the loop and destroys (in a worker
  thread) only jobs this object created; a backend reconnected from a handle destroys nothing.
- Before creating jobs on an on-prem HTTP server, the jobs a stopped run of the same folder left
  there are destroyed, and another run's are refused by name (`arctic_leftovers`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends import arctic_compat, arctic_errors, arctic_leftovers
from arctic_rl_core.backends.arctic_state import LocalStateLedger, RayStateLedger, StateLedger, Transition
from arctic_rl_core.backends.cortex_limits import cortex_limit
from arctic_rl_core.backends.loss_probe import check_server_imports_losses
from arctic_rl_core.backends.protocol import (
    Backend,
    BackendHandle,
    BackendState,
    Completion,
    FinishReason,
    ForwardOutput,
    GenerateOutput,
    InferenceState,
    SamplingParams,
    StepOutput,
    TrainingState,
    TrainOutput,
    WirePayload,
    as_tensor_logprobs,
    string_keyed_to_int,
)
from arctic_rl_core.weight_sync import TRAINING_SLEEP_DEPTH, WeightSyncError

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig
from arctic_rl_core import dispatch
from arctic_rl_core.backends.cortex_body import forward_backward_body, step_result
from arctic_rl_core.config.plan import worker_env
from arctic_rl_core.wire import validate_payload

_TRAINING_SLEEP_MODES = ("non_lp", "lp_params", "all")
_WAKE_TAGS = ("weights", "kv_cache")


@dataclass(frozen=True)
class ArcticHandle(BackendHandle):
    """Picklable: the reconnect client config (job ids set), the Ray server-state handle (Ray
    transport only) and the run's state ledger (a `RayStateLedger` is shared by every process
    that unpickles the handle; a `LocalStateLedger` arrives as a copy)."""

    client_config: Any
    server_state: Any
    colocated: bool
    state_ledger: StateLedger

    def connect(self) -> ArcticBackend:
        client = arctic_compat.create_client(self.client_config, server_state=self.server_state)
        return ArcticBackend(
            client, colocated=self.colocated, owns_jobs=False, state_ledger=self.state_ledger
        )


class ArcticBackend(Backend):
    """The Arctic server through the real client. Build with `create` / `acreate` /
    `from_config`; reach it from another process with `handle().connect()`."""

    def __init__(
        self, client: Any, *, colocated: bool, owns_jobs: bool, state_ledger: StateLedger | None = None
    ) -> None:
        self._client = client
        self._colocated = colocated
        self._owns_jobs = owns_jobs
        self._ledger = state_ledger if state_ledger is not None else LocalStateLedger()
        self._closed = False
        self._onprem = getattr(client.config.backend, "type", "onprem") == "onprem"
        # Cortex (0.1.4 `CortexTransport`): forward-backward, generate, step, save and operation
        # only; no forward / log-probs (old log-probs come from the sampler), no load-checkpoint,
        # no sleep/wake (never colocated)
        self._cortex = getattr(client.config.backend, "protocol", None) == "cortex"
        self._weight_format = arctic_compat.weight_format(client.config)  # "lora" with training.peft

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def create(cls, client_config: Any, *, state_ledger: StateLedger | None = None) -> ArcticBackend:
        """Create (or, with job ids in the config, attach to) the jobs. Blocking: not on a loop.
        `state_ledger`: where the server's state record lives (default: this process only; pass a
        `RayStateLedger` when other processes will connect and transition the server)."""
        if arctic_compat.in_event_loop_thread():
            raise RuntimeError(
                "ArcticBackend.create() does blocking HTTP and would stall the running event loop: "
                "use `await ArcticBackend.acreate(...)` from async code"
            )
        return arctic_compat.bounded_construction(
            lambda config: cls._construct(config, state_ledger), client_config
        )

    @classmethod
    async def acreate(cls, client_config: Any, *, state_ledger: StateLedger | None = None) -> ArcticBackend:
        """`create` in a worker thread, for async callers."""
        return await asyncio.to_thread(
            arctic_compat.bounded_construction,
            lambda config: cls._construct(config, state_ledger),
            client_config,
        )

    @classmethod
    def from_config(cls, cfg: ArcticRLConfig, *, state_ledger: StateLedger | None = None) -> ArcticBackend:
        """`create(cfg.to_client_config())` for backend.kind ray | http | cortex, after putting the
        plan's worker environment (`backend.worker_env`, ARCTIC_INFERENCE_ENABLED) where the
        server's workers inherit it (`arctic_compat.apply_worker_env`). With
        loss.loss_fn=arctic_rl_core on an HTTP server, one probe call then checks that the server can
        import the loss (`loss_probe`) and fails fast, naming the fix."""

        client_config = cfg.to_client_config()
        arctic_compat.require_attention_kernel(client_config, cfg.kernels.attn_implementation)
        arctic_compat.apply_worker_env(client_config, worker_env(cfg))
        backend = cls.create(client_config, state_ledger=state_ledger)
        if cfg.backend.kind == "http" and cfg.loss.loss_fn == "arctic_rl_core":
            try:
                dispatch.run(check_server_imports_losses(backend.forward_no_grad_raw, cfg))
            except BaseException:
                dispatch.run(backend.shutdown())
                raise
        return backend

    @classmethod
    def _construct(cls, client_config: Any, state_ledger: StateLedger | None = None) -> ArcticBackend:
        api = arctic_compat.load_client_api()
        if not isinstance(client_config, api.client_config):
            raise TypeError(
                f"client_config is a {type(client_config).__name__}: pass an arctic_platform.client."
                "ArcticClientConfig (ArcticRLConfig.to_client_config() builds one)"
            )
        owns = arctic_compat.owns_jobs(client_config)
        if owns:  # jobs a stopped run of this folder left (else its /initialize answers 409)
            arctic_leftovers.reclaim(client_config)
        client = arctic_compat.create_client(client_config)
        if owns and _offloads_log_prob(client):
            # colocated: offload the new reference engine until the first reference forward (the
            # 0.1.4 server keeps it on the GPUs the sampler and the trainer share otherwise)
            arctic_compat.log_prob_residency_blocking(client, "sleep-log-prob")
        return cls(
            client,
            colocated=bool(getattr(client_config.backend, "colocate", False)),
            owns_jobs=owns,
            state_ledger=state_ledger,
        )

    # -- inference ------------------------------------------------------------------------------
    async def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> GenerateOutput:
        self._check_open("generate")
        prompts = list(prompts)
        if self._onprem and not all(isinstance(p, str) for p in prompts):
            raise TypeError(
                "the on-prem Arctic server takes text prompts only: decode token-id prompts with the "
                "tokenizer first (Cortex accepts token ids)"
            )
        record = await self._ledger.read()
        if record.inference is not InferenceState.AWAKE:
            raise RuntimeError(
                f"generate() while inference is {record.inference.value}: wake_inference() first"
            )
        version = record.weights_version
        results = await self._call("generate", self._client.generate(prompts, _sampling_params(params)))
        if not isinstance(results, list) or len(results) != len(prompts):
            raise RuntimeError(
                f"generate returned {len(results) if isinstance(results, list) else type(results).__name__} "
                f"results for {len(prompts)} prompts"
            )
        return GenerateOutput([_completion(r, params) for r in results], weights_version=version)

    @property
    def accepts_token_ids(self) -> bool:
        """False on-prem: the 0.1.4 server's /generate takes text prompts only (Cortex takes ids)."""
        return not self._onprem

    # -- training -------------------------------------------------------------------------------
    @property
    def serves_forward(self) -> bool:
        """False on Cortex: it has no forward op (the adapters' old-log-prob pass then serves the
        sampler's rollout log-probs, and reference log-probs are rejected at dry run)."""
        return not self._cortex

    async def forward_no_grad_raw(self, body: dict[str, Any], processing: dict[str, Any]) -> Any:
        """A no-grad forward of a ready body on the training job, the server's answer as it comes
        (the loss-import probe's call: it names a loss, which `forward` refuses)."""
        return await self._call(
            "forward", self._client.fwd_no_grad(body, processing=processing), job_type="training"
        )

    async def forward(self, payload: WirePayload, *, reference_model: bool = False) -> ForwardOutput:
        self._check_open("forward")
        if self._cortex:
            raise NotImplementedError(cortex_limit("forward"))
        payload = _prepared(payload)
        if payload.processing.get("loss_fn") is not None:
            raise ValueError(
                f"forward() needs processing.loss_fn=None, got {payload.processing['loss_fn']!r}: "
                "build it with wire.build_forward_payload"
            )
        if reference_model and getattr(self._client.jobs, "log_prob", None) is None:
            raise ValueError(
                "forward(reference_model=True) needs a log-prob job: allocate log_prob_gpus > 0 "
                "(reference log-probs are computed on a frozen copy of the initial model)"
            )
        body = {"batch": payload.batch, "meta": payload.meta}
        offload = reference_model and self._offloads_log_prob()
        if offload:  # colocated: the reference engine lives on the CPU between reference forwards
            await self._call(
                "wake-log-prob",
                arctic_compat.log_prob_residency(self._client, "wake-log-prob"),
                job_type="log_prob",
            )
        try:
            out = await self._call(
                "forward",
                self._client.fwd_no_grad(
                    body, processing=payload.processing, reference_model=reference_model
                ),
                job_type="log_prob" if reference_model else "training",
                payload=payload,
            )
        finally:
            if offload:
                await self._call(
                    "sleep-log-prob",
                    arctic_compat.log_prob_residency(self._client, "sleep-log-prob"),
                    job_type="log_prob",
                )
        batch = out.get("batch") if isinstance(out, Mapping) else None
        if not isinstance(batch, Mapping) or "logprobs" not in batch:
            keys = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
            raise RuntimeError(f"forward response has no batch.logprobs (batch: {keys})")
        entropy = batch.get("entropy")
        return ForwardOutput(
            logprobs_B_S=as_tensor_logprobs(batch["logprobs"]),
            entropy_B_S=None if entropy is None else as_tensor_logprobs(entropy),
            metrics=_float_metrics(out.get("metrics")),
        )

    async def forward_backward(self, payload: WirePayload) -> TrainOutput:
        self._check_open("forward_backward")
        payload = _prepared(payload)
        if payload.processing.get("loss_fn") is None:
            raise ValueError(
                "forward_backward() needs a loss: build the payload with wire.build_train_payload"
            )
        training = (await self._ledger.read()).training
        if training is not TrainingState.AWAKE:
            raise RuntimeError(
                f"forward_backward() while training is {training.value}: wake_training() first"
            )
        if self._cortex:
            request = self._client.fwd_bwd(forward_backward_body(payload))
        else:
            body = {"batch": payload.batch, "meta": payload.meta}
            request = self._client.fwd_bwd(body, processing=payload.processing)
        out = await self._call("forward-backward", request, payload=payload)
        return TrainOutput(loss=float(out["avg_loss"]), metrics=_float_metrics(out.get("metrics")))

    async def step(self, learning_rate: float | None = None) -> StepOutput:
        self._check_open("step")
        async with self._ledger.exclusive():
            training = (await self._ledger.read()).training
            if training is not TrainingState.AWAKE:
                raise RuntimeError(f"step() while training is {training.value}: wake_training() first")
            out = await self._call("step", self._client.step(learning_rate))
            record = await self._ledger.record(Transition("step"))
        if self._cortex:  # {"global_steps", "last_lr"}: no metrics dict, no gradient norm
            lr, _server_steps, extras = step_result(out)
            return StepOutput(
                grad_norm=math.nan, learning_rate=lr, step=record.trainer_version, metrics=extras
            )
        metrics = out.get("metrics") or {}
        return StepOutput(
            grad_norm=_mean_leaf(metrics.get("grad_norm"), "grad_norm"),
            learning_rate=_first_leaf(metrics.get("last_lr"), "last_lr"),
            step=record.trainer_version,
            metrics=_float_metrics(metrics),
        )

    # -- weight sync and memory -------------------------------------------------------------------
    async def sync_weights(self, *, cuda_ipc: bool | None = None, low_memory: bool | None = None) -> int:
        self._check_open("sync_weights")
        if not self._colocated and (cuda_ipc or low_memory):
            raise ValueError(
                "cuda_ipc / low_memory apply to colocated servers only (this one syncs over NCCL)"
            )
        async with self._ledger.exclusive():
            if (await self._ledger.read()).inference is InferenceState.ASLEEP:
                raise WeightSyncError(
                    "sync_weights() while inference is asleep: wake_inference(['weights']) first"
                )
            await self._call(
                "weight-sync",
                arctic_compat.transfer_weights(
                    self._client, cuda_ipc=cuda_ipc, low_memory=low_memory, weight_format=self._weight_format
                ),
            )
            record = await self._ledger.record(Transition("sync_weights"))
        return record.weights_version

    async def sleep_inference(self, level: int = 1) -> None:
        if level not in (1, 2):
            raise ValueError(f"sleep_inference(level={level}): vLLM sleep levels are 1 and 2")
        if self._cortex:
            raise NotImplementedError(cortex_limit("sleep-inference"))
        async with self._ledger.exclusive():
            if (await self._ledger.read()).inference is InferenceState.ASLEEP:
                return  # another process of the run put it to sleep
            await self._call("sleep-inference", self._client.sleep_inference(level))
            await self._ledger.record(Transition("sleep_inference"))

    async def wake_inference(self, tags: Sequence[str] | None = None) -> None:
        wanted = set(_WAKE_TAGS if tags is None else tags)
        unknown = wanted - set(_WAKE_TAGS)
        if unknown or not wanted:
            raise ValueError(
                f"wake_inference(tags={tags!r}): tags are 'weights' and/or 'kv_cache' (None: both)"
            )
        async with self._ledger.exclusive():
            inference = (await self._ledger.read()).inference
            if wanted == {"kv_cache"} and inference is InferenceState.ASLEEP:
                raise RuntimeError(
                    "wake_inference(['kv_cache']) while the weights are asleep: wake 'weights' first"
                )
            if inference is InferenceState.AWAKE or (
                wanted == {"weights"} and inference is InferenceState.WEIGHTS_ONLY
            ):
                return  # already as asked
            tag_list = None if tags is None else list(tags)
            await self._call("wake-inference", self._client.wake_inference(tag_list))
            await self._ledger.record(
                Transition("wake_inference", tags=None if tag_list is None else tuple(tag_list))
            )

    async def sleep_training(self, mode: str = "all") -> None:
        if mode not in _TRAINING_SLEEP_MODES:
            raise ValueError(
                f"sleep_training(mode={mode!r}): expected one of {', '.join(_TRAINING_SLEEP_MODES)}"
            )
        if self._cortex:
            raise NotImplementedError(cortex_limit("sleep-training"))
        async with self._ledger.exclusive():
            training = (await self._ledger.read()).training
            if TRAINING_SLEEP_DEPTH[training] >= TRAINING_SLEEP_DEPTH[TrainingState(mode)]:
                return  # already at least that deep
            await self._call("sleep-training", self._client.sleep_training(mode))
            await self._ledger.record(Transition("sleep_training", mode=mode))

    async def wake_training(self) -> None:
        async with self._ledger.exclusive():
            if (await self._ledger.read()).training is TrainingState.AWAKE:
                return
            await self._call("wake-training", self._client.wake_training())
            await self._ledger.record(Transition("wake_training"))

    async def reset_prefix_cache(self) -> None:
        await self._call("reset-prefix-cache", self._client.reset_prefix_cache())

    async def state(self) -> BackendState:
        record = await self._ledger.read()
        return BackendState(
            inference=record.inference,
            training=record.training,
            weights_version=record.weights_version,
            trainer_version=record.trainer_version,
            colocated=self._colocated,
        )

    async def state_history(self) -> list[str]:
        """The transitions the run's clients have sent, oldest first (from the shared ledger)."""
        return await self._ledger.history()

    # -- checkpoints ----------------------------------------------------------------------------
    async def save_checkpoint(
        self, path: str, step: int, *, export_hf: bool = False, save_total_limit: int | None = None
    ) -> str:
        if self._cortex:
            return await self._save_on_cortex(step, export_hf=export_hf, save_total_limit=save_total_limit)
        out = await self._call(
            "save",
            self._client.save_checkpoint(
                path=path, step=step, export_hf=export_hf, save_total_limit=save_total_limit
            ),
        )
        saved = out.get("path") if isinstance(out, Mapping) else None
        return str(saved or path)

    async def _save_on_cortex(self, step: int, *, export_hf: bool, save_total_limit: int | None) -> str:
        """A resumable checkpoint in Cortex's store, named `global_step<step>` (Cortex's own naming);
        returns `cortex:<checkpoint_id>` with the id the server reports (authoritative: the control
        plane may not forward the requested one)."""
        if export_hf:
            raise ValueError(cortex_limit("export_hf"))
        if save_total_limit is not None:
            raise ValueError(cortex_limit("save_total_limit"))
        requested = f"global_step{int(step)}"
        out = await self._call(
            "save", self._client.save_checkpoint(checkpoint_id=requested, checkpoint_type="resumable")
        )
        saved = out.get("checkpoint_id") if isinstance(out, Mapping) else None
        return f"cortex:{saved or requested}"

    async def load_checkpoint(self, path: str, step: int) -> None:
        if self._cortex:
            raise NotImplementedError(cortex_limit("load-checkpoint"))
        async with self._ledger.exclusive():
            out = await self._call("load-checkpoint", self._client.load_checkpoint(path, step=step))
            restored = out.get("global_step", step) if isinstance(out, Mapping) else step
            await self._ledger.record(Transition("load_checkpoint", step=int(restored)))

    # -- lifecycle ------------------------------------------------------------------------------
    def handle(self) -> ArcticHandle:
        if self._closed:
            raise RuntimeError("handle() of a shut-down ArcticBackend")
        return ArcticHandle(
            client_config=arctic_compat.reconnect_config(self._client),
            server_state=arctic_compat.server_state(self._client),
            colocated=self._colocated,
            state_ledger=self._ledger,
        )

    async def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await arctic_compat.close_session(self._client)
        finally:
            if self._owns_jobs:
                await self._call("destroy", asyncio.to_thread(arctic_compat.destroy_jobs, self._client))
            await asyncio.to_thread(arctic_compat.release_connections, self._client)

    @property
    def owns_jobs(self) -> bool:
        return self._owns_jobs

    def _offloads_log_prob(self) -> bool:
        return _offloads_log_prob(self._client)

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise RuntimeError(f"{op}() on a shut-down ArcticBackend")

    async def _call(
        self, op: str, awaitable: Any, *, job_type: str | None = None, payload: WirePayload | None = None
    ) -> Any:
        """Await one client call, bounded by the client's `request_timeout` on every transport
        (0.1.4's Ray `acall` has none); failures name the op, the job, the payload size and the
        server (`arctic_errors`)."""
        if self._closed and op != "destroy":
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise RuntimeError(f"{op} on a shut-down ArcticBackend")
        timeout = float(self._client.config.request_timeout)
        try:
            return await asyncio.wait_for(awaitable, timeout)
        except arctic_errors.ArcticServerError as exc:
            raise arctic_errors.ArcticServerError(
                op, exc.status, exc.body, self._context(op, job_type, payload)
            ) from exc
        except TimeoutError as exc:
            raise arctic_errors.timeout_error(self._context(op, job_type, payload), timeout) from exc
        except Exception as exc:
            context = self._context(op, job_type, payload)
            status = getattr(exc, "status", None)
            if isinstance(status, int) and type(exc).__name__ == "ClientResponseError":
                raise arctic_errors.ArcticServerError(
                    op, status, str(getattr(exc, "message", exc)), context
                ) from exc
            if _is_connection_failure(exc):
                raise arctic_errors.connection_error(context, exc) from exc
            raise

    def _context(
        self, op: str, job_type: str | None, payload: WirePayload | None
    ) -> arctic_errors.CallContext:
        size = None if payload is None else _tensor_bytes(payload.batch)
        return arctic_compat.call_context(self._client, op, job_type=job_type, payload_bytes=size)


def _offloads_log_prob(client: Any) -> bool:
    """Colocated on-prem servers with a DeepSpeed log-prob job offload it between reference forwards."""
    backend = client.config.backend
    return (
        bool(getattr(backend, "colocate", False))
        and getattr(backend, "type", "onprem") == "onprem"
        and getattr(client.jobs, "log_prob", None) is not None
        and client.config.sampling.log_prob_engine == "deepspeed"
    )


def _is_connection_failure(exc: BaseException) -> bool:
    """aiohttp's ServerDisconnectedError / ClientConnectionError, requests' ConnectionError,
    OSError-level resets, and a Ray actor that died (the server process is gone)."""
    if isinstance(exc, ConnectionError):
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(
        names
        & {
            "ClientConnectionError",
            "ServerDisconnectedError",
            "ClientOSError",
            "RayActorError",
            "ActorDiedError",
        }
    ) or (type(exc).__module__.startswith("requests") and "ConnectionError" in names)


def _tensor_bytes(value: Any) -> int:
    if hasattr(value, "nbytes") and hasattr(value, "dtype"):
        return int(value.nbytes)
    if isinstance(value, Mapping):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


# ----------------------------------------------------------------------------------------------
# Conversions
# ----------------------------------------------------------------------------------------------


def _prepared(payload: WirePayload) -> WirePayload:
    """numpy -> torch / Python (the wire codec takes torch tensors only), then the contract check."""

    if not isinstance(payload, WirePayload):
        raise TypeError(f"expected a WirePayload, got {type(payload).__name__}")
    converted = dataclasses.replace(
        payload,
        batch=_to_wire(payload.batch),
        meta=_to_wire(payload.meta),
        processing=_to_wire(payload.processing),
    )
    validate_payload(converted)
    return converted


def _to_wire(value: Any) -> Any:
    import numpy as np
    import torch

    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {key: _to_wire(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_wire(item) for item in value)
    return value


def _sampling_params(params: SamplingParams) -> dict[str, Any]:
    """vLLM sampling params as the server passes them on; `logprobs: 0` asks for the sampled
    token's log-prob only; `stop_token_ids` only when some are set."""
    out: dict[str, Any] = {
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "stop": list(params.stop),
        "seed": params.seed,
        "logprobs": 0 if params.logprobs else None,
    }
    if params.stop_token_ids:
        out["stop_token_ids"] = list(params.stop_token_ids)
    return out


def _completion(result: Mapping[str, Any], params: SamplingParams) -> Completion:
    token_ids = tuple(int(t) for t in result["token_ids"])
    try:
        finish = FinishReason(str(result.get("finish_reason")))
    except ValueError:
        raise RuntimeError(f"unknown finish_reason {result.get('finish_reason')!r} from the server") from None
    logprobs = None
    if params.logprobs:
        entries = result.get("logprobs")
        if not isinstance(entries, list) or len(entries) != len(token_ids):
            raise RuntimeError(
                "generate asked for log-probs but the server returned none (or the wrong number)"
            )
        logprobs = tuple(
            _sampled_logprob(entry, token) for entry, token in zip(entries, token_ids, strict=True)
        )
    prompt_ids = result.get("prompt_token_ids")
    return Completion(
        text=str(result.get("text", "")),
        token_ids=token_ids,
        finish_reason=finish,
        prompt_len=int(result.get("prompt_len", 0)),
        generation_len=int(result.get("generation_len", len(token_ids))),
        prompt_token_ids=None if prompt_ids is None else tuple(int(t) for t in prompt_ids),
        logprobs=logprobs,
        prefix_cache_len=int(result.get("prefix_cache_len") or 0),
    )


def _sampled_logprob(entry: Any, token: int) -> float:
    """One position of vLLM's `{token_id: {"logprob", "rank"}}` (keys are strings over JSON)."""
    if isinstance(entry, (int, float)):
        return float(entry)
    by_token = string_keyed_to_int(entry)
    if token not in by_token:
        raise RuntimeError(f"log-prob entry lacks the sampled token {token} (has {sorted(by_token)[:5]})")
    value = by_token[token]
    return float(value["logprob"] if isinstance(value, Mapping) else value)


def _leaves(value: Any) -> list[float]:
    if isinstance(value, bool):
        return [float(value)]
    if isinstance(value, (int, float)):
        return [float(value)]
    if hasattr(value, "tolist"):
        return _leaves(value.tolist())
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return []


def _mean_leaf(value: Any, name: str) -> float:
    leaves = _leaves(value)
    if not leaves:
        raise RuntimeError(f"step response has no numeric metrics.{name} ({value!r})")
    return sum(leaves) / len(leaves)


def _first_leaf(value: Any, name: str) -> float:
    leaves = _leaves(value)
    if not leaves:
        raise RuntimeError(f"step response has no numeric metrics.{name} ({value!r})")
    return leaves[0]


def _float_metrics(metrics: Any, prefix: str = "") -> dict[str, float]:
    """Numbers as floats; per-rank lists as their mean; nested dicts as `outer/inner`; anything
    non-numeric is left out."""
    out: dict[str, float] = {}
    if not isinstance(metrics, Mapping):
        return out
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_float_metrics(value, prefix=f"{name}/"))
            continue
        leaves = _leaves(value)
        if leaves:
            out[name] = sum(leaves) / len(leaves)
    return out


def create_backend(cfg: ArcticRLConfig, *, shared: bool) -> ArcticBackend:
    """`backend.kind` ray | http | cortex in the backend registry (`backends.registry`):
    `ArcticBackend.from_config`; `shared`: with a `RayStateLedger`, so every process of the job that
    connects through `handle()` reads and transitions one record of the server's state (needs Ray)."""
    return ArcticBackend.from_config(cfg, state_ledger=RayStateLedger.start() if shared else None)
