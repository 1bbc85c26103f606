"""The backend protocol every adapter talks to, and its typed inputs and outputs.

The contract is the Arctic on-prem server's (see ARCTIC_CONTRACT.md in the shared docs): an
adapter builds a `WirePayload` with `arctic_rl_core.wire`, sends it with `forward` /
`forward_backward`, steps, then lets `arctic_rl_core.weight_sync` drive the sync sequence.
Implementations: `arctic_rl_core.backends.arctic` (real client) and
`arctic_rl_testbed.reference` (CPU engine).

No torch import at module level: tensors appear only in type hints.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


# ----------------------------------------------------------------------------------------------
# Generation
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one generate call (vLLM semantics)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: disabled
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False  # return the sampled token's log-prob per generated token
    stop_token_ids: tuple[int, ...] = ()  # vLLM's: these tokens also end a completion (and are kept)

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise ValueError(f"SamplingParams.max_tokens={self.max_tokens}: must be > 0")
        if not self.temperature >= 0 or math.isinf(self.temperature):  # NaN fails every comparison
            raise ValueError(f"SamplingParams.temperature={self.temperature}: must be a finite number >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p={self.top_p}: must be in (0, 1]")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"SamplingParams.top_k={self.top_k}: use -1 to disable or a value >= 1")
        if any(not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise ValueError(
                f"SamplingParams.stop_token_ids={self.stop_token_ids!r}: give token ids (integers >= 0)"
            )


class FinishReason(StrEnum):
    STOP = "stop"  # EOS or a stop string
    LENGTH = "length"  # max_tokens reached
    ABORT = "abort"


@dataclass(frozen=True)
class Completion:
    """One completion of one prompt (the first output; prompts are replicated instead of n > 1)."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    prompt_len: int
    generation_len: int
    prompt_token_ids: tuple[int, ...] | None = None  # as the backend tokenised the prompt
    logprobs: tuple[float, ...] | None = None  # sampled-token log-probs, len == generation_len
    prefix_cache_len: int = 0


@dataclass(frozen=True)
class GenerateOutput:
    completions: list[Completion]
    weights_version: int  # the sampler's weights version these completions were drawn with


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------


@dataclass
class WirePayload:
    """The canonical dense batch the Arctic server consumes (built by `arctic_rl_core.wire`).

    `batch` is one dict of `[B, S]` tensors or a list of micro-batch dicts (one per
    gradient-accumulation step); `meta` and `processing` are plain JSON-able dicts.
    """

    batch: dict[str, torch.Tensor] | list[dict[str, torch.Tensor]]
    meta: dict[str, Any]
    processing: dict[str, Any]


@dataclass(frozen=True)
class ForwardOutput:
    """Log-probs as the server returns them: shifted, `logprobs_B_S[b, i] = log p(token i+1)`.

    Padded positions hold the value of the pad token id; the last real position of a row is
    meaningless. Use `arctic_rl_core.wire.response_logprobs` to get response-aligned values.
    Always torch tensors, whatever the transport returned.
    """

    logprobs_B_S: torch.Tensor
    entropy_B_S: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainOutput:
    loss: float
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StepOutput:
    grad_norm: float
    learning_rate: float
    step: int  # optimizer steps taken so far (after this one)
    metrics: dict[str, float] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------
# State (what the weight-sync policy checks every transition against)
# ----------------------------------------------------------------------------------------------


class InferenceState(StrEnum):
    AWAKE = "awake"  # weights and KV cache resident
    WEIGHTS_ONLY = "weights_only"  # woken with ["weights"], KV cache not yet
    ASLEEP = "asleep"


class TrainingState(StrEnum):
    AWAKE = "awake"
    NON_LP_ASLEEP = "non_lp"  # optimizer state and non-low-precision params offloaded
    LP_PARAMS_ASLEEP = "lp_params"
    ASLEEP = "all"


@dataclass(frozen=True)
class BackendState:
    inference: InferenceState
    training: TrainingState
    weights_version: int  # version of the weights the sampler currently serves
    trainer_version: int  # optimizer steps taken by the trainer
    colocated: bool


# ----------------------------------------------------------------------------------------------
# Reconnection across process boundaries
# ----------------------------------------------------------------------------------------------


class BackendHandle(abc.ABC):
    """A small picklable description of a live backend, to reach it from another process
    (a Ray task or actor). `connect()` returns a Backend bound to the same jobs/actor; it never
    creates new jobs and its `shutdown()` does not destroy what it did not create."""

    @abc.abstractmethod
    def connect(self) -> Backend: ...


# ----------------------------------------------------------------------------------------------
# The protocol
# ----------------------------------------------------------------------------------------------


