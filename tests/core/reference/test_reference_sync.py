"""Weight sync through bucketed buffers, the weights version, and the sleep/wake state machine."""

from __future__ import annotations

import pytest
import torch
from arctic_rl_core.backends.protocol import InferenceState, SamplingParams, TrainingState
from arctic_rl_core.wire import build_train_payload
from arctic_rl_testbed.reference.sleep_state import BackendStateError, SleepStateMachine
from arctic_rl_testbed.reference.weight_transfer import plan_buckets


def _train_one_step(engine, ref, seed=0):
    ref.run(engine.forward_backward(build_train_payload(ref.samples(4, seed=seed), ref.spec(engine))))
    ref.run(engine.step())


def _policy_sync(engine, ref, **kwargs) -> int:
    """The client's sequence: wake weights -> sync -> wake kv cache -> reset prefix cache."""
    ref.run(engine.wake_inference(["weights"]))
    version = ref.run(engine.sync_weights(**kwargs))
    ref.run(engine.wake_inference(["kv_cache"]))
    ref.run(engine.reset_prefix_cache())
    return version


def test_sync_copies_the_trainer_bit_for_bit_and_bumps_the_version(engine_factory, ref):
    engine = engine_factory(optimizer={"lr": 1e-2})
    params = SamplingParams(max_tokens=6, temperature=0.0)
    first = ref.run(engine.generate(["hello"], params))
    _train_one_step(engine, ref)
    trainer, sampler = engine.trainer_parameters(), engine.sampler_parameters()
    assert any(not torch.equal(trainer[n], sampler[n]) for n in trainer)
    assert (
        ref.run(engine.generate(["hello"], params)).completions == first.completions
    )  # still the old weights
    assert _policy_sync(engine, ref) == 1
    sampler = engine.sampler_parameters()
    assert all(torch.equal(trainer[n], sampler[n]) for n in trainer)
    after = ref.run(engine.generate(["hello"], params))
    assert after.weights_version == 1 and first.weights_version == 0
    state = ref.run(engine.state())
    assert (state.weights_version, state.trainer_version) == (1, 1)


@pytest.mark.parametrize(
    ("bucket_mb", "low_memory"), [(1e-6, False), (0.05, False), (100.0, False), (100.0, True)]
)
def test_bucket_sizes_change_the_buckets_not_the_result(engine_factory, ref, bucket_mb, low_memory):
    engine = engine_factory(model={"weight_sync_bucket_mb": bucket_mb}, optimizer={"lr": 1e-2})
    _train_one_step(engine, ref)
    ref.run(engine.wake_inference(["weights"]))
    report = ref.run(engine.sync_weights_detailed(low_memory=low_memory))
    params = list(engine._trainer.named_parameters())
    total = sum(p.numel() * 4 for _, p in params)
    assert report.transfer.num_tensors == len(params) and report.transfer.num_bytes == total
    if low_memory or bucket_mb == 1e-6:
        assert report.transfer.num_buckets == len(params)  # one parameter per bucket
    elif bucket_mb == 100.0:
        assert report.transfer.num_buckets == 1
    else:
        limit = int(0.05 * 1024 * 1024)
        assert report.transfer.num_buckets == len(plan_buckets(params, limit)) > 1
        for bucket in plan_buckets(params, limit):
            assert len(bucket) == 1 or sum(p.numel() * 4 for _, p in bucket) <= limit
    trainer, sampler = engine.trainer_parameters(), engine.sampler_parameters()
    assert all(torch.equal(trainer[n], sampler[n]) for n in trainer)


def test_colocated_cycle_with_training_sleep(engine_factory, ref):
    engine = engine_factory(cuda_ipc=True)
    _train_one_step(engine, ref)
    ref.run(engine.sleep_inference(1))
    ref.run(engine.sleep_training("non_lp"))
    with pytest.raises(BackendStateError, match="sync_weights into a sleeping sampler"):
        ref.run(engine.sync_weights())
    assert _policy_sync(engine, ref) == 1  # cuda_ipc with the low-precision params still resident
    ref.run(engine.sleep_training("lp_params"))
    ref.run(engine.sleep_training("all"))
    state = ref.run(engine.state())
    assert (state.inference, state.training) == (InferenceState.AWAKE, TrainingState.ASLEEP)
    ref.run(engine.wake_inference(["weights"]))
    with pytest.raises(BackendStateError, match="CUDA IPC reads the trainer"):
        ref.run(engine.sync_weights())
    assert (
        ref.run(engine.sync_weights(cuda_ipc=False)) == 1
    )  # the CPU-file path works with offloaded training
    with pytest.raises(BackendStateError, match="call wake_training"):
        ref.run(engine.forward_backward(build_train_payload(ref.samples(4), ref.spec(engine))))
    ref.run(engine.wake_training())
    _train_one_step(engine, ref, seed=1)


