"""SkyRL's inference-engine client over a core `Backend`: what SkyRL's own generator
(`SkyRLGymGenerator`, `adapter_skyrl.generator.ArcticGenerator`) samples through.

SkyRL's generator holds each trajectory as token ids and asks the engine for one turn at a time
(`generate(InferenceEngineInput(prompt_token_ids=...))`); this client samples every turn through the
core's `TurnSampler` (token in / token out on any backend; text to the Arctic on-prem server with the
context the server read verified per turn; concurrent turns of different trajectories share backend
calls through the core's `GenerateBatcher`, whose queue is logged as `sampler_queue/*`) and answers
as SkyRL's vLLM client does: the sampled ids,
their text (vLLM's `include_stop_str_in_output=True`, `skip_special_tokens=True`), the stop reason,
and the sampled tokens' log-probs when SkyRL's sampling params ask for them. Each turn is also
recorded (`TurnRecorder`) for the generator, which checks and repairs what SkyRL trains on.

Only generation is served: SkyRL's trainer on the Arctic path gets no engine client (weight sync,
sleep and wake are the core's), and the OpenAI-compatible routes have no Arctic counterpart.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.old_logprobs import sampling_params_for
from arctic_rl_core.backends.protocol import Backend, SamplingParams
from arctic_rl_core.dispatch import run
from arctic_rl_core.generate_batcher import GenerateBatcher
from arctic_rl_core.multi_turn.turn_sampler import TurnSampler
from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInterface

from adapter_skyrl.loop_bridge import on_backend_loop

if TYPE_CHECKING:
    from arctic_rl_core.async_grpo.sync_gate import GenerationSyncGate
    from arctic_rl_core.multi_turn.turn_sampler import SampledTurn

# vLLM sampling keys SkyRL always sends whose values the Arctic path already gives.
IMPLIED_SAMPLING = {
    "min_tokens": 1,
    "skip_special_tokens": True,
    "include_stop_str_in_output": True,
    "min_p": 0.0,
}
SAMPLING_KEYS = frozenset(
    {"max_tokens", "temperature", "top_p", "top_k", "logprobs", "stop", *IMPLIED_SAMPLING}
)
_NOT_SERVED = (
    "the Arctic path serves SkyRL's generator only (generate); {what} has no Arctic counterpart "
    "(the core weight-sync policy syncs, sleeps and wakes the sampler)"
)


def to_sampling_params(params: Mapping[str, Any]) -> SamplingParams:
    """SkyRL's vLLM sampling dict -> the backend's `SamplingParams`; anything else is an error."""

    unknown = sorted(set(params) - SAMPLING_KEYS)
    if unknown:
        raise ValueError(f"sampling params {unknown}: the Arctic backend cannot honour them; remove them")
    for key, implied in IMPLIED_SAMPLING.items():
        if key in params and params[key] != implied:
            raise ValueError(
                f"sampling param {key}={params[key]!r}: the Arctic backend supports only {implied!r}"
            )
    logprobs = params.get("logprobs")
    if logprobs not in (None, 0, 1):
        raise ValueError(
            f"sampling param logprobs={logprobs!r}: only the sampled token's log-prob (1) is returned"
        )
    return SamplingParams(
        max_tokens=int(params["max_tokens"]),
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        top_k=int(params.get("top_k", -1)),
        stop=tuple(params.get("stop") or ()),
        logprobs=logprobs is not None,
    )


@dataclass
class TurnRecorder:
    """The turns sampled in one context (a trajectory's agent loop, or one batched call), in order."""

    turns: list[SampledTurn] = field(default_factory=list)


RECORDER: ContextVar[TurnRecorder | None] = ContextVar("arctic_turn_recorder", default=None)


class ArcticInferenceClient(InferenceEngineInterface):
    """`generate` through a core backend (see the module doc). `sync_gate`: the fully asynchronous
    trainer's `GenerationSyncGate` (no generate call inside a weight sync's bracket);
    `call_timeout_s`: a limit on each turn's sampling; `max_batch`: the most prompts a backend call
    holds (SkyRL's `generator.inference_engine.max_num_seqs`, vLLM's concurrent sequences)."""

    def __init__(
        self,
        backend: Backend,
        tokenizer: Any,
        *,
        model_name: str,
        max_batch: int = 1024,
        sync_gate: GenerationSyncGate | None = None,
        call_timeout_s: float | None = None,
    ) -> None:
        self.backend = backend
        # every trajectory's turn is a request; concurrent ones share a backend call (up to max_batch)
        self.batcher = GenerateBatcher(
            backend.generate, max_batch=max_batch, max_calls_in_flight=backend.max_generate_calls_in_flight
        )
        self.sampler = TurnSampler(backend, tokenizer, batcher=self.batcher)
        self._model_name = model_name
        self.sync_gate = sync_gate
        self.call_timeout_s = call_timeout_s

    @property
    def model_name(self) -> str:
        return self._model_name

    async def generate(self, input_batch: Any, model: str | None = None) -> dict[str, Any]:
        if input_batch.get("prompts") is not None:
            raise ValueError(
                "InferenceEngineInput.prompts (chat messages): the Arctic client samples from token ids "
                "(prompt_token_ids), as SkyRL's generator sends them"
            )
        prompts = input_batch.get("prompt_token_ids")
        if not prompts:
            raise ValueError("InferenceEngineInput.prompt_token_ids: give one or more token-id prompts")
        if input_batch.get("return_sample_support"):
            raise ValueError("return_sample_support: the Arctic backend does not capture sample support")
        asked = dict(input_batch.get("sampling_params") or {})
        params = self._params(asked)
        call = self.sampler.sample(prompts, params)
        if self.sync_gate is not None:
            call = self.sync_gate.generate(call)
        turns = await on_backend_loop(call, self.call_timeout_s)
        recorder = RECORDER.get()
        if recorder is not None:
            recorder.turns.extend(turns)
        want_logprobs = asked.get("logprobs") is not None
        return {
            "responses": [turn.text for turn in turns],
            "response_ids": [list(turn.token_ids) for turn in turns],
            "stop_reasons": [str(turn.finish_reason) for turn in turns],
            "response_logprobs": [list(turn.logprobs) for turn in turns] if want_logprobs else None,
            "prompt_logprobs": None,
            "rollout_expert_indices": None,
            "rollout_sample_support": None,
        }

    def _params(self, asked: Mapping[str, Any]) -> SamplingParams:
        # without a server forward (Cortex) the old-log-prob pass serves the sampler's log-probs
        return sampling_params_for(self.backend, to_sampling_params(asked))

    def queue_metrics(self) -> dict[str, float]:
        """The sampler's queue since the previous call (`sampler_queue/*`, as verl's adapter logs it)."""

        return run(self._take_queue_stats())

    async def _take_queue_stats(self) -> dict[str, float]:
        return self.batcher.take_stats().metrics()

    async def finish_session(self, session_id: str) -> None:
        """Nothing to release: the Arctic server keeps no per-trajectory state."""

    # -- what SkyRL's generator does not call on the Arctic path ---------------------------------
    def get_endpoint_url(self) -> str:
        raise NotImplementedError(_NOT_SERVED.format(what="an OpenAI-compatible endpoint"))

    async def chat_completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(_NOT_SERVED.format(what="chat_completion"))

    async def render_chat_completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(_NOT_SERVED.format(what="render_chat_completion"))

    async def completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(_NOT_SERVED.format(what="completion"))

    async def wake_up(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(_NOT_SERVED.format(what="wake_up"))

    async def sleep(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(_NOT_SERVED.format(what="sleep"))

    async def update_named_weights(self, request: Any) -> None:
        raise NotImplementedError(_NOT_SERVED.format(what="update_named_weights"))

    async def load_lora_adapter(self, lora_name: str, lora_path: str) -> dict[str, Any]:
        raise NotImplementedError(_NOT_SERVED.format(what="load_lora_adapter"))

    async def teardown(self) -> None:
        """The backend belongs to the experiment, which shuts it down."""

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> None:
        raise NotImplementedError(_NOT_SERVED.format(what="reset_prefix_cache"))

    async def pause_generation(self) -> None:
        raise NotImplementedError(_NOT_SERVED.format(what="pause_generation (0.1.4 has no pause)"))

    async def resume_generation(self) -> None:
        raise NotImplementedError(_NOT_SERVED.format(what="resume_generation (0.1.4 has no pause)"))

    async def get_world_size(self) -> tuple[int, int]:
        raise NotImplementedError(_NOT_SERVED.format(what="get_world_size"))
