"""The sleep/wake state machine of a colocated trainer + sampler, with the server's rules.

Inference: `sleep_inference(level)` -> ASLEEP (level 2 also discards the sampler's weights: they
must be synced again before generating); `wake_inference(["weights"])` -> WEIGHTS_ONLY;
`wake_inference(["kv_cache"])` from WEIGHTS_ONLY -> AWAKE; `wake_inference()` -> AWAKE. Waking
what is awake is a no-op (vLLM's behaviour); waking the KV cache before the weights is an error.
Training: `sleep_training(mode)` goes deeper only (awake < non_lp < lp_params < all);
`wake_training()` -> AWAKE.

Preconditions (violations raise `BackendStateError`): generate needs the sampler AWAKE, its weights
valid and the prefix cache reset after the last sync; sync needs the sampler's weights resident
(AWAKE or WEIGHTS_ONLY) and, for CUDA IPC, the trainer's parameters resident (AWAKE or non_lp);
reset_prefix_cache needs the KV cache (AWAKE); forward-backward, step and checkpoints need the trainer
AWAKE; a no-grad forward needs its parameters (AWAKE or non_lp).
"""

from __future__ import annotations

from collections.abc import Sequence

from arctic_rl_core.backends.protocol import InferenceState, TrainingState

TRAINING_DEPTH: dict[TrainingState, int] = {
    TrainingState.AWAKE: 0,
    TrainingState.NON_LP_ASLEEP: 1,
    TrainingState.LP_PARAMS_ASLEEP: 2,
    TrainingState.ASLEEP: 3,
}
WAKE_TAGS = frozenset({"weights", "kv_cache"})


class BackendStateError(RuntimeError):
    """An operation was called in a state where the server would fail or compute garbage."""


class SleepStateMachine:
    """`guard=False` keeps track of the state but checks nothing (arctic-platform 0.1.4's server
    checks nothing either): every `check_*` passes and out-of-order wakes/sleeps are applied."""

    def __init__(self, *, colocated: bool, guard: bool = True) -> None:
        self.colocated = colocated
        self.guard = guard
        self.inference = InferenceState.AWAKE
        self.training = TrainingState.AWAKE
        self.sampler_weights_valid = True
        self.prefix_cache_stale = False

    # -- inference ----------------------------------------------------------------------------
    def sleep_inference(self, level: int) -> None:
        if level not in (1, 2):
            raise ValueError(
                f"sleep_inference(level={level!r}): level is 1 (offload weights) or 2 (discard them)"
            )
        if not self.colocated:
            raise BackendStateError(
                "sleep_inference on a non-colocated engine: the server enables vLLM sleep mode only when "
                "colocated; do not put the sampler to sleep"
            )
        self.inference = InferenceState.ASLEEP
        if level == 2:
            self.sampler_weights_valid = False

    def wake_inference(self, tags: Sequence[str] | None) -> None:
        if tags is None:
            self.inference = InferenceState.AWAKE
            return
        tag_set = set(tags)
        unknown = sorted(tag_set - WAKE_TAGS)
        if unknown or not tag_set:
            raise ValueError(
                f"wake_inference(tags={list(tags)!r}): tags are 'weights' and/or 'kv_cache' (or None)"
            )
        if tag_set == WAKE_TAGS:
            self.inference = InferenceState.AWAKE
        elif tag_set == {"weights"}:
            if self.inference == InferenceState.ASLEEP:
                self.inference = InferenceState.WEIGHTS_ONLY
        elif self.inference == InferenceState.ASLEEP and self.guard:
            raise BackendStateError(
                "wake_inference(['kv_cache']) while the sampler's weights are asleep: wake ['weights'] first "
                "(order: weights -> sync -> kv_cache -> reset prefix cache)"
            )
        else:
            self.inference = InferenceState.AWAKE

    def check_generate(self) -> None:
        if not self.guard:
            return
        if self.inference != InferenceState.AWAKE:
            raise BackendStateError(
                f"generate while inference is {self.inference.value}: call wake_inference() (or wake 'kv_cache' "
                "after 'weights') first"
            )
        if not self.sampler_weights_valid:
            raise BackendStateError(
                "generate after sleep_inference(level=2) discarded the sampler's weights: sync_weights() first"
            )
        if self.prefix_cache_stale:
            raise BackendStateError(
                "generate after sync_weights() without reset_prefix_cache(): the prefix cache still holds KV "
                "computed with the old weights; reset it first"
            )

    def check_reset_prefix_cache(self) -> None:
        if not self.guard:
            return
        if self.inference != InferenceState.AWAKE:
            raise BackendStateError(
                f"reset_prefix_cache while inference is {self.inference.value}: wake the KV cache first "
                "(wake_inference(['kv_cache']))"
            )

    def reset_prefix_cache(self) -> None:
        self.check_reset_prefix_cache()
        if self.inference == InferenceState.AWAKE:
            self.prefix_cache_stale = False

    # -- weight sync ----------------------------------------------------------------------------
    def check_sync(self, cuda_ipc: bool) -> None:
        if not self.guard:
            return
        if self.inference == InferenceState.ASLEEP:
            raise BackendStateError(
                "sync_weights into a sleeping sampler: wake_inference(['weights']) first (the sync would be lost)"
            )
        if cuda_ipc and TRAINING_DEPTH[self.training] >= TRAINING_DEPTH[TrainingState.LP_PARAMS_ASLEEP]:
            raise BackendStateError(
                f"sync_weights(cuda_ipc=True) while training is {self.training.value}: CUDA IPC reads the trainer's "
                "parameters on the device; sync before sleep_training('lp_params'/'all'), or use cuda_ipc=False"
            )

    def synced(self) -> None:
        self.sampler_weights_valid = True
        self.prefix_cache_stale = True

    # -- training -------------------------------------------------------------------------------
    def sleep_training(self, mode: str) -> None:
        try:
            target = TrainingState(mode)
        except ValueError:
            raise ValueError(
                f"sleep_training(mode={mode!r}): mode is 'non_lp', 'lp_params' or 'all'"
            ) from None
        if target == TrainingState.AWAKE:
            raise ValueError("sleep_training(mode='awake'): use wake_training()")
        if TRAINING_DEPTH[target] < TRAINING_DEPTH[self.training] and self.guard:
            raise BackendStateError(
                f"sleep_training({mode!r}) while training is already {self.training.value} (deeper): "
                "wake_training() first"
            )
        self.training = target

    def wake_training(self) -> None:
        self.training = TrainingState.AWAKE

    def check_training(self, what: str) -> None:
        if not self.guard:
            return
        if self.training != TrainingState.AWAKE:
            raise BackendStateError(
                f"{what} while training is {self.training.value}: call wake_training() first"
            )

    def check_trainer_forward(self) -> None:
        if not self.guard:
            return
        if TRAINING_DEPTH[self.training] > TRAINING_DEPTH[TrainingState.NON_LP_ASLEEP]:
            raise BackendStateError(
                f"forward while training is {self.training.value} (parameters offloaded): call wake_training() first"
            )
