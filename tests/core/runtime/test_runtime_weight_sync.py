"""The weight-sync policy against a fake backend that records calls AND enforces state."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
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
)
from arctic_rl_core.weight_sync import (
    StaleWeightsError,
    WeightSyncError,
    WeightSyncPolicy,
    prepare_for_training,
    require_fresh_weights,
    sync_after_step,
)

DEPTH = {
    TrainingState.AWAKE: 0,
    TrainingState.NON_LP_ASLEEP: 1,
    TrainingState.LP_PARAMS_ASLEEP: 2,
    TrainingState.ASLEEP: 3,
}


class StrictFakeBackend(Backend):
    """Records every state-changing call and refuses the ones a real engine would fail on."""

    def __init__(
        self,
        *,
        colocated: bool,
        inference: InferenceState = InferenceState.AWAKE,
        training: TrainingState = TrainingState.AWAKE,
    ) -> None:
        self.colocated = colocated
        self.inference = inference
        self.training = training
        self.weights_version = 0
        self.trainer_version = 0
        self.calls: list[tuple] = []

    # -- used by the policy -------------------------------------------------------------------
    async def state(self) -> BackendState:
        return BackendState(
            self.inference, self.training, self.weights_version, self.trainer_version, self.colocated
        )

    async def sync_weights(self, *, cuda_ipc: bool | None = None, low_memory: bool | None = None) -> int:
        self.calls.append(("sync_weights", cuda_ipc, low_memory))
        if self.inference is InferenceState.ASLEEP:
            raise RuntimeError("engine: weights of the sampler are asleep")
        if not self.colocated and (cuda_ipc or low_memory):
            raise RuntimeError("engine: CUDA IPC needs colocation")
        if cuda_ipc and self.training not in (TrainingState.AWAKE, TrainingState.NON_LP_ASLEEP):
            raise RuntimeError("engine: CUDA IPC source params are offloaded")
        self.weights_version = self.trainer_version
        return self.weights_version

    async def wake_inference(self, tags: Sequence[str] | None = None) -> None:
        self.calls.append(("wake_inference", None if tags is None else list(tags)))
        tags = ["weights", "kv_cache"] if tags is None else list(tags)
        if "weights" in tags:
            self.inference = (
                InferenceState.WEIGHTS_ONLY if self.inference is InferenceState.ASLEEP else self.inference
            )
        if "kv_cache" in tags:
            if self.inference is InferenceState.ASLEEP:
                raise RuntimeError("engine: KV cache woken before weights")
            self.inference = InferenceState.AWAKE

    async def sleep_inference(self, level: int = 1) -> None:
        self.calls.append(("sleep_inference", level))
        self.inference = InferenceState.ASLEEP

    async def sleep_training(self, mode: str = "all") -> None:
        self.calls.append(("sleep_training", mode))
        target = TrainingState(mode)
        if DEPTH[target] < DEPTH[self.training]:
            raise RuntimeError(
                f"engine: sleep_training({mode!r}) while already deeper ({self.training.value})"
            )
        self.training = target

    async def wake_training(self) -> None:
        self.calls.append(("wake_training",))
        self.training = TrainingState.AWAKE

    async def reset_prefix_cache(self) -> None:
        self.calls.append(("reset_prefix_cache",))
        if self.inference is not InferenceState.AWAKE:
            raise RuntimeError("engine: no KV cache to reset")

    # -- a training loop around it ------------------------------------------------------------
    async def step(self, learning_rate: float | None = None) -> StepOutput:
        self.calls.append(("step",))
        if self.training is not TrainingState.AWAKE:
            raise RuntimeError("engine: step with an offloaded trainer")
        self.trainer_version += 1
        return StepOutput(grad_norm=1.0, learning_rate=1e-6, step=self.trainer_version)

    async def generate(self, prompts, params: SamplingParams) -> GenerateOutput:
        if self.inference is not InferenceState.AWAKE:
            raise RuntimeError("engine: generate while asleep")
        completion = Completion("x", (1,), FinishReason.STOP, prompt_len=1, generation_len=1)
        return GenerateOutput([completion] * len(prompts), weights_version=self.weights_version)

    # -- not exercised here ---------------------------------------------------------------------
    async def forward(self, payload: WirePayload, *, reference_model: bool = False) -> ForwardOutput:
        raise NotImplementedError

    async def forward_backward(self, payload: WirePayload) -> TrainOutput:
        raise NotImplementedError

    async def save_checkpoint(self, path: str, step: int) -> str:
        raise NotImplementedError

    async def load_checkpoint(self, path: str, step: int) -> None:
        raise NotImplementedError

    def handle(self) -> BackendHandle:
        raise NotImplementedError

    async def shutdown(self) -> None:
        return None


COLOCATED = WeightSyncPolicy(
    colocated=True, cuda_ipc=True, offload_optimizer_before_sync=True, sleep_training_after="all"
)


def _run(coro):
    return asyncio.run(coro)


def test_not_colocated_transfers_and_resets_the_prefix_cache():
    backend = StrictFakeBackend(colocated=False)
    backend.trainer_version = 3
    version = _run(sync_after_step(backend, WeightSyncPolicy(colocated=False)))
    assert version == 3 and backend.weights_version == 3
    assert backend.calls == [("sync_weights", None, None), ("reset_prefix_cache",)]


def test_colocated_cuda_ipc_sequence_and_final_state():
    backend = StrictFakeBackend(colocated=True, inference=InferenceState.ASLEEP)
    _run(backend.step())
    backend.calls.clear()

    version = _run(sync_after_step(backend, COLOCATED))

    assert backend.calls == [
        ("sleep_training", "non_lp"),
        ("wake_inference", ["weights"]),
        ("sync_weights", True, False),
        ("wake_inference", ["kv_cache"]),
        ("reset_prefix_cache",),
        ("sleep_training", "all"),
    ]
    state = _run(backend.state())
    assert (version, state.weights_version, state.trainer_version) == (1, 1, 1)
    assert (state.inference, state.training) == (InferenceState.AWAKE, TrainingState.ASLEEP)


def test_colocated_low_memory_and_cpu_file_paths_pass_the_strategy_through():
    backend = StrictFakeBackend(colocated=True, inference=InferenceState.ASLEEP)
    policy = WeightSyncPolicy(colocated=True, cuda_ipc=True, low_memory=True)
    _run(sync_after_step(backend, policy))
    assert ("sync_weights", True, True) in backend.calls

    backend = StrictFakeBackend(
        colocated=True, inference=InferenceState.ASLEEP, training=TrainingState.ASLEEP
    )
    _run(sync_after_step(backend, WeightSyncPolicy(colocated=True)))  # CPU file: offloaded trainer is fine
    assert backend.calls == [
        ("wake_inference", ["weights"]),
        ("sync_weights", False, False),
        ("wake_inference", ["kv_cache"]),
        ("reset_prefix_cache",),
    ]


def test_initial_sync_into_an_awake_colocated_sampler_skips_the_wakes():
    backend = StrictFakeBackend(colocated=True)
    policy = WeightSyncPolicy(colocated=True, cuda_ipc=True, offload_optimizer_before_sync=False)
    _run(sync_after_step(backend, policy))
    assert backend.calls == [("sync_weights", True, False), ("reset_prefix_cache",)]


def test_training_sleep_only_goes_deeper_and_is_skipped_when_already_deep_enough():
    backend = StrictFakeBackend(
        colocated=True, inference=InferenceState.ASLEEP, training=TrainingState.NON_LP_ASLEEP
    )
    policy = WeightSyncPolicy(
        colocated=True, cuda_ipc=True, offload_optimizer_before_sync=True, sleep_training_after="lp_params"
    )
    _run(sync_after_step(backend, policy))
    assert backend.calls[0] == ("wake_inference", ["weights"])  # already non_lp: no second offload
    assert backend.calls[-1] == ("sleep_training", "lp_params")
    assert backend.training is TrainingState.LP_PARAMS_ASLEEP

    backend = StrictFakeBackend(
        colocated=True, inference=InferenceState.ASLEEP, training=TrainingState.ASLEEP
    )
    _run(sync_after_step(backend, WeightSyncPolicy(colocated=True, sleep_training_after="non_lp")))
    assert not any(call[0] == "sleep_training" for call in backend.calls)


def test_syncing_into_sleeping_weights_is_an_error_not_a_no_op():
    backend = StrictFakeBackend(colocated=False, inference=InferenceState.ASLEEP)
    with pytest.raises(WeightSyncError, match="NCCL sync into sleeping weights"):
        _run(sync_after_step(backend, WeightSyncPolicy(colocated=False)))
    assert backend.calls == []


def test_cuda_ipc_with_offloaded_trainer_weights_is_refused_before_touching_the_sampler():
    backend = StrictFakeBackend(
        colocated=True, inference=InferenceState.ASLEEP, training=TrainingState.ASLEEP
    )
    with pytest.raises(WeightSyncError, match="cuda_ipc=True but training is all"):
        _run(sync_after_step(backend, COLOCATED))
    assert backend.calls == []


def test_colocation_mismatch_is_an_error():
    backend = StrictFakeBackend(colocated=True)
    with pytest.raises(
        WeightSyncError, match=r"policy.colocated=False but the backend reports colocated=True"
    ):
        _run(sync_after_step(backend, WeightSyncPolicy(colocated=False)))


class _DeafWake(StrictFakeBackend):
    async def wake_inference(self, tags: Sequence[str] | None = None) -> None:
        self.calls.append(("wake_inference", list(tags or [])))  # forgets to wake


class _StuckVersion(StrictFakeBackend):
    async def sync_weights(self, *, cuda_ipc: bool | None = None, low_memory: bool | None = None) -> int:
        self.calls.append(("sync_weights", cuda_ipc, low_memory))
        return self.trainer_version  # claims success, sampler keeps the old weights


def test_a_transition_that_did_not_happen_is_detected():
    backend = _DeafWake(colocated=True, inference=InferenceState.ASLEEP)
    with pytest.raises(WeightSyncError, match=r"after wake_inference\(\['weights'\]\) inference is asleep"):
        _run(sync_after_step(backend, COLOCATED))
    assert not any(call[0] == "sync_weights" for call in backend.calls)

    backend = _StuckVersion(colocated=False)
    backend.trainer_version = 2
    with pytest.raises(WeightSyncError, match="sampler did not take the trainer's weights"):
        _run(sync_after_step(backend, WeightSyncPolicy(colocated=False)))


def test_colocated_loop_versions_and_stale_rollout_detection():
    backend = StrictFakeBackend(colocated=True, inference=InferenceState.ASLEEP)
    policy = COLOCATED
    prompts = ["p"] * 2
    old_rollout = None
    for step in range(1, 4):
        _run(prepare_for_training(backend, policy))
        assert (backend.inference, backend.training) == (InferenceState.ASLEEP, TrainingState.AWAKE)
        _run(backend.step())
        version = _run(sync_after_step(backend, policy))
        assert version == step
        rollout = _run(backend.generate(prompts, SamplingParams(max_tokens=4)))
        require_fresh_weights(rollout, expected=backend.trainer_version)
        if step == 1:
            old_rollout = rollout
    assert old_rollout is not None and old_rollout.weights_version == 1
    with pytest.raises(StaleWeightsError, match="weights version 1, expected 3"):
        require_fresh_weights(old_rollout, expected=3)
    require_fresh_weights(old_rollout, expected=3, max_staleness=2)  # explicitly tolerated off-policy lag
    with pytest.raises(StaleWeightsError, match="ahead"):
        require_fresh_weights(5, expected=3)
    # the whole loop ran in the documented order, step after step
    assert backend.calls[:9] == [
        ("step",),
        ("sleep_training", "non_lp"),
        ("wake_inference", ["weights"]),
        ("sync_weights", True, False),
        ("wake_inference", ["kv_cache"]),
        ("reset_prefix_cache",),
        ("sleep_training", "all"),
        ("sleep_inference", 1),
        ("wake_training",),
    ]


def test_prepare_for_training_not_colocated_only_checks():
    backend = StrictFakeBackend(colocated=False)
    _run(prepare_for_training(backend, WeightSyncPolicy(colocated=False)))
    assert backend.calls == []
    backend.training = TrainingState.ASLEEP
    with pytest.raises(WeightSyncError, match="call wake_training"):
        _run(prepare_for_training(backend, WeightSyncPolicy(colocated=False)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"colocated": False, "cuda_ipc": True}, "cuda_ipc=True needs colocated=True"),
        ({"colocated": True, "low_memory": True}, "low_memory=True applies to CUDA IPC only"),
        ({"colocated": False, "sleep_training_after": "all"}, "act only when colocated"),
        ({"colocated": False, "offload_optimizer_before_sync": True}, "act only when colocated"),
        ({"colocated": True, "sleep_training_after": "some"}, "sleep_training_after='some'"),
        ({"colocated": True, "inference_sleep_level": 3}, "sleep levels are 1 and 2"),
    ],
)
def test_policy_rejects_knobs_it_cannot_honour(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WeightSyncPolicy(**kwargs)


def test_policy_from_config():
    from arctic_rl_core.config import load_config

    colocated = load_config(
        None, ["placement.colocate=true", "weight_sync.cuda_ipc=true", "weight_sync.low_memory=true"]
    )
    policy = WeightSyncPolicy.from_config(colocated)
    assert policy == WeightSyncPolicy(
        colocated=True,
        cuda_ipc=True,
        low_memory=True,
        offload_optimizer_before_sync=True,
        sleep_training_after="all",
        inference_sleep_level=2,  # colocated default: the sync overwrites every weight anyway
    )
    assert WeightSyncPolicy.from_config(load_config(None, [])) == WeightSyncPolicy(colocated=False)
    level_1 = load_config(None, ["placement.colocate=true", "weight_sync.inference_sleep_level=1"])
    assert WeightSyncPolicy.from_config(level_1).inference_sleep_level == 1
    from arctic_rl_core.config.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"weight_sync\.inference_sleep_level = 2: only colocated samplers sleep"
    ):
        load_config(None, ["weight_sync.inference_sleep_level=2"])
    with pytest.raises(ConfigError, match="inference_sleep_level"):
        load_config(None, ["placement.colocate=true", "weight_sync.inference_sleep_level=3"])
