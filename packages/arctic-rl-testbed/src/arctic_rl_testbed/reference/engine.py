"""`ReferenceBackend`: the Arctic server's contract in one process, on CPU, with a tiny model.

Three copies of the model: the trainer (AdamW), the sampler (receives the trainer's weights only
through `sync_weights`, bucket by bucket) and a frozen reference (the initial weights, for
`forward(reference_model=True)`). The weights version is the trainer step whose weights the sampler
serves: 0 at start, the trainer's step count after each sync (what `weight_sync` checks).

Two worker threads per engine, so the event loop stays free: the sampler's (generation) and the
trainer's (everything else). Calls awaited one after another run in call order with deterministic
results, exactly as on one thread; a generate call issued while the trainer computes really overlaps
it (torch releases the GIL inside its kernels; with `num_threads=1` each side keeps one core), as the
separate sampling and training GPUs of the Arctic server do (asynchronous GRPO). The sampler lock
makes a weight sync, a checkpoint save/load (the sampler's RNG) and a sleep/wake of the sampler wait for the generate call in
flight to finish: a rollout's weights version is the one it was sampled with from start to end. See `validation` for the payload rules,
`pipeline` for the forward/loss semantics, `sleep_state` for the sleep/wake rules.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from arctic_rl_core.backends.protocol import (
    Backend,
    BackendHandle,
    BackendState,
    Completion,
    ForwardOutput,
    GenerateOutput,
    InferenceState,
    SamplingParams,
    StepOutput,
    TrainOutput,
    WirePayload,
)

from arctic_rl_testbed.reference.borrowed import BorrowedBackend
from arctic_rl_testbed.reference.checkpoint import (
    CheckpointWriteError,
    check_save_total_limit,
    load_checkpoint,
    prune_checkpoint_dirs,
    save_checkpoint,
    write_latest,
)
from arctic_rl_testbed.reference.lora import is_adapter, with_adapters
from arctic_rl_testbed.reference.loss import combine_metrics
from arctic_rl_testbed.reference.model import build_model, load_tokenizer
from arctic_rl_testbed.reference.pipeline import (
    call_server_loss,
    micro_loss,
    model_logits,
    run_posts,
    wire_view,
)
from arctic_rl_testbed.reference.sampler import _top_entries, sample, teacher_forced_logprobs
from arctic_rl_testbed.reference.sampler_process import SamplerProcess
from arctic_rl_testbed.reference.settings import (
    OptimizerSettings,
    ReferenceEngineSettings,
    ScheduleSettings,
)
from arctic_rl_testbed.reference.sleep_state import BackendStateError, SleepStateMachine
from arctic_rl_testbed.reference.tokenizer import stop_token_ids
from arctic_rl_testbed.reference.validation import SFT_LOSS_FNS, parse_payload
from arctic_rl_testbed.reference.weight_transfer import TransferReport, transfer_weights

if TYPE_CHECKING:
    import torch

    from arctic_rl_testbed.reference.sampler import SampledSequence

__all__ = ["ReferenceBackend", "ReferenceEngineSettings", "SyncReport", "TrainResult"]

T = TypeVar("T")


@dataclass(frozen=True)
class TrainResult:
    """A forward-backward's output plus, when `meta.return_fwd_batch`, the log-probs/entropy of the
    training forward in the server's returned layout."""

    output: TrainOutput
    logprobs_B_S: torch.Tensor | None = None
    entropy_B_S: torch.Tensor | None = None


@dataclass(frozen=True)
class SyncReport:
    weights_version: int
    transfer: TransferReport
    cuda_ipc: bool
    low_memory: bool
    weight_format: str = "full"  # "lora": only the adapter tensors were sent


