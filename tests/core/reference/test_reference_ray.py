"""The reference engine as a Ray actor, reached from another process through the protocol's handle."""

from __future__ import annotations

import asyncio

import pytest

ray = pytest.importorskip("ray")

from arctic_rl_core.backends.protocol import SamplingParams  # noqa: E402
from arctic_rl_core.backends.reference.ray_actor import launch_reference_actor  # noqa: E402
from arctic_rl_core.backends.reference.settings import ReferenceEngineSettings  # noqa: E402


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

    backend = launch_reference_actor(ReferenceEngineSettings(seed=4, num_threads=1))
    try:
        params = SamplingParams(max_tokens=5, temperature=0.0)
        local = asyncio.run(backend.generate(["SELECT name"], params))
        pid, tokens, used_version, new_version = ray.get(
            _use_from_another_process.remote(backend.handle(), "SELECT name")
        )
        assert pid != os.getpid()
        assert tokens == local.completions[0].token_ids and used_version == 0
        assert new_version == 1
        state = asyncio.run(backend.state())  # the actor outlived the borrower's shutdown
        assert state.weights_version == 1
    finally:
        asyncio.run(backend.shutdown())
    with pytest.raises(RuntimeError, match="no reference actor"):
        backend.handle().connect()
