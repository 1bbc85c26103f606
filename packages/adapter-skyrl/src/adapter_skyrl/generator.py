"""SkyRL's `GeneratorInterface` over `Backend.generate`: single-turn rollouts scored by skyrl-gym
environments (the Arctic ones score through the core rewards).

Token ids used for training are the ones the backend reports: the prompt as the backend tokenised
it (`Completion.prompt_token_ids`, when it says) and the generated `token_ids`. With text prompts
(the Arctic on-prem server accepts text only) the chat-templated text is sent and the fraction of
prompts whose backend tokenisation differs from the local one is reported
(`generate/prompt_retokenization_drift`; when the server returns only `prompt_len`, a length
mismatch is what can be detected, and the local ids are trained on).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput

from adapter_skyrl.envs import BIRD_ENV_IDS  # importing registers the Arctic environments
from adapter_skyrl.loop_bridge import on_backend_loop

if TYPE_CHECKING:
    from arctic_rl_core.async_grpo.sync_gate import GenerationSyncGate
    from arctic_rl_core.backends.protocol import Backend, Completion, SamplingParams

PromptFormat = Literal["token_ids", "text"]

# The weights version each row was sampled with, on each GeneratorOutput: one entry per row, so
# that SkyRL's slicing (`slice_generator_output`, dynamic sampling's filter and replace) and
# concatenation (`concatenate_generator_outputs`, which keeps list-valued keys) carry it with its rows.
WEIGHTS_VERSION_KEY = "arctic_weights_version"

# The generator's per-call metrics that are a share (or a mean) over the call's rollouts, and those
# that add up over calls: how `combine_call_metrics` merges several calls' metrics into one.
GENERATOR_RATES = (
    "generate/prompt_retokenization_drift",
    "generate/execution_success_rate",
    "generate/overlong_filtered",
    "generate/avg_response_length",
)
GENERATOR_TOTALS = ("generate/scoring_errors", "generate/backend_generate_s", "generate/scoring_s")

# vLLM sampling keys SkyRL always sends whose values the backend's semantics already give.
_IMPLIED = {"min_tokens": 1, "skip_special_tokens": True, "include_stop_str_in_output": True, "min_p": 0.0}


def to_sampling_params(params: Mapping[str, Any]) -> SamplingParams:
    """SkyRL's vLLM sampling dict -> the backend's `SamplingParams`; anything else is an error."""
    from arctic_rl_core.backends.protocol import SamplingParams

    known = {"max_tokens", "temperature", "top_p", "top_k", "logprobs", "stop", *_IMPLIED}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"sampling params {unknown}: the Arctic backend cannot honour them; remove them")
    for key, implied in _IMPLIED.items():
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
        logprobs=bool(logprobs),
    )


class ArcticGenerator(GeneratorInterface):
    """Rollouts from a core backend, one completion per prompt row (SkyRL already replicates)."""

    def __init__(
        self,
        backend: Backend,
        tokenizer: Any,
        *,
        prompt_format: PromptFormat = "token_ids",
        chat_template_kwargs: Mapping[str, Any] | None = None,
        env_configs: Any = None,
        apply_overlong_filtering: bool = False,
        max_turns: int = 1,
        call_timeout_s: float | None = None,
        expected_weights_version: Callable[[], int | None] | None = None,
        remember_inputs: bool = False,
        sync_gate: GenerationSyncGate | None = None,
    ):
        if prompt_format not in ("token_ids", "text"):
            raise ValueError(f"prompt_format={prompt_format!r}: use 'token_ids' or 'text'")
        self.backend = backend
        self.tokenizer = tokenizer
        self.prompt_format = prompt_format
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        # SkyRL's `environment.skyrl_gym`: each env_class gets its own section as env_config.
        self.env_configs = env_configs
        # SkyRL's generator.apply_overlong_filtering (DAPO): a truncated response trains no token
        self.apply_overlong_filtering = apply_overlong_filtering
        # SkyRL's generator.max_turns: SkyRLGymGenerator puts it in every environment's extras (an
        # environment such as gsm8k_multi_turn sizes its per-turn format reward by it)
        self.max_turns = max_turns
        self.call_timeout_s = call_timeout_s
        # The version the last weight sync produced (the dispatch's); rollouts must use exactly it.
        self.expected_weights_version = expected_weights_version
        self.weights_versions: list[int] = []  # one per generate call, in order
        # SkyRL's fully asynchronous trainer: each group's input, by uid, so that a group too stale
        # to train on can be generated again (`async.stale_policy=regenerate`).
        self.remember_inputs = remember_inputs
        self.inputs_by_uid: dict[str, GeneratorInput] = {}
        # fully async: no generate call reaches the sampler inside a weight sync's bracket
        self.sync_gate = sync_gate

    def _template(self, conversation: Sequence[Mapping[str, str]], *, tokenize: bool) -> Any:
        return self.tokenizer.apply_chat_template(
            list(conversation), add_generation_prompt=True, tokenize=tokenize, **self.chat_template_kwargs
        )

    def _local_ids(self, conversation: Sequence[Mapping[str, str]]) -> list[int]:
        ids = self._template(conversation, tokenize=True)
        if isinstance(ids, Mapping):  # some tokenizers return a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        if self.remember_inputs:
            for uid in {t.instance_id for t in input_batch.get("trajectory_ids") or ()}:
                self.inputs_by_uid[uid] = input_batch
        conversations = input_batch["prompts"]
        from arctic_rl_core.backends.old_logprobs import sampling_params_for

        # without a server forward (Cortex) the old-log-prob pass serves these log-probs
        params = sampling_params_for(
            self.backend, to_sampling_params(input_batch.get("sampling_params") or {})
        )
        local_ids = [self._local_ids(c) for c in conversations]
        if self.prompt_format == "text":
            prompts: list[Any] = [self._template(c, tokenize=False) for c in conversations]
        else:
            prompts = local_ids
        start = time.perf_counter()
        call = self.backend.generate(prompts, params)
        if self.sync_gate is not None:
            call = self.sync_gate.generate(call)
        out = await on_backend_loop(call, self.call_timeout_s)
        generate_s = time.perf_counter() - start
        if len(out.completions) != len(prompts):
            raise RuntimeError(
                f"backend returned {len(out.completions)} completions for {len(prompts)} prompts"
            )
        self.weights_versions.append(out.weights_version)
        expected = self.expected_weights_version() if self.expected_weights_version is not None else None
        if expected is not None:
            from arctic_rl_core.weight_sync import require_fresh_weights

            require_fresh_weights(out, expected=expected)

        prompt_ids, drifted = [], 0
        for local, completion in zip(local_ids, out.completions, strict=True):
            if completion.prompt_token_ids is not None:
                ids = list(completion.prompt_token_ids)
                drifted += ids != local
            else:  # the on-prem server reports only the length of its tokenisation of the text
                ids = local
                drifted += bool(completion.prompt_len) and completion.prompt_len != len(local)
            prompt_ids.append(ids)
        response_ids = [_response_ids(c) for c in out.completions]
        texts = [c.text for c in out.completions]

        score_start = time.perf_counter()
        rewards, verdicts = score_rollouts(
            texts,
            conversations,
            input_batch["env_classes"],
            input_batch.get("env_extras") or [{}] * len(texts),
            env_configs=self.env_configs,
            max_turns=self.max_turns,
        )
        score_s = time.perf_counter() - score_start
        errors = sum(1 for v in verdicts if v.get("scoring_error"))

        rollout_logprobs = None
        if params.logprobs:
            rollout_logprobs = [_logprobs(c) for c in out.completions]
        metrics = {
            "generate/weights_version": float(out.weights_version),
            "generate/scoring_errors": float(errors),
            "generate/prompt_retokenization_drift": drifted / len(prompts),
            "generate/avg_response_length": sum(map(len, response_ids)) / len(response_ids),
            "generate/backend_generate_s": generate_s,
            "generate/scoring_s": score_s,
            "generate/execution_success_rate": _rate(verdicts, "execution_success"),
        }
        stop_reasons = [str(c.finish_reason) for c in out.completions]
        loss_masks = [[1] * len(r) for r in response_ids]
        if self.apply_overlong_filtering:  # SkyRL's rule: zero the mask unless the response stopped
            loss_masks = [
                mask if stop == "stop" else [0] * len(mask)
                for mask, stop in zip(loss_masks, stop_reasons, strict=True)
            ]
            metrics["generate/overlong_filtered"] = sum(stop != "stop" for stop in stop_reasons) / len(
                stop_reasons
            )
        output = GeneratorOutput(
            prompt_token_ids=prompt_ids,
            response_ids=response_ids,
            rewards=rewards,
            loss_masks=loss_masks,
            stop_reasons=stop_reasons,
            rollout_metrics={k: v for k, v in metrics.items() if v is not None},
            rollout_logprobs=rollout_logprobs,
            trajectory_ids=input_batch.get("trajectory_ids"),
            trajectory_generation_times=None,
            trajectory_time_splits=None,
            rollout_expert_indices=None,
            rollout_sample_support=None,
            is_last_step=None,
            env_metrics=verdicts,
            pixel_values=None,
            image_grid_thw=None,
        )
        output[WEIGHTS_VERSION_KEY] = [int(out.weights_version)] * len(response_ids)
        return output


def combine_call_metrics(calls: Sequence[tuple[int, Mapping[str, float]]]) -> dict[str, float]:
    """Several generate calls' metrics (each with its number of rollouts) as one: each rate the mean
    over all their rollouts, each total the sum, `generate/weights_version` the oldest version sampled
    with and `generate/weights_version_max` the newest. (SkyRL keeps the last call's metrics when
    one step spans several calls, and its concatenation sums every name without avg/mean/min/max.)"""
    out: dict[str, float] = {}
    versions = [float(m["generate/weights_version"]) for _, m in calls if "generate/weights_version" in m]
    if versions:
        out["generate/weights_version"] = min(versions)
        out["generate/weights_version_max"] = max(versions)
    for name in GENERATOR_RATES:
        values = [(n, float(m[name])) for n, m in calls if m.get(name) is not None]
        if values and sum(n for n, _ in values) > 0:
            out[name] = sum(n * v for n, v in values) / sum(n for n, _ in values)
    for name in GENERATOR_TOTALS:
        values = [float(m[name]) for _, m in calls if m.get(name) is not None]
        if values:
            out[name] = sum(values)
    return out


def score_rollouts(
    texts: Sequence[str],
    conversations: Sequence[Any],
    env_classes: Sequence[str],
    env_extras: Sequence[Mapping[str, Any] | None],
    env_configs: Any = None,
    max_turns: int = 1,
) -> tuple[list[float], list[dict[str, Any]]]:
    """Reward and verdict of each response. BIRD rows are scored together by the core batch
    scorer (each distinct query executed once, gold results cached); other rows, or BIRD rows
    whose batch could not be scored, step their row's skyrl-gym environment (single turn) with
    `max_turns` in its extras, as SkyRL's generator builds them."""
    rewards: list[float | None] = [None] * len(texts)
    verdicts: list[dict[str, Any] | None] = [None] * len(texts)
    extras = [{**dict(e or {}), "max_turns": max_turns} for e in env_extras]
    bird_rows = [i for i, env_class in enumerate(env_classes) if env_class in BIRD_ENV_IDS]
    if bird_rows:
        try:
            batch = _bird_batch([texts[i] for i in bird_rows], [extras[i] for i in bird_rows])
        except (ValueError, TypeError):  # a malformed row: score row by row so each reports its own error
            batch = None
        if batch is not None:
            for i, verdict in zip(bird_rows, batch, strict=True):
                rewards[i], verdicts[i] = (
                    float(verdict["score"]),
                    {k: v for k, v in verdict.items() if k != "score"},
                )
    for i, env_class in enumerate(env_classes):
        if rewards[i] is None:
            rewards[i], verdicts[i] = _step_env(
                env_class, conversations[i], texts[i], extras[i], env_config_for(env_configs, env_class)
            )
    return [float(r) for r in rewards], [dict(v or {}) for v in verdicts]


