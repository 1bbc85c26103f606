"""The weight-sync policy both adapters run after every optimizer step, and weights versions.

`sync_after_step(backend, policy)`:

- not colocated (separate GPUs, NCCL): the sampler must be awake; transfer, then reset the
  prefix cache (cached KV was computed with the old weights);
- colocated (shared GPUs): optionally offload the trainer's optimizer state
  (`sleep_training("non_lp")`), wake the sampler's weights (`wake_inference(["weights"])`),
  transfer (CUDA IPC or CPU file, low-memory or not), wake the KV cache, reset the prefix cache,
  then put the trainer to sleep as configured.

Every transition is checked against `Backend.state()` before and after: syncing into sleeping
weights, a CUDA IPC sync without resident trainer weights, a colocation mismatch, or a state
that did not change as requested is a `WeightSyncError`, never a silent no-op. The returned
weights version is what the sampler now serves; `GenerateOutput.weights_version` reports it per
rollout, so `require_fresh_weights` can reject stale rollouts.

`prepare_for_training(backend, policy)` is the way back (colocated: sleep the sampler, wake the
trainer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from arctic_rl_core.backends.protocol import (
    Backend,
    BackendState,
    GenerateOutput,
    InferenceState,
    TrainingState,
)

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig

TrainingSleepMode = Literal["non_lp", "lp_params", "all"]


class WeightSyncError(RuntimeError):
    """A weight-sync transition is not allowed in the backend's current state, or did not happen."""


class StaleWeightsError(RuntimeError):
    """A rollout was generated with weights older than allowed."""


@dataclass(frozen=True)
class WeightSyncPolicy:
    """How trained weights reach the sampler.

    - `colocated`: training and inference share GPUs (must match the backend's state).
    - `cuda_ipc` / `low_memory`: colocated transfer strategy (zero-copy CUDA IPC; one parameter
      at a time); both False means the CPU-file path. NCCL is used when not colocated.
    - `offload_optimizer_before_sync`: colocated only, `sleep_training("non_lp")` before waking
      the sampler's weights, to make room for them.
    - `sleep_training_after`: colocated only, the trainer's sleep mode after the sync (None: stay
      awake). `from_config` sets both for colocated runs.
    - `inference_sleep_level`: vLLM sleep level used by `prepare_for_training`.
    """

    colocated: bool
    cuda_ipc: bool = False
    low_memory: bool = False
    offload_optimizer_before_sync: bool = False
    sleep_training_after: TrainingSleepMode | None = None
    inference_sleep_level: int = 1

    def __post_init__(self) -> None:
        problems = []
        if self.cuda_ipc and not self.colocated:
            problems.append("cuda_ipc=True needs colocated=True (CUDA IPC shares GPU memory); use NCCL")
        if self.low_memory and not self.cuda_ipc:
            problems.append("low_memory=True applies to CUDA IPC only: set cuda_ipc=True or low_memory=False")
        if self.sleep_training_after not in (None, "non_lp", "lp_params", "all"):
            problems.append(
                f"sleep_training_after={self.sleep_training_after!r}: expected None, 'non_lp', 'lp_params' or 'all'"
            )
        if not self.colocated and (
            self.offload_optimizer_before_sync or self.sleep_training_after is not None
        ):
            problems.append(
                "offload_optimizer_before_sync / sleep_training_after act only when colocated: "
                "leave them False / None for a non-colocated policy"
            )
        if self.inference_sleep_level not in (1, 2):
            problems.append(
                f"inference_sleep_level={self.inference_sleep_level!r}: vLLM sleep levels are 1 and 2"
            )
        if problems:
            raise ValueError("invalid WeightSyncPolicy:\n  - " + "\n  - ".join(problems))

    @classmethod
    def from_config(cls, cfg: ArcticRLConfig) -> WeightSyncPolicy:
        """Colocation from `placement.colocate`, strategy from `weight_sync`. Colocated runs
        offload the optimizer before the sync and put the trainer fully to sleep after it (the
        sampler needs the memory for its KV cache), and the sampler sleeps at
        `weight_sync.inference_sleep_level` (default 2) while training runs."""
        colocated = bool(cfg.placement.colocate)
        return cls(
            colocated=colocated,
            cuda_ipc=bool(cfg.weight_sync.cuda_ipc),
            low_memory=bool(cfg.weight_sync.low_memory),
            offload_optimizer_before_sync=colocated,
            sleep_training_after="all" if colocated else None,
            # level 2: the sync rewrites every weight, so keeping a host copy (level 1) is wasted
            # (not colocated the sampler never sleeps: the level is unused)
            inference_sleep_level=(cfg.weight_sync.inference_sleep_level or 2) if colocated else 1,
        )