@dataclass
class _Registry:
    """In-process backends reachable through `handle()` (same process only)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    live: dict[int, ReferenceBackend] = field(default_factory=dict)
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))


_REGISTRY = _Registry()


class ReferenceBackend(Backend):
    """In-process implementation of the backend protocol (see the module docstring)."""

    def __init__(self, settings: ReferenceEngineSettings | None = None) -> None:
        import torch

        self.settings = settings or ReferenceEngineSettings()
        if self.settings.num_threads is not None:
            torch.set_num_threads(self.settings.num_threads)
        model_cfg = self.settings.model
        self.tokenizer = load_tokenizer(model_cfg)
        self._trainer = build_model(model_cfg, self.settings.seed, self.tokenizer)
        self._sampler = (
            build_model(model_cfg, self.settings.seed, self.tokenizer).requires_grad_(False).eval()
        )
        self._reference = (
            build_model(model_cfg, self.settings.seed, self.tokenizer).requires_grad_(False).eval()
        )
        if self.settings.peft is not None:
            self._add_adapters(self.settings.peft)
        self._sampler_process: SamplerProcess | None = None
        self.vocab_size = int(self._trainer.get_input_embeddings().weight.shape[0])
        # the sampler's limit is its model's (a local folder's config.json, else the tiny model's setting)
        self.max_model_len = int(self._sampler.config.max_position_embeddings)
        self._stop_ids = stop_token_ids(self.tokenizer)
        self._optimizer = self._build_optimizer(self.settings.optimizer)
        self._sampler_rng = torch.Generator().manual_seed(self.settings.seed)
        self._trainer_rng = torch.Generator().manual_seed(self.settings.seed + 1).get_state()
        self._state = SleepStateMachine(colocated=self.settings.colocated, guard=self.settings.state_guard)
        self._global_step = 0
        self._weights_version = 0
        self._has_grads = False
        self._last_sync: SyncReport | None = None
        self._closed = False
        # torch.set_num_threads in the constructor's thread does not reach a new thread's OpenMP team
        # size: each worker sets it itself. Without it, two workers at once each spin an OpenMP team of
        # every core (measured: 4x slower than one after the other on 2 cores, instead of 2x faster).
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="arctic-rl-reference", initializer=self._init_worker_thread
        )
        self._sampler_executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="arctic-rl-reference-sampler",
            initializer=self._init_worker_thread,
        )
        self._sampler_lock = threading.Lock()  # held by a generate call, a sync, a load, a sampler sleep/wake
        if self.settings.sampler_process:  # last: nothing after it can fail and leave the child running
            assert self.settings.num_threads is not None  # the settings check it
            self._sampler_process = SamplerProcess(
                self._sampler, self.tokenizer, seed=self.settings.seed, num_threads=self.settings.num_threads
            )
        with _REGISTRY.lock:
            self._registry_id = next(_REGISTRY.ids)
            _REGISTRY.live[self._registry_id] = self

    def _add_adapters(self, peft: dict[str, Any]) -> None:
        """LoRA (Cortex's peft_config): the trainer trains fresh adapters over its frozen base, the sampler
        serves the same adapter shape (starting from the trainer's adapters), the reference stays the base."""
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.settings.seed + 2)  # the adapters' init, independent of anything before
            self._trainer = with_adapters(self._trainer, peft)
            self._sampler = with_adapters(self._sampler, peft).requires_grad_(False).eval()
        transfer_weights(self._trainer, self._sampler, 1 << 30)  # same start (B = 0: the base's outputs)

    @property
    def last_sync(self) -> SyncReport | None:
        """The report of the latest weight sync (what was sent, in which format); None before one."""
        return self._last_sync

    @property
    def trains_adapters(self) -> bool:
        """True when the trainer trains LoRA adapters (settings.peft) and syncs them in LoRA format."""
        return self.settings.peft is not None

    # -- plumbing -------------------------------------------------------------------------------
    def _init_worker_thread(self) -> None:
        import torch

        if self.settings.num_threads is not None:
            torch.set_num_threads(self.settings.num_threads)

    @property
    def pad_token_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    @property
    def device(self) -> torch.device:
        return next(self._trainer.parameters()).device

    @property
    def global_step(self) -> int:
        return self._global_step

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise RuntimeError("the reference backend is shut down: create a new one")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def _run_sampler(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn` on the sampler's thread, holding the sampler lock."""
        if self._closed:
            raise RuntimeError("the reference backend is shut down: create a new one")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._sampler_executor, functools.partial(self._with_sampler_lock, fn, *args)
        )

    def _with_sampler_lock(self, fn: Callable[..., T], *args: Any) -> T:
        with self._sampler_lock:
            return fn(*args)

    def _build_optimizer(self, opt: OptimizerSettings):
        import torch

        return torch.optim.AdamW(
            [p for p in self._trainer.parameters() if p.requires_grad],  # LoRA: the adapters only
            lr=opt.lr * self.settings.schedule.multiplier(0),
            betas=opt.betas,
            eps=opt.eps,
            weight_decay=opt.weight_decay,
            foreach=False,
        )

    def trainer_parameters(self) -> dict[str, torch.Tensor]:
        """Detached copies of the trainer's weights (tests, parity checks)."""
        return {name: p.detach().clone() for name, p in self._trainer.named_parameters()}

    def sampler_parameters(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().clone() for name, p in self._sampler.named_parameters()}

    # -- inference ------------------------------------------------------------------------------
    @property
    def max_generate_calls_in_flight(self) -> int | None:
        return 1  # one sampler, behind a lock: a second call waits for the first

    async def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> GenerateOutput:
        sequences, version = await self.sample(
            prompts, params, extra_stop_ids=frozenset(params.stop_token_ids)
        )
        completions = [
            Completion(
                text=s.text,
                token_ids=s.token_ids,
                finish_reason=s.finish_reason,
                prompt_len=len(s.prompt_ids),
                generation_len=len(s.token_ids),
                prompt_token_ids=s.prompt_ids,
                logprobs=s.logprobs if params.logprobs else None,
            )
            for s in sequences
        ]
        return GenerateOutput(completions=completions, weights_version=version)

    async def sample(
        self,
        prompts: Sequence[str] | Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        top_logprobs: int | None = None,
        extra_stop_ids: frozenset[int] = frozenset(),
        max_model_len: int | None = None,
        logprobs_mode: str | None = None,
    ) -> tuple[list[SampledSequence], int]:
        """Sampled sequences (with `top_logprobs` alternatives per token) and the weights version used.
        `extra_stop_ids` also end a generation (vLLM's stop_token_ids); `max_model_len` caps prompt +
        generation below the model's own limit; `logprobs_mode` (vLLM's, of the sampling job's engine)
        None = `settings.logprobs_mode`."""
        return await self._run_sampler(
            self._sample,
            prompts,
            params,
            top_logprobs,
            extra_stop_ids,
            max_model_len,
            logprobs_mode or self.settings.logprobs_mode,
        )

    def _sample(
        self,
        prompts,
        params: SamplingParams,
        top_logprobs: int | None,
        extra_stop_ids: frozenset[int],
        max_len: int | None,
        logprobs_mode: str,
    ) -> tuple[list[SampledSequence], int]:
        self._state.check_generate()
        ids = self._prompt_ids(prompts)
        options = dict(
            stop_ids=self._stop_ids | extra_stop_ids,
            max_model_len=self.max_model_len if max_len is None else min(max_len, self.max_model_len),
            top_logprobs=top_logprobs,
            logprobs_mode=logprobs_mode,
        )
        if self._sampler_process is not None:
            return self._sampler_process.sample(ids, params, **options), self._weights_version
        sequences = sample(self._sampler, self.tokenizer, ids, params, generator=self._sampler_rng, **options)
        return sequences, self._weights_version

    async def generate_version(self) -> int:
        """The sleep/wake checks of a generate (the state guard's refusals) and the weights version
        it would sample with, without sampling: for a server that answers generate with fixed
        completions (`serve --reference --fixed-rollouts`, `fixed_rollouts`)."""
        return await self._run_sampler(self._checked_version)

    def _checked_version(self) -> int:
        self._state.check_generate()
        return self._weights_version

    async def score_completions(
        self,
        prompts: Sequence[str],
        completions: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        logprobs_mode: str | None = None,
    ) -> list[tuple[tuple[float, int], ...]]:
        """The sampler's (log-prob, rank) of each completion token after its (text) prompt, as a
        generate would report them had it drawn these tokens (`sampler.teacher_forced_logprobs`)."""

        ids = self._prompt_ids(list(prompts))
        mode = logprobs_mode or self.settings.logprobs_mode
        return await self._run_sampler(
            functools.partial(teacher_forced_logprobs, logprobs_mode=mode),
            self._sampler,
            ids,
            completions,
            params,
        )

    def _sampler_rng_state(self) -> torch.Tensor:
        if self._sampler_process is not None:
            return self._sampler_process.rng_state()
        return self._sampler_rng.get_state()

    def _set_sampler_rng_state(self, state: torch.Tensor) -> None:
        if self._sampler_process is not None:
            self._sampler_process.set_rng_state(state)
        else:
            self._sampler_rng.set_state(state)

    def _prompt_ids(self, prompts) -> list[list[int]]:
        if isinstance(prompts, str) or not isinstance(prompts, Sequence) or not prompts:
            raise ValueError("prompts: give a non-empty list of strings or of token-id lists")
        if all(isinstance(p, str) for p in prompts):
            return [self.tokenizer.encode(p, add_special_tokens=True) for p in prompts]
        out = []
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, str) or not isinstance(prompt, Sequence):
                raise ValueError(
                    f"prompts[{i}] is a {type(prompt).__name__}: do not mix text and token-id prompts"
                )
            ids = [int(t) for t in prompt]
            bad = [t for t in ids if not 0 <= t < self.vocab_size]
            if bad:
                raise ValueError(f"prompts[{i}] has token ids {bad[:3]} outside [0, {self.vocab_size})")
            out.append(ids)
        return out

    # -- training -------------------------------------------------------------------------------
    async def forward(self, payload: WirePayload, *, reference_model: bool = False) -> ForwardOutput:
        return await self._run(self._forward, payload, reference_model)

    def _forward(self, payload, reference_model: bool) -> ForwardOutput:
        import torch

        if not reference_model:
            self._state.check_trainer_forward()
        parsed = parse_payload(
            payload,
            op="forward",
            dp_size=self.settings.dp_size,
            grad_accum_steps=1 if reference_model else self.settings.grad_accum_steps,
            vocab_size=self.vocab_size,
            honour_clip_ratios=self.settings.honour_clip_ratios,
        )
        model = self._reference if reference_model else self._trainer
        micros = parsed.to(self.device).micro_batches_in_row_order()
        loss_metrics: list[dict[str, float]] = []
        seq_len = int(micros[0].tensors["input_ids"].shape[1])
        logprobs = torch.zeros((parsed.num_rows, seq_len), dtype=torch.float32)
        entropy = None
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                for micro in micros:
                    outputs = run_posts(model_logits(model, micro), micro, parsed)
                    if parsed.loss_callable is not None:  # the server computes a named loss, no backward
                        loss_metrics.append(call_server_loss(parsed.loss_callable, outputs, micro, parsed)[1])
                    rows = slice(micro.first_row, micro.first_row + micro.num_rows)
                    assert outputs.logprobs_B_S is not None
                    logprobs[rows] = wire_view(outputs.logprobs_B_S, micro, parsed)
                    if outputs.entropy_B_S is not None:
                        if entropy is None:
                            entropy = torch.zeros_like(logprobs)
                        entropy[rows] = wire_view(outputs.entropy_B_S, micro, parsed)
        finally:
            model.train(was_training)
        metrics = combine_metrics(loss_metrics) if loss_metrics else {}
        return ForwardOutput(logprobs_B_S=logprobs, entropy_B_S=entropy, metrics=metrics)

    async def forward_backward(self, payload: WirePayload) -> TrainOutput:
        return (await self.train(payload)).output

    async def train(self, payload: WirePayload | dict[str, Any]) -> TrainResult:
        """Forward-backward with the details the HTTP server returns (`meta.return_fwd_batch`)."""
        return await self._run(self._train, payload)

    def _train(self, payload) -> TrainResult:
        import torch

        self._state.check_training("forward_backward")
        parsed = parse_payload(
            payload,
            op="train",
            dp_size=self.settings.dp_size,
            grad_accum_steps=self.settings.grad_accum_steps,
            vocab_size=self.vocab_size,
            honour_clip_ratios=self.settings.honour_clip_ratios,
        )
        parsed = parsed.to(self.device)
        keep = parsed.return_fwd_batch and parsed.loss_fn not in SFT_LOSS_FNS
        seq_len = int(parsed.shards[0][0].tensors["input_ids"].shape[1])
        logprobs = torch.zeros((parsed.num_rows, seq_len)) if keep else None
        entropy = None
        shard_metrics: list[dict[str, float]] = []
        self._trainer.train()
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self._trainer_rng)
            for shard in parsed.shards:
                for micro in shard:
                    result = micro_loss(self._trainer, micro, parsed)
                    (result.loss / self.settings.dp_size).backward()  # the ranks' all-reduce averages
                    shard_metrics.append(result.metrics)
                    if keep and logprobs is not None and result.outputs.logprobs_B_S is not None:
                        rows = slice(micro.first_row, micro.first_row + micro.num_rows)
                        logprobs[rows] = wire_view(result.outputs.logprobs_B_S, micro, parsed)
                        if result.outputs.entropy_B_S is not None:
                            if entropy is None:
                                entropy = torch.zeros_like(logprobs)
                            entropy[rows] = wire_view(result.outputs.entropy_B_S, micro, parsed)
            self._trainer_rng = torch.get_rng_state()
        self._has_grads = True
        metrics = combine_metrics(shard_metrics)
        return TrainResult(TrainOutput(loss=float(metrics["loss"]), metrics=metrics), logprobs, entropy)

    async def step(self, learning_rate: float | None = None) -> StepOutput:
        return await self._run(self._step, learning_rate)

    def _step(self, learning_rate: float | None) -> StepOutput:
        import torch

        self._check_step(learning_rate)
        params = [p for p in self._trainer.parameters() if p.grad is not None]
        norm = float(torch.nn.utils.get_total_norm([p.grad for p in params], 2.0)) if params else 0.0
        base_lr = self.settings.optimizer.lr
        self._has_grads = False
        if not math.isfinite(norm):
            self._optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(
                f"gradient norm is {norm}: the step was skipped and the gradients dropped; check the payload "
                "(advantages, old/ref log-probs) for extreme values"
            )
        if norm == 0.0 and self.settings.zero_norm_step == "skip":
            # DeepSpeed's BF16_Optimizer asserts a non-zero global gradient norm and the 0.1.4 worker
            # catches that assert: no update, no schedule advance.
            self._optimizer.zero_grad(set_to_none=True)
            lr = base_lr * self.settings.schedule.multiplier(self._global_step)
            return StepOutput(0.0, lr, self._global_step, {"grad_norm": 0.0, "last_lr": lr, "skipped": 1.0})
        if norm == 0.0:
            # ZeRO-2/3 step over all-zero gradients: AdamW's momentum (and weight decay) still move the
            # weights, and the schedule advances.
            params = [p for p in self._trainer.parameters() if p.requires_grad]
            for p in params:
                p.grad = torch.zeros_like(p)
        clip = self.settings.optimizer.grad_clip
        if clip is not None and norm > 0.0:
            torch.nn.utils.clip_grads_with_norm_(params, clip, torch.tensor(norm))
        applied = base_lr * self.settings.schedule.multiplier(self._global_step)
        for group in self._optimizer.param_groups:
            group["lr"] = applied
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        self._global_step += 1
        last_lr = base_lr * self.settings.schedule.multiplier(self._global_step)
        for group in self._optimizer.param_groups:
            group["lr"] = last_lr
        metrics = {"grad_norm": norm, "last_lr": last_lr, "lr_applied": applied, "skipped": 0.0}
        return StepOutput(grad_norm=norm, learning_rate=last_lr, step=self._global_step, metrics=metrics)

    def _check_step(self, learning_rate: float | None) -> None:
        """What a step refuses before touching the optimizer (shared by every trainer of the engine)."""

        if learning_rate is not None:
            raise ValueError(
                f"step(learning_rate={learning_rate}): the on-prem server takes the LR from its schedule and "
                "ignores this argument; configure the schedule instead and pass None"
            )
        self._state.check_training("step")
        if not self._has_grads and self.settings.step_without_gradients == "refuse":
            raise BackendStateError("step() without forward_backward() since the last step: nothing to apply")

    async def configure_training(
        self,
        *,
        optimizer: OptimizerSettings | None = None,
        schedule: ScheduleSettings | None = None,
        grad_accum_steps: int | None = None,
    ) -> None:
        """Replace optimizer / schedule / gradient accumulation before training starts (the HTTP
        server applies a training job's `ds_config` this way)."""
        await self._run(self._configure_training, optimizer, schedule, grad_accum_steps)

    def _configure_training(self, optimizer, schedule, grad_accum_steps) -> None:
        if self._global_step or self._has_grads:
            raise RuntimeError(
                "configure_training after training started: configure before the first forward_backward"
            )
        update: dict[str, Any] = {}
        if optimizer is not None:
            update["optimizer"] = optimizer
        if schedule is not None:
            update["schedule"] = schedule
        if grad_accum_steps is not None:
            update["grad_accum_steps"] = grad_accum_steps
        self.settings = ReferenceEngineSettings.model_validate({**self.settings.model_dump(), **update})
        self._optimizer = self._build_optimizer(self.settings.optimizer)

    # -- weight sync and memory -----------------------------------------------------------------
    async def sync_weights(
        self,
        *,
        cuda_ipc: bool | None = None,
        low_memory: bool | None = None,
        weight_format: str | None = None,
    ) -> int:
        report = await self.sync_weights_detailed(
            cuda_ipc=cuda_ipc, low_memory=low_memory, weight_format=weight_format
        )
        return report.weights_version

    async def sync_weights_detailed(
        self,
        *,
        cuda_ipc: bool | None = None,
        low_memory: bool | None = None,
        weight_format: str | None = None,
    ) -> SyncReport:
        """`weight_format`: "lora" sends only the adapter tensors (Cortex's weight-sync payload
        `weight_format`; needs settings.peft), "vllm" / "hf" the full weights; None = "lora" when the
        trainer trains adapters, else the full weights."""
        return await self._run(self._with_sampler_lock, self._sync, cuda_ipc, low_memory, weight_format)

    def _sync(self, cuda_ipc: bool | None, low_memory: bool | None, weight_format: str | None) -> SyncReport:
        if weight_format not in (None, "lora", "vllm", "hf"):
            raise ValueError(f"weight_format={weight_format!r}: use 'lora', 'vllm' or 'hf' (or None)")
        if weight_format == "lora" and not self.trains_adapters:
            raise ValueError(
                "weight_format='lora' syncs LoRA adapters, and this training job trains full weights: create "
                "the training and sampling jobs with peft_config (training.peft), or sync without weight_format"
            )
        lora = weight_format == "lora" or (weight_format is None and self.trains_adapters)
        fmt = "lora" if lora else "full"
        ipc, low = self._sync_strategy(cuda_ipc, low_memory)
        if self._state.inference == InferenceState.ASLEEP:
            # only without the state guard: vLLM restores its pre-sleep weights on wake, so the
            # sync is lost (arctic-platform 0.1.4 checks nothing and reports success)
            return SyncReport(self._weights_version, TransferReport(0, 0, 0), ipc, low, fmt)
        bucket_bytes = 1 if low else max(1, int(self.settings.model.weight_sync_bucket_mb * 1024 * 1024))
        report = transfer_weights(
            self._trainer, self._sampler, bucket_bytes, only=is_adapter if lora else None
        )  # 1 byte: one parameter per bucket
        self._weights_version = self._global_step  # the trainer step whose weights the sampler now serves
        self._state.synced()
        self._last_sync = SyncReport(self._weights_version, report, ipc, low, fmt)
        return self._last_sync

    def _sync_strategy(self, cuda_ipc: bool | None, low_memory: bool | None) -> tuple[bool, bool]:
        """The sync's (cuda_ipc, low_memory): the call's, else the training job's; checked against the
        placement and the sleep/wake state."""
        ipc = self.settings.cuda_ipc if cuda_ipc is None else bool(cuda_ipc)
        low = self.settings.low_memory if low_memory is None else bool(low_memory)
        if ipc and not self.settings.colocated:
            raise ValueError(
                "sync_weights(cuda_ipc=True) needs a colocated engine (CUDA IPC shares one device)"
            )
        self._state.check_sync(ipc)
        return ipc, low

    async def sleep_inference(self, level: int = 1) -> None:
        await self._run(self._with_sampler_lock, self._state.sleep_inference, level)

    async def wake_inference(self, tags: Sequence[str] | None = None) -> None:
        await self._run(
            self._with_sampler_lock, self._state.wake_inference, None if tags is None else list(tags)
        )

    async def sleep_training(self, mode: str = "all") -> None:
        await self._run(self._state.sleep_training, mode)

    async def wake_training(self) -> None:
        await self._run(self._state.wake_training)

    async def reset_prefix_cache(self) -> None:
        await self._run(self._with_sampler_lock, self._state.reset_prefix_cache)

    async def state(self) -> BackendState:
        return await self._run(self._snapshot)

    def _snapshot(self) -> BackendState:
        return BackendState(
            inference=self._state.inference,
            training=self._state.training,
            weights_version=self._weights_version,
            trainer_version=self._global_step,
            colocated=self.settings.colocated,
        )

    # -- checkpoints ----------------------------------------------------------------------------
    async def save_checkpoint(
        self, path: str, step: int, *, export_hf: bool = False, save_total_limit: int | None = None
    ) -> str:
        check_save_total_limit(save_total_limit)
        directory = Path(path) / f"checkpoint-{int(step)}"
        await self.save_to(directory, export_hf=export_hf)
        write_latest(Path(path), step)
        if save_total_limit:
            prune_checkpoint_dirs(Path(path), save_total_limit)
        return str(directory)

    async def load_checkpoint(self, path: str, step: int) -> None:
        await self.load_from(Path(path) / f"checkpoint-{int(step)}")

    async def save_to(
        self, directory: str | Path, *, export_hf: bool = False, extra: dict[str, Any] | None = None
    ) -> int:
        """Save the training state into `directory` (and a Hugging Face copy in `hf/`); returns the step."""
        return await self._run(self._with_sampler_lock, self._save, Path(directory), export_hf, extra)

    def _save(self, directory: Path, export_hf: bool, extra: dict[str, Any] | None) -> int:
        from safetensors import SafetensorError

        self._state.check_training("save_checkpoint")
        if self._has_grads:
            raise RuntimeError(
                "save_checkpoint with gradients accumulated since the last step: they are not saved; step() first"
            )
        save_checkpoint(
            directory,
            self._trainer,
            self._optimizer,
            global_step=self._global_step,
            trainer_rng=self._trainer_rng,
            sampler_rng=self._sampler_rng_state(),
            extra=extra,
        )
        if export_hf:
            try:
                self._trainer.save_pretrained(str(directory / "hf"))
                self.tokenizer.save_pretrained(str(directory / "hf"))
            except (OSError, SafetensorError) as error:  # no partial copy left behind (safetensors' writer
                # raises SafetensorError on a full disk)
                shutil.rmtree(directory / "hf", ignore_errors=True)
                raise CheckpointWriteError(directory / "hf", error) from None
        return self._global_step

    async def load_from(self, directory: str | Path) -> int:
        """Restore the training state saved in `directory`; returns the restored step. The sampler keeps
        its weights until the next `sync_weights` (as on the server)."""
        return await self._run(self._with_sampler_lock, self._load, Path(directory))

    def _load(self, directory: Path) -> int:
        self._state.check_training("load_checkpoint")
        state, trainer_rng, sampler_rng = load_checkpoint(directory, self._trainer, self._optimizer)
        self._trainer_rng = trainer_rng
        self._set_sampler_rng_state(sampler_rng)
        self._global_step = state.global_step
        self._has_grads = False
        self._trainer.zero_grad(set_to_none=True)
        return self._global_step

    # -- log-prob job ---------------------------------------------------------------------------
    async def reference_token_logprobs(self, texts: Sequence[str]) -> torch.Tensor:
        """The server's DeepSpeed `/log-probs`: right-padded `[B, S-1]` log p(token t+1) under the
        reference model (positions past a row's end are meaningless)."""
        return await self._run(self._reference_token_logprobs, list(texts))

    def _reference_token_logprobs(self, texts: list[str]) -> torch.Tensor:
        import torch

        encoded = self.tokenizer(texts, return_tensors="pt", padding=True, padding_side="right")
        input_ids = encoded["input_ids"].to(self.device)
        with torch.no_grad():
            logits = self._reference(
                input_ids=input_ids, attention_mask=encoded["attention_mask"].to(self.device)
            ).logits
        logprobs = torch.log_softmax(logits.float(), dim=-1)[:, :-1]
        return logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1).cpu()

    async def reference_prompt_logprobs(
        self, texts: Sequence[str], top_k: int
    ) -> list[tuple[list[int], list[dict[int, tuple[float, int]] | None], int]]:
        """vLLM-style prompt log-probs under the reference model: per text its token ids, per position
        None (first token) or {token id: (logprob, rank)} for the actual token and the top k, and the
        greedy next token."""
        return await self._run(self._reference_prompt_logprobs, list(texts), top_k)

    def _reference_prompt_logprobs(self, texts: list[str], top_k: int):
        import torch

        out = []
        for text in texts:
            ids = self.tokenizer.encode(text, add_special_tokens=True)
            if not ids:
                raise ValueError("log-probs of an empty text: give at least one token")
            with torch.no_grad():
                logits = self._reference(input_ids=torch.tensor([ids], device=self.device)).logits[0]
            raw = torch.log_softmax(logits.float(), dim=-1).cpu()
            entries: list[dict[int, tuple[float, int]] | None] = [None]
            entries += [_top_entries(raw[t - 1], ids[t], top_k) for t in range(1, len(ids))]
            out.append((ids, entries, int(torch.argmax(raw[-1]))))
        return out

    # -- lifecycle ------------------------------------------------------------------------------
    def handle(self) -> BackendHandle:
        return InProcessHandle(self._registry_id, os.getpid())

    async def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        with _REGISTRY.lock:
            _REGISTRY.live.pop(self._registry_id, None)
        self._executor.shutdown(wait=True)
        self._sampler_executor.shutdown(wait=True)
        if self._sampler_process is not None:
            self._sampler_process.close()


class InProcessHandle(BackendHandle):
    """Reaches an in-process `ReferenceBackend` from the same process only; another process needs the
    Ray actor (`arctic_rl_testbed.reference.ray_actor`) or the HTTP server."""

    def __init__(self, registry_id: int, pid: int) -> None:
        self.registry_id = registry_id
        self.pid = pid

    def connect(self) -> Backend:
        if os.getpid() != self.pid:
            raise RuntimeError(
                "an in-process ReferenceBackend is not reachable from another process: launch it as a Ray actor "
                "(launch_reference_actor) or serve it over HTTP (arctic-rl serve --reference)"
            )
        with _REGISTRY.lock:
            backend = _REGISTRY.live.get(self.registry_id)
        if backend is None:
            raise RuntimeError("the ReferenceBackend behind this handle was shut down")
        return BorrowedBackend(backend)