def _bird_batch(texts: Sequence[str], extras: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    from arctic_rl_core.envs.bird import compute_score_batch

    from adapter_skyrl.envs import ground_truth

    return compute_score_batch(
        [str(e.get("data_source") or "bird") for e in extras],
        list(texts),
        [ground_truth(e, "bird") for e in extras],
        [dict(e.get("extra_info") or {}) for e in extras],
    )


def env_config_for(env_configs: Any, env_class: str) -> Any:
    """SkyRL's rule (SkyRLGymGenerator): the `environment.skyrl_gym.<env_class>` section, else {}."""
    if env_configs is None:
        return {}
    if isinstance(env_configs, Mapping):
        return env_configs.get(env_class, {})
    return getattr(env_configs, env_class, {})


def _step_env(
    env_class: str, conversation: Any, text: str, extras: Mapping[str, Any], env_config: Any = None
) -> tuple[float, dict[str, Any]]:
    import skyrl_gym

    env = skyrl_gym.make(
        env_class, env_config=env_config if env_config is not None else {}, extras=dict(extras)
    )
    try:
        env.init(conversation)
        step = env.step(text)
    finally:
        env.close()
    return float(step["reward"]), dict(step.get("metadata") or {})


def _response_ids(completion: Completion) -> list[int]:
    ids = list(completion.token_ids)
    if not ids:
        raise RuntimeError("backend returned an empty completion; SkyRL needs at least one response token")
    return ids


def _logprobs(completion: Completion) -> list[float]:
    if completion.logprobs is None or len(completion.logprobs) != len(completion.token_ids):
        raise RuntimeError(
            "backend returned no per-token log-probs (or the wrong number) although they were requested"
        )
    return [float(x) for x in completion.logprobs]


def _rate(verdicts: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [bool(v[key]) for v in verdicts if key in v]
    return sum(values) / len(values) if values else None
