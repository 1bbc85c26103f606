"""The `arctic` rollout replica's server actor: verl's token-in/token-out `generate` over `Backend.generate`.

`ArcticRolloutServer` reports the sampler's weights version in `extra_fields["global_steps"]` and, since
verl's sync client sends no `max_tokens`, defaults it to the configured response length. Concurrent
requests are coalesced into batched backend calls of at most `rollout.max_num_seqs` prompts
(`arctic_rl_core.generate_batcher`), whose queue the trainer logs every step (`sampler_queue/*`,
`take_sampler_queue_stats`). `sleep` (verl's "sampling is over") hands the devices to training through
the core weight-sync policy; the sync after each step hands them back.

This module imports no verl at module level, so the server's Ray process does not import verl
(5.5 s of CPU, torch included, measured in the verl start-up profile of the testbed README): its
tokenizer is transformers' `AutoTokenizer` (what `PromptText` needs: encode and decode), and a
result is verl's `TokenOutput` where it arrives (`RolloutTokens`: built as one when unpickled, or at
once in a process that has verl imported already).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.old_logprobs import sampling_params_for
from arctic_rl_core.backends.protocol import Backend, InferenceState, SamplingParams
from arctic_rl_core.generate_batcher import GenerateBatcher, SamplerQueueStats
from arctic_rl_core.multi_turn.turn_sampler import TurnSampler
from arctic_rl_core.weight_sync import WeightSyncPolicy, prepare_for_training, sync_after_step

from adapter_verl.session import lookup_session
from adapter_verl.trace import TraceWriter
from adapter_verl.verl_internals import REPLICA_MODULE, WEIGHTS_VERSION_KEY

if TYPE_CHECKING:
    from adapter_verl.session import SessionInfo

logger = logging.getLogger(__name__)


def _verl_token_output(fields: dict[str, Any]) -> Any:
    """verl's `TokenOutput` with `fields` (what a `RolloutTokens` becomes when unpickled)."""
    from verl.workers.rollout.replica import TokenOutput  # noqa: PLC0415 - start-up: the rollout server's Ray process imports no verl

    return TokenOutput(**fields)