class Backend(abc.ABC):
    """Async training + inference backend with the Arctic server's semantics."""

    # -- inference ----------------------------------------------------------------------------
    @abc.abstractmethod
    async def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> GenerateOutput:
        """Sample one completion per prompt (text prompts, or token-id prompts where supported)."""

    @property
    def accepts_token_ids(self) -> bool:
        """Whether `generate` takes token-id prompts. False: text only (the Arctic on-prem server),
        where `arctic_rl_core.multi_turn.turn_sampler` sends text and verifies what the server saw."""
        return True

    @property
    def max_generate_calls_in_flight(self) -> int | None:
        """How many `generate` calls the sampler serves at once. None: any number (the server
        batches concurrent calls itself, as vLLM's continuous batching does: a call sent at once
        joins the running batch). The reference engine's sampler serves one call at a time (the
        next waits), so `arctic_rl_core.generate_batcher` holds requests back while a call is in
        flight and sends them together when it returns."""
        return None

    # -- training -----------------------------------------------------------------------------
    @property
    def serves_forward(self) -> bool:
        """Whether `forward` exists on this backend. False (Cortex): no server log-probs, so the
        old-log-prob pass serves the sampler's rollout log-probs (`backends.old_logprobs`)."""
        return True

    @abc.abstractmethod
    async def forward(self, payload: WirePayload, *, reference_model: bool = False) -> ForwardOutput:
        """Forward without grad (old log-probs; reference log-probs with `reference_model=True`).
        The payload's processing must carry `loss_fn: None`."""

    @abc.abstractmethod
    async def forward_backward(self, payload: WirePayload) -> TrainOutput:
        """Forward + loss + backward; gradients accumulate until `step`."""

    @abc.abstractmethod
    async def step(self, learning_rate: float | None = None) -> StepOutput:
        """Optimizer step (clip, update, schedule, zero grads)."""

    # -- weight sync and memory -----------------------------------------------------------------
    @abc.abstractmethod
    async def sync_weights(self, *, cuda_ipc: bool | None = None, low_memory: bool | None = None) -> int:
        """Transfer trainer weights into the sampler (only the transfer: the policy in
        `arctic_rl_core.weight_sync` wakes and resets around it). Returns the new weights version."""

    @abc.abstractmethod
    async def sleep_inference(self, level: int = 1) -> None: ...

    @abc.abstractmethod
    async def wake_inference(self, tags: Sequence[str] | None = None) -> None:
        """Wake the sampler: `None` wakes everything; tags are `"weights"` and/or `"kv_cache"`."""

    @abc.abstractmethod
    async def sleep_training(self, mode: str = "all") -> None:
        """`mode`: "non_lp", "lp_params" or "all"."""

    @abc.abstractmethod
    async def wake_training(self) -> None: ...

    @abc.abstractmethod
    async def reset_prefix_cache(self) -> None: ...

    @abc.abstractmethod
    async def state(self) -> BackendState: ...

    # -- checkpoints ----------------------------------------------------------------------------
    @abc.abstractmethod
    async def save_checkpoint(
        self, path: str, step: int, *, export_hf: bool = False, save_total_limit: int | None = None
    ) -> str:
        """Save model, optimizer, scheduler, RNG and step into `<path>/checkpoint-<step>` (and record
        `<path>/latest`); returns that directory. `export_hf`: also a Hugging Face copy in its `hf/`
        (`save_pretrained`). `save_total_limit`: then keep only the newest that many
        `checkpoint-<n>` directories of `path` (None or 0 keeps all). The 0.1.4 server's semantics."""

    @abc.abstractmethod
    async def load_checkpoint(self, path: str, step: int) -> None: ...

    # -- lifecycle ------------------------------------------------------------------------------
    @abc.abstractmethod
    def handle(self) -> BackendHandle:
        """A picklable handle that reconnects to this backend from another process."""

    @abc.abstractmethod
    async def shutdown(self) -> None:
        """Release what this process created. Idempotent."""


def as_tensor_logprobs(value: Any) -> torch.Tensor:
    """Log-probs from any transport (list, numpy array, tensor) as a float32 CPU torch tensor."""
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to(device="cpu", dtype=torch.float32)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
    if isinstance(value, Sequence):
        return torch.tensor(value, dtype=torch.float32)
    raise TypeError(f"log-probs of type {type(value).__name__}: expected a tensor, numpy array or list")


def string_keyed_to_int(mapping: Mapping[Any, Any]) -> dict[int, Any]:
    """Integer-keyed dicts (per-token log-prob maps) arrive over JSON with string keys."""
    return {int(k): v for k, v in mapping.items()}
