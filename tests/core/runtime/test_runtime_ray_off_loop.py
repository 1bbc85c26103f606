"""The in-process Ray transport's blocking ops (issue 28): 0.1.4's `ArcticRLRayServer` calls `ray.get`
inside `async def` for forward-backward, forward, step, save and load-checkpoint, and its `RayTransport`
awaits those coroutines on the caller's loop. `arctic_compat` keeps the real transport but runs those
ops in a worker thread: the loop keeps serving generate while a step runs, and `request_timeout`
bounds them. Here against a stand-in server that blocks exactly that way (a thread wait inside
`async def`); tests/realworker measure it on the real server actor."""

from __future__ import annotations

import ast
import asyncio
import threading
from pathlib import Path

import pytest

pytest.importorskip("arctic_platform.client")
import arctic_platform
from arctic_platform.client import ArcticClientConfig, OnPremConfig
from arctic_platform.client.transport import method_name
from arctic_rl_core import dispatch
from arctic_rl_core.backends import arctic_compat
from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_core.backends.arctic_errors import ArcticTimeoutError
from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload

SPEC = PayloadSpec(pad_token_id=0, max_prompt_len=4, max_response_len=3, rollout_n=2, temperature=1.0)
PAYLOAD = build_train_payload(
    [
        RolloutSample([11, 12], [13, 14, 15], old_logprobs=[-1.0] * 3),
        RolloutSample([21], [24], old_logprobs=[-1.0]),
    ],
    SPEC,
)


def test_the_off_loop_ops_are_the_servers_blocking_methods():
    """Every `ArcticRLRayServer` coroutine that calls `ray.get(...)` itself (not through
    `run_in_executor`) in the installed 0.1.4 is an op run off the loop, and nothing else is."""
    source = Path(arctic_platform.__file__).parent / "common" / "ray_server.py"
    tree = ast.parse(source.read_text())
    server = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ArcticRLRayServer")
    blocking = {
        fn.name
        for fn in server.body
        if isinstance(fn, ast.AsyncFunctionDef)
        and any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "get"
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "ray"
            for n in ast.walk(fn)
        )
    }
    assert blocking == {method_name(op) for op in arctic_compat.OFF_LOOP_RAY_OPS}


class _BlockingRayServer:
    """0.1.4's shape: `forward_backward` waits for its workers with a blocking call inside `async def`
    (there `ray.get(refs)`; here a thread event the test sets); `generate` is a coroutine."""

    def __init__(self) -> None:
        self.workers_done = threading.Event()
        self.step_started = threading.Event()
        self.calls: list[str] = []

    async def forward_backward(self, job_id, body):
        self.step_started.set()
        self.workers_done.wait(timeout=20)  # bounded, so a loop this blocks fails the test instead of hanging
        self.calls.append("forward_backward")
        return {"job_id": job_id, "metrics": {}, "avg_loss": 0.5}

    async def generate(self, job_id, body):
        self.calls.append("generate")
        return {"job_id": job_id, "results": [_RESULT for _ in body["prompts"]]}

    async def health(self):
        self.calls.append("health")
        return {"status": "OK"}


_RESULT = {"text": "x", "token_ids": [5], "finish_reason": "length", "prompt_len": 1, "generation_len": 1}


def _backend(server: _BlockingRayServer, request_timeout: float) -> ArcticBackend:
    """The real 0.1.4 client over the real `RayTransport`, reattached to `server`, with the compat
    layer's off-loop ops."""
    from reattached_ray_client import reattached_ray_client

    config = ArcticClientConfig(
        model_name="tiny/model",
        training_gpus=1,
        sampling_gpus=1,
        request_timeout=request_timeout,
        training_job_id=3,
        sampling_job_id=4,
        backend=OnPremConfig(protocol="ray"),
    )
    client = reattached_ray_client(config, server, compat=True)
    return ArcticBackend(client, colocated=False, owns_jobs=False)


def test_generate_and_health_answer_while_a_step_blocks_on_its_workers():
    server = _BlockingRayServer()
    backend = _backend(server, request_timeout=600)

    async def scenario():
        step = asyncio.ensure_future(backend.forward_backward(PAYLOAD))
        await asyncio.to_thread(server.step_started.wait)
        out = await backend.generate(["a", "b"], SamplingParams(max_tokens=1))
        health = await backend._client.transport._server.health()
        done_before_release = step.done()
        server.workers_done.set()
        return out, health, done_before_release, await step

    out, health, step_was_done, result = dispatch.run(scenario())
    assert len(out.completions) == 2 and health == {"status": "OK"}
    assert not step_was_done and result.loss == 0.5
    assert server.calls == ["generate", "health", "forward_backward"]  # answered during the step


def test_request_timeout_bounds_a_step_that_blocks():
    server = _BlockingRayServer()
    backend = _backend(server, request_timeout=0.2)
    try:
        with pytest.raises(
            ArcticTimeoutError, match="'forward-backward' on training job 3 at the in-process Ray"
        ):
            dispatch.run(backend.forward_backward(PAYLOAD))
        assert server.step_started.is_set() and "forward_backward" not in server.calls  # still blocked
    finally:
        server.workers_done.set()  # the abandoned call's thread finishes