@dataclass
class RolloutTokens:
    """One generation's result, to be verl's `TokenOutput` where verl reads it: pickled (a Ray actor's
    return value) it is rebuilt as a `TokenOutput` on the receiving side, which imports verl anyway."""

    token_ids: list[int]
    log_probs: list[float] | None
    stop_reason: str
    extra_fields: dict[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        return {
            "token_ids": self.token_ids,
            "log_probs": self.log_probs,
            "stop_reason": self.stop_reason,
            "extra_fields": self.extra_fields,
        }

    def __reduce__(self) -> tuple:
        return (_verl_token_output, (self.fields(),))

    def as_verl_if_loaded(self) -> Any:
        """verl's `TokenOutput` at once where verl's module is imported already (an in-process caller),
        else this object (a Ray actor's result: a `TokenOutput` once unpickled)."""
        return _verl_token_output(self.fields()) if REPLICA_MODULE in sys.modules else self


# verl sampling keys the server maps; any other key with a non-neutral value is refused
_NEUTRAL_SAMPLING: dict[str, Any] = {"repetition_penalty": 1.0}


@dataclass(frozen=True)
class TokenBudget:
    """verl's vLLM server's rule for a request's `max_tokens` (`vllm_async_server.generate`), which
    a multi-turn loop relies on: unset, min(response_length, prompt_length + response_length - the
    prompt's tokens), so that a conversation's turns together stay within prompt + response length;
    any value is then clamped to [1, max_model_len - the prompt's tokens]. A prompt that leaves no
    room at all is refused. `prompt_length` None (a caller that does not know it): response_length."""

    response_length: int
    prompt_length: int | None = None
    max_model_len: int | None = None  # None: prompt_length + response_length, as verl's engines

    def max_tokens(self, prompt_len: int, requested: int | None) -> int:
        model_len = self.max_model_len or (
            None if self.prompt_length is None else self.prompt_length + self.response_length
        )
        room = None if model_len is None else model_len - prompt_len
        if room is not None and room < 1:
            raise ValueError(
                f"a prompt of {prompt_len} tokens leaves no room to generate within max_model_len={model_len} "
                "(actor_rollout_ref.rollout.max_model_len, default prompt_length + response_length): raise "
                "data.max_prompt_length / data.max_response_length, or end the conversation sooner "
                "(actor_rollout_ref.rollout.multi_turn.max_assistant_turns)"
            )
        if requested is None:
            requested = self.response_length
            if self.prompt_length is not None:
                requested = min(requested, self.prompt_length + self.response_length - prompt_len)
        return max(1, requested if room is None else min(requested, room))


def sampling_params_from_verl(
    sampling_params: dict[str, Any], default_max_tokens: int | TokenBudget, prompt_len: int = 0
) -> SamplingParams:
    """verl's per-request sampling dict -> the core `SamplingParams`.

    `max_tokens` (or `max_new_tokens`) follows verl's vLLM server (`TokenBudget`; an int: the response
    length with no prompt budget); vLLM's `top_k=0` ("disabled") becomes the core's -1;
    `stop_token_ids` (what verl's tool parsers add, e.g. gemma4's) and `stop` strings end a completion
    (the tokens that made them stay in the returned ids, which is what verl's loop appends)."""

    budget = (
        default_max_tokens
        if isinstance(default_max_tokens, TokenBudget)
        else TokenBudget(response_length=int(default_max_tokens))
    )
    params = dict(sampling_params)
    requested = params.pop("max_tokens", None) or params.pop("max_new_tokens", None)
    top_k = int(params.pop("top_k", -1))
    mapped = SamplingParams(
        max_tokens=budget.max_tokens(prompt_len, None if requested is None else int(requested)),
        temperature=float(params.pop("temperature", 1.0)),
        top_p=float(params.pop("top_p", 1.0)),
        top_k=-1 if top_k == 0 else top_k,
        seed=params.pop("seed", None),
        logprobs=bool(params.pop("logprobs", False)),
        stop=_stop_strings(params.pop("stop", None)),
        stop_token_ids=tuple(sorted(int(t) for t in params.pop("stop_token_ids", None) or ())),
    )
    for key, neutral in _NEUTRAL_SAMPLING.items():
        value = params.pop(key, neutral)
        if value != neutral:
            raise ValueError(f"sampling param {key}={value!r}: the Arctic backend supports only {neutral!r}")
    if params:
        raise ValueError(
            f"sampling params {sorted(params)} are not supported by the Arctic backend: remove them"
        )
    return mapped


def _stop_strings(stop: Any) -> tuple[str, ...]:
    """vLLM's `stop`: one string or a list of them (an agent loop's, e.g. SkyRL-SQL's `</sql>`)."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if not all(isinstance(s, str) and s for s in stop):
        raise ValueError(f"sampling param stop={stop!r}: give non-empty strings")
    return tuple(stop)


class ArcticRolloutServer:
    """Ray actor behind one replica: verl's rollout server surface over the core backend."""

    def __init__(
        self,
        replica_rank: int,
        response_length: int,
        max_num_seqs: int = 256,
        prompt_length: int | None = None,
        max_model_len: int | None = None,
    ) -> None:
        self.replica_rank = replica_rank
        self.response_length = response_length
        self.max_num_seqs = max_num_seqs
        self.budget = TokenBudget(response_length, prompt_length, max_model_len)
        self._batcher: GenerateBatcher | None = None
        self._backend: Backend | None = None
        self._trace: TraceWriter | None = None
        self._sampler: Any = None  # arctic_rl_core.multi_turn.turn_sampler.TurnSampler, once attached

    def attach(self, info: SessionInfo) -> None:
        """Bind to the run's backend (done on first use from the published session)."""
        from transformers import AutoTokenizer  # noqa: PLC0415 - start-up: the rollout server's Ray process imports no verl

        self._backend = info.handle.connect()
        self._batcher = GenerateBatcher(
            self._backend.generate,
            max_batch=self.max_num_seqs,
            max_calls_in_flight=self._backend.max_generate_calls_in_flight,
        )
        self._arctic_config = info.settings.arctic_config()
        self._trace = TraceWriter(info.settings.trace_dir, f"rollout{self.replica_rank}")
        self._model_path = info.settings.model_path
        tokenizer = AutoTokenizer.from_pretrained(
            self._model_path, trust_remote_code=info.settings.trust_remote_code
        )
        # ids to a backend that takes them (reference, Cortex); the on-prem server's text otherwise,
        # with what it read checked (a server that counts other tokens: TokenizerMismatchError)
        self._sampler = TurnSampler(self._backend, tokenizer, batcher=self._batcher)

    @property
    def text_prompts(self) -> bool:
        """Whether turns go to the backend as text (the on-prem Arctic server takes text only)."""
        return self._sampler.sends_text

    async def _connected(self) -> Backend:
        if self._backend is None:
            self.attach(lookup_session())
        return self._backend

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ) -> Any:
        """One turn of one trajectory (`arctic_rl_core.multi_turn.turn_sampler`): verl's ids in, the
        sampled ids and their log-probs out. Over text, a turn whose ids do not survive the server's
        re-tokenisation is sampled from the server's ids; the forwarder leaves such turns untrained.
        Returns verl's `TokenOutput` (`RolloutTokens`: one once it reaches the caller)."""
        if image_data is not None or video_data is not None or kwargs.get("audio_data") is not None:
            raise ValueError("multi-modal prompts are not supported by the Arctic rollout")
        await self._connected()

        # without a server forward (Cortex) the old-log-prob pass serves the sampler's log-probs
        params = sampling_params_for(
            self._backend, sampling_params_from_verl(sampling_params, self.budget, len(prompt_ids))
        )
        (turn,) = await self._sampler.sample([prompt_ids], params)
        if self._trace is not None:
            self._trace.write(
                {
                    "op": "generate",
                    "request_id": str(request_id),
                    "prompt_ids": list(prompt_ids),
                    "max_tokens": params.max_tokens,
                    "temperature": params.temperature,
                    "response_ids": list(turn.token_ids),
                    "logprobs": list(turn.logprobs) if turn.logprobs else None,
                    "finish_reason": str(turn.finish_reason),
                    "weights_version": turn.weights_version,
                    "sent_as": turn.sent_as,
                    "exact": turn.exact,
                }
            )
        return RolloutTokens(
            token_ids=list(turn.token_ids),
            log_probs=list(turn.logprobs) if turn.logprobs else None,
            stop_reason="aborted" if turn.finish_reason == "abort" else "completed",
            extra_fields={WEIGHTS_VERSION_KEY: turn.weights_version},
        ).as_verl_if_loaded()

    async def take_sampler_queue_stats(self) -> SamplerQueueStats:
        """The sampler's queue since the previous call (`GenerateBatcher.take_stats`): what the
        trainer logs at the end of each step."""
        if self._batcher is None:
            return SamplerQueueStats.combine([])
        return self._batcher.take_stats()

    async def sleep(self) -> None:
        """verl calls this once sampling is over (`on_sample_end`) and before loading a checkpoint:
        hand the devices to training (colocated: sampler asleep, trainer awake; checked)."""

        backend = await self._connected()
        await prepare_for_training(backend, WeightSyncPolicy.from_config(self._arctic_config))
        if self._trace is not None and self._trace.enabled:
            state = await backend.state()
            self._trace.write(
                {"op": "to_training", "inference": state.inference.value, "training": state.training.value}
            )

    async def wake_up(self) -> None:
        """Wake a sleeping sampler (the weight-sync policy wakes it with new weights after every
        step). At sleep level 1 it wakes with the weights it holds; level 2 (the colocated default)
        discarded them, so it gets the trainer's current weights through the core sync instead."""

        backend = await self._connected()
        if (await backend.state()).inference is InferenceState.AWAKE:
            return
        policy = WeightSyncPolicy.from_config(self._arctic_config)
        if policy.colocated and policy.inference_sleep_level == 2:
            await sync_after_step(backend, policy)
        else:
            await backend.wake_inference(None)

    async def disconnect(self) -> None:
        """Close this server's client connection (the backend's jobs stay); the next request reconnects."""
        backend, self._backend, self._batcher, self._sampler = self._backend, None, None, None
        if backend is not None:
            await backend.shutdown()

    async def clear_kv_cache(self) -> None:
        await (await self._connected()).reset_prefix_cache()

    # Requests are served whole by the backend: nothing to abort, resume, release or profile here.
    async def abort_all_requests(self, reject_request: bool = False) -> None:
        return None

    async def resume_generation(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None