async def sync_after_step(backend: Backend, policy: WeightSyncPolicy) -> int:
    """Bring the sampler to the trainer's weights; returns the weights version it now serves."""
    before = await backend.state()
    _check_colocation(before, policy)
    if not policy.colocated:
        if before.inference is not InferenceState.AWAKE:
            raise WeightSyncError(
                f"not colocated but inference is {before.inference.value}: NCCL sync into sleeping "
                "weights; a non-colocated sampler must stay awake (call wake_inference())"
            )
        version = await _transfer(backend, policy, before)
        await backend.reset_prefix_cache()
        return version

    state = before
    if policy.offload_optimizer_before_sync and state.training is TrainingState.AWAKE:
        state = await _sleep_training(backend, state, "non_lp")
    if policy.cuda_ipc and state.training not in (TrainingState.AWAKE, TrainingState.NON_LP_ASLEEP):
        raise WeightSyncError(
            f"cuda_ipc=True but training is {state.training.value}: CUDA IPC needs the trainer's weights on "
            "the GPU; call wake_training() first or use the CPU-file path (cuda_ipc=False)"
        )
    if state.inference is InferenceState.ASLEEP:
        await backend.wake_inference(["weights"])
        state = await _expect(
            backend, "wake_inference(['weights'])", inference=(InferenceState.WEIGHTS_ONLY,)
        )
    version = await _transfer(backend, policy, state)
    state = await backend.state()
    if state.inference is InferenceState.WEIGHTS_ONLY:
        await backend.wake_inference(["kv_cache"])
        state = await _expect(backend, "wake_inference(['kv_cache'])", inference=(InferenceState.AWAKE,))
    await backend.reset_prefix_cache()
    if policy.sleep_training_after is not None:
        await _sleep_training(backend, state, policy.sleep_training_after)
    return version


async def prepare_for_training(backend: Backend, policy: WeightSyncPolicy) -> None:
    """Colocated: put the sampler to sleep and wake the trainer (checked). Not colocated: only
    checks that both are awake."""
    state = await backend.state()
    _check_colocation(state, policy)
    if not policy.colocated:
        if state.training is not TrainingState.AWAKE:
            raise WeightSyncError(
                f"not colocated but training is {state.training.value}: call wake_training()"
            )
        return
    if state.inference is not InferenceState.ASLEEP:
        await backend.sleep_inference(policy.inference_sleep_level)
        state = await _expect(
            backend, f"sleep_inference({policy.inference_sleep_level})", inference=(InferenceState.ASLEEP,)
        )
    if state.training is not TrainingState.AWAKE:
        await backend.wake_training()
        await _expect(backend, "wake_training()", training=(TrainingState.AWAKE,))


def require_fresh_weights(rollout: GenerateOutput | int, *, expected: int, max_staleness: int = 0) -> None:
    """Raise `StaleWeightsError` when a rollout's weights version lags `expected` (usually the
    trainer's step count) by more than `max_staleness` versions, or is ahead of it."""
    version = rollout.weights_version if isinstance(rollout, GenerateOutput) else int(rollout)
    if max_staleness < 0:
        raise ValueError(f"max_staleness={max_staleness}: must be >= 0")
    if version > expected:
        raise StaleWeightsError(f"rollout weights version {version} is ahead of the expected {expected}")
    if expected - version > max_staleness:
        raise StaleWeightsError(
            f"rollout generated with weights version {version}, expected {expected} "
            f"(at most {max_staleness} behind): sync weights after every step (sync_after_step)"
        )


# ----------------------------------------------------------------------------------------------


def _check_colocation(state: BackendState, policy: WeightSyncPolicy) -> None:
    if state.colocated != policy.colocated:
        raise WeightSyncError(
            f"policy.colocated={policy.colocated} but the backend reports colocated={state.colocated}: "
            "build the policy from the same config as the backend (WeightSyncPolicy.from_config)"
        )


async def _transfer(backend: Backend, policy: WeightSyncPolicy, before: BackendState) -> int:
    if before.inference is InferenceState.ASLEEP:
        raise WeightSyncError("inference is asleep: syncing into sleeping weights is not allowed")
    if policy.colocated:
        version = await backend.sync_weights(cuda_ipc=policy.cuda_ipc, low_memory=policy.low_memory)
    else:
        version = await backend.sync_weights()
    after = await backend.state()
    if not version == after.weights_version == after.trainer_version:
        raise WeightSyncError(
            f"sync_weights returned version {version} but the backend reports weights_version="
            f"{after.weights_version}, trainer_version={after.trainer_version}: the sampler did not take "
            "the trainer's weights"
        )
    return version


# Training sleep goes deeper only: awake < non_lp (optimizer state offloaded) < lp_params < all.
TRAINING_SLEEP_DEPTH: dict[TrainingState, int] = {
    TrainingState.AWAKE: 0,
    TrainingState.NON_LP_ASLEEP: 1,
    TrainingState.LP_PARAMS_ASLEEP: 2,
    TrainingState.ASLEEP: 3,
}


def training_state_after_sleep(state: TrainingState, mode: str) -> TrainingState:
    """The trainer's state after `sleep_training(mode)` from `state` (never shallower)."""
    target = TrainingState(mode)
    return target if TRAINING_SLEEP_DEPTH[target] > TRAINING_SLEEP_DEPTH[state] else state


async def _sleep_training(backend: Backend, state: BackendState, mode: str) -> BackendState:
    """`sleep_training(mode)` unless the trainer already sleeps at least that deep; checked."""
    target = TrainingState(mode)
    if TRAINING_SLEEP_DEPTH[state.training] >= TRAINING_SLEEP_DEPTH[target]:
        return state
    await backend.sleep_training(mode)
    return await _expect(backend, f"sleep_training({mode!r})", training=(target,))


async def _expect(
    backend: Backend,
    call: str,
    *,
    inference: tuple[InferenceState, ...] | None = None,
    training: tuple[TrainingState, ...] | None = None,
) -> BackendState:
    state = await backend.state()
    if inference is not None and state.inference not in inference:
        raise WeightSyncError(
            f"after {call} inference is {state.inference.value}, expected {' or '.join(s.value for s in inference)}"
        )
    if training is not None and state.training not in training:
        raise WeightSyncError(
            f"after {call} training is {state.training.value}, expected {' or '.join(s.value for s in training)}"
        )
    return state
