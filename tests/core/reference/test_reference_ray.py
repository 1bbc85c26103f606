"""The reference engine as a Ray actor, reached from another process through the protocol's handle."""

from __future__ import annotations

import asyncio

import pytest

ray = pytest.importorskip("ray")

from arctic_rl_core.backends.protocol import SamplingParams  # noqa: E402
from arctic_rl_testbed.reference.ray_actor import launch_reference_actor  # noqa: E402
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings  # noqa: E402


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="arctic_rl_reference_tests")
    yield
    ray.shutdown()


@ray.remote(num_cpus=0)
def _use_from_another_process(handle, prompt: str):
    import os

    from arctic_rl_core.backends.protocol import SamplingParams as Params

    async def work():
        backend = handle.connect()
        out = await backend.generate([prompt], Params(max_tokens=5, temperature=0.0))
        await backend.wake_inference(["weights"])
        version = await backend.sync_weights()
        await backend.wake_inference(["kv_cache"])
        await backend.reset_prefix_cache()
        await backend.shutdown()  # detaches; the actor lives on
        return os.getpid(), out.completions[0].token_ids, out.weights_version, version

    return asyncio.run(work())


def test_actor_reached_from_a_ray_task(ray_cluster):
    import os

    from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload

    backend = launch_reference_actor(ReferenceEngineSettings(seed=4, num_threads=1))
    try:
        params = SamplingParams(max_tokens=5, temperature=0.0)
        local = asyncio.run(backend.generate(["SELECT name"], params))
        spec = PayloadSpec(pad_token_id=0, max_prompt_len=4, max_response_len=3, rollout_n=1, temperature=1.0)
        sample = RolloutSample(
            prompt_ids=[11, 12], response_ids=[13, 14], advantages=1.0, old_logprobs=[-7.0, -7.0]
        )
        train = asyncio.run(backend.forward_backward(build_train_payload([sample], spec)))
        assert train.loss < 0
        assert asyncio.run(backend.step()).step == 1
        task = _use_from_another_process.remote(backend.handle(), "SELECT name")
        pid, tokens, used_version, new_version = ray.get(task)
        assert pid != os.getpid()
        where = backend.handle().location()  # the engine's own process: neither the driver nor the task
        assert where["pid"] not in (os.getpid(), pid)
        assert where["node_id"] == ray.get_runtime_context().get_node_id()
        assert tokens == local.completions[0].token_ids and used_version == 0  # generated before the sync
        assert new_version == 1  # the trainer's step
        state = asyncio.run(backend.state())  # the actor outlived the borrower's shutdown
        assert (state.weights_version, state.trainer_version) == (1, 1)
    finally:
        asyncio.run(backend.shutdown())
    with pytest.raises(RuntimeError, match="no reference actor"):
        backend.handle().connect()
