"""SkyRL's own generator (`SkyRLGymGenerator`) sampling through a core backend.

`ArcticGenerator` is SkyRL 0.4.0's `SkyRLGymGenerator` with `ArcticInferenceClient` as its engine:
SkyRL's agent loop, environments, chat templates, stop strings, observation tokens, loss masks,
per-token rewards, step-wise trajectories and batched generation run unchanged; every turn samples
through the backend (`arctic_rl_core.multi_turn.turn_sampler`). What it adds:

- **Token faithfulness, checked per turn.** Every turn records the ids the sampler conditioned on. A
  trajectory's row (SkyRL's prompt ids + response ids) is compared with that record
  (`arctic_rl_core.multi_turn.trajectory_fidelity`): the sampled tokens must sit where SkyRL put them,
  and each turn's context must be the row's prefix. Where only the first prompt was tokenised
  differently (text prompts to the on-prem server), the row's prompt becomes the server's ids (an
  exact repair: the prompt is not trained). From the first turn whose context differs otherwise, the
  loss mask is zeroed: no token is trained as if sampled from ids the sampler did not read.
  Step-wise rows are one turn each: their prompt becomes the context the sampler read.
- **Weights version per row** (`WEIGHTS_VERSION_KEY`: the oldest version any of the row's turns was
  sampled with), checked against the last sync in synchronous runs.
- **A trajectory whose environment raises** is not the batch's end: it is logged with its
  trajectory id and the error, kept as one masked row (reward 0, loss mask 0), and counted
  (`generate/env_errors`); only a call in which every trajectory failed raises.
- **Metrics**: `generate/*` (weights version, turns per trajectory, scoring errors and execution
  success of the Arctic environments, overlong filtering, environment errors) and the core's
  `token_drift/*` (turns sampled from other ids than trained on, prompts the server tokenised
  differently), as verl's adapter logs them.

SkyRL's custom chat template with conversation turns re-tokenises the history (SkyRL's own mode
without token-in / token-out): its rows are SkyRL's, unchecked.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.old_logprobs import from_sampler
from arctic_rl_core.multi_turn.trajectory_fidelity import (
    TrajectoryFidelity,
    drift_metrics,
    trajectory_fidelity,
)
from arctic_rl_core.weight_sync import require_fresh_weights
from loguru import logger
from skyrl.train.generators.base import GeneratorInput, GeneratorOutput
from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator, StepWiseOutput, TrajectoryOutput

from adapter_skyrl.envs import register_environments
from adapter_skyrl.inference_client import RECORDER, ArcticInferenceClient, TurnRecorder

if TYPE_CHECKING:
    from arctic_rl_core.multi_turn.turn_sampler import SampledTurn

register_environments()  # any process that unpickles the generator has the Arctic environments

# The weights version each row was sampled with, on each GeneratorOutput: one entry per row, so
# that SkyRL's slicing (`slice_generator_output`, dynamic sampling's filter and replace) and
# concatenation (`concatenate_generator_outputs`, which keeps list-valued keys) carry it with its rows.
WEIGHTS_VERSION_KEY = "arctic_weights_version"

# The generator's per-call metrics that are a share (or a mean) over the call's rollouts, those that
# add up over calls, and those that are a maximum: how `combine_call_metrics` merges calls.
GENERATOR_RATES = (
    "token_drift/turns",
    "token_drift/prompts_repaired",
    "generate/execution_success_rate",
    "generate/overlong_filtered",
    "generate/turns_mean",
)
GENERATOR_TOTALS = ("generate/scoring_errors", "generate/env_errors")
GENERATOR_MAXIMA = ("generate/turns_max",)


class EnvironmentFailure(RuntimeError):
    """An environment's init, step or close raised inside one trajectory's agent loop."""

    def __init__(self, where: str, cause: BaseException):
        super().__init__(f"{where} raised {type(cause).__name__}: {cause}")
        self.where = where
        self.cause = cause


@dataclass
class TrajectoryReport:
    """What the generator learned of one trajectory (index = its position in the call's input)."""

    turns: list[SampledTurn] = field(default_factory=list)
    drifted_turns: int = 0
    prompt_repaired: bool = False
    failure: str | None = None

    @property
    def weights_version(self) -> int | None:
        return min((t.weights_version for t in self.turns), default=None)

    @property
    def fidelity(self) -> TrajectoryFidelity:
        return TrajectoryFidelity(
            prompt_ids=self.turns[0].context_ids,
            prompt_repaired=self.prompt_repaired,
            exact_turns=len(self.turns) - self.drifted_turns,
            turns=len(self.turns),
        )


@dataclass
class CallReport:
    """One `generate` call: a report per trajectory, in input order. SkyRL starts the agent loops in
    no particular order; a loop finds its slot by its trajectory id, or (a call without ids) by the
    identity of its prompt and extras objects (each row's extras are its own copy in SkyRL's input)."""

    trajectories: list[TrajectoryReport]
    _slots: dict[Any, list[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, input_batch: GeneratorInput) -> CallReport:
        ids = input_batch.get("trajectory_ids")
        keys = (
            [_trajectory_key(t) for t in ids]
            if ids is not None
            else [
                (id(p), id(e)) for p, e in zip(input_batch["prompts"], input_batch["env_extras"], strict=True)
            ]
        )
        call = cls([TrajectoryReport() for _ in keys])
        for index, key in enumerate(keys):
            call._slots.setdefault(key, []).append(index)
        return call

    def claim(self, trajectory_id: Any, prompt: Any, env_extras: Any) -> TrajectoryReport:
        key = _trajectory_key(trajectory_id) if trajectory_id is not None else (id(prompt), id(env_extras))
        slots = self._slots.get(key)
        if not slots:
            raise RuntimeError(
                f"the Arctic generator cannot tell which input row trajectory {trajectory_id} is"
            )
        return self.trajectories[slots.pop(0)]


def _trajectory_key(trajectory_id: Any) -> tuple[str, int]:
    return (str(trajectory_id.instance_id), int(trajectory_id.repetition_id))


_CALL: contextvars.ContextVar[CallReport | None] = contextvars.ContextVar(
    "arctic_generate_call", default=None
)


class ArcticGenerator(SkyRLGymGenerator):
    """SkyRL's generator over `ArcticInferenceClient` (see the module doc).

    `expected_weights_version`: the version the last weight sync produced; synchronous rollouts must
    use exactly it. `remember_inputs`: keep each group's input by uid (the fully asynchronous
    trainer's `async.stale_policy=regenerate`)."""

    def __init__(
        self,
        generator_cfg: Any,
        skyrl_gym_cfg: Any,
        inference_engine_client: ArcticInferenceClient,
        tokenizer: Any,
        *,
        expected_weights_version: Callable[[], int | None] | None = None,
        remember_inputs: bool = False,
    ):
        super().__init__(generator_cfg, skyrl_gym_cfg, inference_engine_client, tokenizer)
        self.expected_weights_version = expected_weights_version
        self.weights_versions: list[int] = []  # the oldest version of each generate call, in order
        self.remember_inputs = remember_inputs
        self.inputs_by_uid: dict[str, GeneratorInput] = {}
        self.last_call: CallReport | None = None  # the latest call's per-trajectory reports
        self._checks_rows = not (self.use_conversation_multi_turn and self.custom_chat_template)

    @property
    def backend(self) -> Any:
        return self.inference_engine_client.backend

    async def generate(self, input_batch: GeneratorInput, disable_tqdm: bool = True) -> GeneratorOutput:
        if self.remember_inputs:
            for uid in {t.instance_id for t in input_batch.get("trajectory_ids") or ()}:
                self.inputs_by_uid[uid] = input_batch
        input_batch = self._with_sampler_logprobs(input_batch)
        call = CallReport.of(input_batch)
        token = _CALL.set(call)
        batched = TurnRecorder()
        recorder_token = RECORDER.set(batched if self.batched else None)
        try:
            output = await super().generate(input_batch, disable_tqdm=disable_tqdm)
        finally:
            RECORDER.reset(recorder_token)
            _CALL.reset(token)
        if self.batched:  # SkyRL's single-turn batched path: one engine call, row i = turn i
            call.trajectories = [TrajectoryReport(turns=[turn]) for turn in batched.turns]
            self._check_batched_rows(output, call)
        self.last_call = call
        return self._finish(output, call)

    def _with_sampler_logprobs(self, input_batch: GeneratorInput) -> GeneratorInput:
        """Without a server forward (Cortex) the old log-probs are the sampler's: SkyRL must keep them."""

        params = input_batch.get("sampling_params")
        if from_sampler(self.backend) and params is not None and params.get("logprobs") is None:
            return {**input_batch, "sampling_params": {**params, "logprobs": 1}}
        return input_batch

    # -- one trajectory ----------------------------------------------------------------------------
    async def agent_loop(
        self, prompt: Any, env_class: str, env_extras: dict[str, Any], *args: Any, **kwargs: Any
    ):
        """SkyRL's agent loop, its turns recorded; then the row checked and repaired (module doc)."""
        call = _CALL.get()
        trajectory_id = kwargs.get("trajectory_id")
        report = TrajectoryReport() if call is None else call.claim(trajectory_id, prompt, env_extras)
        recorder = TurnRecorder()
        token = RECORDER.set(recorder)
        try:
            output = await super().agent_loop(prompt, env_class, env_extras, *args, **kwargs)
        except EnvironmentFailure as failure:
            report.failure = str(failure)
            report.turns = recorder.turns
            logger.error(
                f"trajectory {trajectory_id} (env_class={env_class}): {failure}; kept as a masked row "
                "(reward 0, loss mask 0) so the rest of the batch trains"
            )
            return self._failed_trajectory(prompt, recorder.turns, kwargs.get("sampling_params"))
        finally:
            RECORDER.reset(token)
        report.turns = recorder.turns
        if self._checks_rows and report.turns:
            if isinstance(output, StepWiseOutput):
                for step, turn in zip(output.step_outputs, report.turns, strict=True):
                    self._repair_step(step, turn, report)
            else:
                self._repair_row(output, report)
        return output

    async def _run_in_executor_if_available(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        """SkyRL runs every environment call (init, step, close) through here: an exception from one
        becomes an `EnvironmentFailure` naming the call."""
        try:
            return await super()._run_in_executor_if_available(func, *args, **kwargs)
        except Exception as error:
            raise EnvironmentFailure(
                f"{type(getattr(func, '__self__', func)).__name__}.{func.__name__}", error
            ) from error

    def _repair_row(self, output: TrajectoryOutput, report: TrajectoryReport) -> None:
        """Token-in / token-out row: the prompt as the sampler read it, and no trained token after the
        first turn sampled from other ids than the row's prefix."""
        prompt = list(output.prompt_ids)
        first = report.turns[0]
        if tuple(prompt) != first.prompt_ids:
            raise RuntimeError(
                "SkyRL's row prompt is not what its first turn sent (token-in / token-out broken)"
            )
        fidelity = trajectory_fidelity(report.turns)
        misplaced = self._first_misplaced_turn(output, report.turns, len(prompt))
        exact = min(fidelity.exact_turns, misplaced)
        if exact < len(report.turns):
            start = len(report.turns[exact].prompt_ids) - len(prompt)
            output.loss_mask[start:] = [0] * (len(output.loss_mask) - start)
            report.drifted_turns = len(report.turns) - exact
        if fidelity.prompt_repaired:
            output.prompt_ids = list(fidelity.prompt_ids)
            report.prompt_repaired = True

    def _first_misplaced_turn(
        self, output: TrajectoryOutput, turns: Sequence[SampledTurn], prompt_len: int
    ) -> int:
        """The first turn whose sampled tokens are not where SkyRL's row holds them (an environment's
        `postprocessed_action` re-encodes a turn: SkyRL's own exception to token-in / token-out)."""
        response = output.response_ids
        for k, turn in enumerate(turns):
            start = len(turn.prompt_ids) - prompt_len
            for i, token in enumerate(turn.token_ids):
                at = start + i
                if at >= len(response):
                    break
                # a turn's final EOS is dropped when the next turn continues the same message
                if response[at] != token and not (
                    i == len(turn.token_ids) - 1 and token == self.tokenizer.eos_token_id
                ):
                    return k
        return len(turns)

    def _repair_step(self, step: TrajectoryOutput, turn: SampledTurn, report: TrajectoryReport) -> None:
        """A step-wise row is one turn: its prompt is what the sampler read (exact whatever the drift)."""
        if tuple(step.prompt_ids) != turn.prompt_ids or list(
            step.response_ids[: len(turn.token_ids)]
        ) != list(turn.token_ids):
            step.loss_mask[:] = [0] * len(step.loss_mask)
            report.drifted_turns += 1
            return
        if not turn.exact:
            step.prompt_ids = list(turn.context_ids)
            report.prompt_repaired = True

    def _failed_trajectory(self, prompt: Any, turns: Sequence[SampledTurn], sampling_params: Any) -> Any:
        """One masked row (prompt, one EOS token, loss mask 0, reward 0) for a trajectory whose
        environment raised."""
        if turns:
            prompt_ids = list(turns[0].context_ids)
        else:
            prompt_ids = list(
                self.tokenizer.apply_chat_template(
                    prompt, add_generation_prompt=True, tokenize=True, return_dict=False,
                    **self.generator_cfg.chat_template_kwargs,
                )
            )  # fmt: skip
        params = sampling_params if sampling_params is not None else {}
        logprobs = [0.0] if params.get("logprobs") is not None else None
        row = TrajectoryOutput(
            response_ids=[int(self.tokenizer.eos_token_id)],
            reward=0.0 if self.custom_chat_template else [0.0],
            stop_reason="abort",
            loss_mask=[0],
            prompt_ids=prompt_ids,
            rollout_logprobs=logprobs,
            env_metrics={},
        )
        if self.generator_cfg.step_wise_trajectories:
            return StepWiseOutput(step_outputs=[row])
        return row

    # -- the call's output ---------------------------------------------------------------------------
    def _check_batched_rows(self, output: GeneratorOutput, call: CallReport) -> None:
        for i, (report, prompt, response) in enumerate(
            zip(call.trajectories, output["prompt_token_ids"], output["response_ids"], strict=True)
        ):
            turn = report.turns[0]
            if tuple(prompt) != turn.prompt_ids or tuple(response) != turn.token_ids[: len(response)]:
                raise RuntimeError(f"batched row {i} is not what its engine call sampled")
            if not turn.exact:
                output["prompt_token_ids"][i] = list(turn.context_ids)
                report.prompt_repaired = True

    def _finish(self, output: GeneratorOutput, call: CallReport) -> GeneratorOutput:
        reports = call.trajectories
        failed = [r.failure for r in reports if r.failure is not None]
        if reports and len(failed) == len(reports):
            raise RuntimeError(
                f"every trajectory of the batch failed in its environment; the first: {failed[0]}"
            )
        versions = self._row_versions(output, reports)
        oldest = min(versions)
        self.weights_versions.append(oldest)
        expected = self.expected_weights_version() if self.expected_weights_version is not None else None
        if expected is not None:
            for version in sorted(set(versions)):
                require_fresh_weights(version, expected=expected)
        output[WEIGHTS_VERSION_KEY] = versions
        turns = [len(r.turns) for r in reports if r.failure is None]
        metrics = {
            "generate/weights_version": float(oldest),
            "generate/turns_mean": sum(turns) / len(turns),
            "generate/turns_max": float(max(turns)),
            "generate/env_errors": float(len(failed)),
            **_env_metric_rates(output),
            **drift_metrics([r.fidelity for r in reports if r.turns]),
        }
        if self.generator_cfg.apply_overlong_filtering:
            stops = output["stop_reasons"]
            metrics["generate/overlong_filtered"] = sum(s != "stop" for s in stops) / len(stops)
        output["rollout_metrics"] = {**(output.get("rollout_metrics") or {}), **metrics}
        return output

    def _row_versions(self, output: GeneratorOutput, reports: Sequence[TrajectoryReport]) -> list[int]:
        """The weights version of each output row: a trajectory's (its oldest turn's) for each of its rows."""
        per_trajectory = []
        for report in reports:
            version = report.weights_version
            if version is None:  # an environment failed before the first turn: the call's newest
                version = max(
                    (r.weights_version for r in reports if r.weights_version is not None), default=0
                )
            per_trajectory.append(version)
        if self.generator_cfg.step_wise_trajectories and not self.batched:
            last = output["is_last_step"]
            rows, trajectory = [], 0
            for is_last in last:
                rows.append(per_trajectory[trajectory])
                trajectory += bool(is_last)
            return rows
        return per_trajectory


def _env_metric_rates(output: GeneratorOutput) -> dict[str, float]:
    """Scoring errors and execution success reported by the Arctic environments (`get_metrics`): per
    row where SkyRL returns them (`env_metrics`), else from SkyRL's per-call means (its batched path
    returns only those, as `environment/<name>`)."""
    rows = output.get("env_metrics")
    if rows is None:
        means = output.get("rollout_metrics") or {}
        n = len(output["response_ids"])
        rows = [
            {
                k: means[f"environment/{k}"]
                for k in ("scoring_error", "execution_success")
                if f"environment/{k}" in means
            }
        ] * n
    out: dict[str, float] = {
        "generate/scoring_errors": float(round(sum(float(m.get("scoring_error", 0)) for m in rows)))
    }
    success = [float(m["execution_success"]) for m in rows if "execution_success" in m]
    if success:
        out["generate/execution_success_rate"] = sum(success) / len(success)
    return out


def combine_call_metrics(calls: Sequence[tuple[int, Mapping[str, float]]]) -> dict[str, float]:
    """Several generate calls' metrics (each with its number of rollouts) as one: each rate the mean
    over all their rollouts, each total the sum, each maximum the maximum, `generate/weights_version`
    the oldest version sampled with and `generate/weights_version_max` the newest. (SkyRL keeps the
    last call's metrics when one step spans several calls, and its concatenation sums every name
    without avg/mean/min/max.)"""
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
    for name in GENERATOR_MAXIMA:
        values = [float(m[name]) for _, m in calls if m.get(name) is not None]
        if values:
            out[name] = max(values)
    return out