def test_generate_needs_an_awake_sampler_with_fresh_weights_and_cache(engine_factory, ref):
    engine = engine_factory()
    params = SamplingParams(max_tokens=2)
    ref.run(engine.sleep_inference(2))
    with pytest.raises(BackendStateError, match="generate while inference is asleep"):
        ref.run(engine.generate(["x"], params))
    ref.run(engine.wake_inference())
    with pytest.raises(BackendStateError, match="discarded the sampler's weights"):
        ref.run(engine.generate(["x"], params))
    ref.run(engine.sync_weights())
    with pytest.raises(BackendStateError, match="without reset_prefix_cache"):
        ref.run(engine.generate(["x"], params))
    ref.run(engine.reset_prefix_cache())
    assert ref.run(engine.generate(["x"], params)).weights_version == 0  # the trainer has not stepped


def test_cuda_ipc_needs_colocation(engine_factory, ref):
    engine = engine_factory(colocated=False)
    with pytest.raises(ValueError, match="needs a colocated engine"):
        ref.run(engine.sync_weights(cuda_ipc=True))
    with pytest.raises(BackendStateError, match="non-colocated"):
        ref.run(engine.sleep_inference())
    assert _policy_sync(engine, ref) == 0  # waking an awake sampler is a no-op, as in vLLM


def test_state_machine_transitions():
    machine = SleepStateMachine(colocated=True)
    machine.sleep_inference(1)
    with pytest.raises(BackendStateError, match=r"wake \['weights'\] first"):
        machine.wake_inference(["kv_cache"])
    machine.wake_inference(["weights"])
    assert machine.inference == InferenceState.WEIGHTS_ONLY
    with pytest.raises(BackendStateError, match="wake the KV cache first"):
        machine.reset_prefix_cache()
    machine.wake_inference(["weights"])  # idempotent
    assert machine.inference == InferenceState.WEIGHTS_ONLY
    machine.wake_inference(["kv_cache"])
    assert machine.inference == InferenceState.AWAKE
    machine.sleep_inference(1)
    machine.wake_inference(["kv_cache", "weights"])
    assert machine.inference == InferenceState.AWAKE
    for bad in (["gpu"], []):
        with pytest.raises(ValueError, match="tags are 'weights' and/or 'kv_cache'"):
            machine.wake_inference(bad)
    with pytest.raises(ValueError, match="level is 1"):
        machine.sleep_inference(3)
    machine.sleep_training("lp_params")
    with pytest.raises(BackendStateError, match="already lp_params"):
        machine.sleep_training("non_lp")
    with pytest.raises(ValueError, match="mode is 'non_lp'"):
        machine.sleep_training("deep")
    machine.sleep_training("all")
    machine.wake_training()
    assert machine.training == TrainingState.AWAKE


@pytest.mark.parametrize(
    "policy_fields",
    [
        dict(colocated=True, cuda_ipc=True, offload_optimizer_before_sync=True, sleep_training_after="all"),
        dict(colocated=True, cuda_ipc=True, low_memory=True),
        dict(colocated=True, sleep_training_after="lp_params"),
        dict(colocated=False),
    ],
)
def test_the_core_weight_sync_policy_runs_on_the_reference_engine(engine_factory, ref, policy_fields):
    from arctic_rl_core.weight_sync import WeightSyncPolicy, prepare_for_training, sync_after_step

    policy = WeightSyncPolicy(**policy_fields)
    engine = engine_factory(colocated=policy.colocated, optimizer={"lr": 1e-2})
    for step in (1, 2):
        ref.run(prepare_for_training(engine, policy))
        _train_one_step(engine, ref, seed=step)
        assert ref.run(sync_after_step(engine, policy)) == step
        out = ref.run(engine.generate(["SELECT"], SamplingParams(max_tokens=3)))
        assert out.weights_version == step
        trainer, sampler = engine.trainer_parameters(), engine.sampler_parameters()
        assert all(torch.equal(trainer[n], sampler[n]) for n in trainer)
    state = ref.run(engine.state())
    expected = (
        TrainingState(policy.sleep_training_after) if policy.sleep_training_after else TrainingState.AWAKE
    )
    if policy.offload_optimizer_before_sync and policy.sleep_training_after is None:
        expected = TrainingState.NON_LP_ASLEEP
    assert (state.inference, state.training) == (InferenceState.AWAKE, expected)
