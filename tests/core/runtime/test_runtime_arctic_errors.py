"""ArcticBackend bounds every call and says what failed where: through the REAL 0.1.4 client and
transports (HTTP over aiohttp; the Ray transport's own `acall`) against servers that misbehave the
ways a real one does: a worker failure as a bare 500, a SIGKILL mid-call, a hung collective."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("arctic_platform.client")
from arctic_platform.client import ArcticClientConfig, OnPremConfig
from arctic_rl_core import dispatch
from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_core.backends.arctic_errors import ArcticConnectionError, ArcticServerError, ArcticTimeoutError
from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload

SPEC = PayloadSpec(pad_token_id=0, max_prompt_len=4, max_response_len=3, rollout_n=2, temperature=1.0)
PAYLOAD = build_train_payload(
    [
        RolloutSample([11, 12], [13, 14, 15], old_logprobs=[-1.0] * 3),
        RolloutSample([21], [24], old_logprobs=[-1.0]),
    ],
    SPEC,
)
PAYLOAD_BYTES = sum(t.nbytes for t in PAYLOAD.batch.values())

# One misbehaving server per route, in its own process (so SIGKILL is real).
SERVER = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from aiohttp import web

    async def bare_500(request):
        await request.read()
        return web.Response(status=500, text="500 Internal Server Error")

    async def killed(request):
        await request.read()
        os.kill(os.getpid(), signal.SIGKILL)

    async def hung(request):
        await request.read()
        await asyncio.sleep(3600)

    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/forward-backward", bare_500)
    app.router.add_post("/step", killed)
    app.router.add_post("/sleep-inference", hung)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def misbehaving_server():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the misbehaving server did not start")
    yield port, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def _config(port: int, *, protocol: str = "http", request_timeout: float = 30) -> ArcticClientConfig:
    """Attach to existing jobs (ids set): no job creation, no HTTP at construction."""
    return ArcticClientConfig(
        model_name="tiny/model",
        training_gpus=1,
        sampling_gpus=1,
        request_timeout=request_timeout,
        training_job_id=3,
        sampling_job_id=4,
        backend=OnPremConfig(protocol=protocol, host="127.0.0.1", port=port),
    )


def test_bare_500_names_op_job_payload_server_and_where_the_log_is(misbehaving_server):
    port, _ = misbehaving_server
    backend = ArcticBackend.create(_config(port))
    with pytest.raises(ArcticServerError) as caught:
        dispatch.run(backend.forward_backward(PAYLOAD))
    message = str(caught.value)
    assert caught.value.status == 500 and caught.value.op == "forward-backward"
    assert f"'forward-backward' on training job 3 at http://127.0.0.1:{port}" in message
    assert f"payload {PAYLOAD_BYTES} bytes" in message
    assert "no exception handler" in message
    # where that server's log is, whichever server answers there (the reference one or the Arctic one)
    assert f"the output of the server process at http://127.0.0.1:{port}" in message
    assert "`arctic-rl serve --reference`: the terminal" in message
    assert "`python -m arctic_platform.common.http_server`: its stderr" in message
    assert "/tmp/ray/session_latest/logs" in message
    dispatch.run(backend.shutdown())


def test_sigkill_mid_call_is_a_connection_error_not_a_raw_disconnect(misbehaving_server):
    port, proc = misbehaving_server
    backend = ArcticBackend.create(_config(port))
    with pytest.raises(ArcticConnectionError) as caught:
        dispatch.run(backend.step())
    assert proc.wait(10) == -signal.SIGKILL  # the server really died mid-call
    message = str(caught.value)
    assert f"'step' on training job 3 at http://127.0.0.1:{port}" in message
    assert "ServerDisconnectedError" in message and "crash or get killed" in message
    assert type(caught.value.__cause__).__name__ == "ServerDisconnectedError"
    assert isinstance(caught.value, ConnectionError)
    dispatch.run(backend.shutdown())


def test_http_call_is_bounded_by_the_request_timeout(misbehaving_server):
    port, _ = misbehaving_server
    backend = ArcticBackend.create(_config(port, request_timeout=0.5))
    start = time.monotonic()
    with pytest.raises(ArcticTimeoutError) as caught:
        dispatch.run(backend.sleep_inference(2))
    assert time.monotonic() - start < 10
    message = str(caught.value)
    assert f"'sleep-inference' on sampling job 4 at http://127.0.0.1:{port}" in message
    assert "backend.request_timeout_s=0.5 s" in message
    dispatch.run(backend.shutdown())


class _HungRayServer:
    """Stands in for 0.1.4's `ArcticRLRayServer`: every op awaits forever (a hung NCCL call)."""

    def __getattr__(self, name: str):
        async def op(*args):
            await asyncio.Event().wait()

        return op


def _ray_client(request_timeout: float):
    """The real 0.1.4 client over the real `RayTransport` (its own `acall`, which has no timeout),
    reattached to a server whose ops hang."""
    from reattached_ray_client import reattached_ray_client

    return reattached_ray_client(
        _config(0, protocol="ray", request_timeout=request_timeout), _HungRayServer()
    )


def test_ray_transport_calls_are_bounded_too():
    backend = ArcticBackend(_ray_client(0.3), colocated=False, owns_jobs=False)
    start = time.monotonic()
    with pytest.raises(ArcticTimeoutError) as caught:
        dispatch.run(backend.forward_backward(PAYLOAD))
    assert time.monotonic() - start < 5
    message = str(caught.value)
    assert "'forward-backward' on training job 3 at the in-process Ray server" in message
    assert f"payload {PAYLOAD_BYTES} bytes" in message and "hung NCCL" in message
    with pytest.raises(ArcticTimeoutError, match="'weight-sync' on training job 3 -> sampling job 4"):
        dispatch.run(backend.sync_weights())


def test_job_creation_is_bounded(monkeypatch):
    """0.1.4's Ray job wait does not poll: construction is bounded by job_ready_timeout per job."""
    config = ArcticClientConfig(
        model_name="tiny/model",
        training_gpus=1,
        sampling_gpus=1,
        job_ready_timeout=0.2,
        request_timeout=0.1,
        backend=OnPremConfig(protocol="ray"),
    )
    monkeypatch.setattr(
        ArcticBackend, "_construct", classmethod(lambda cls, cfg, ledger=None: time.sleep(30))
    )
    start = time.monotonic()
    with pytest.raises(ArcticTimeoutError, match=r"creating the Arctic jobs \['sampling', 'training'\]"):
        ArcticBackend.create(config)
    assert time.monotonic() - start < 5
    with pytest.raises(ArcticTimeoutError, match="in-process Ray server"):
        dispatch.run(ArcticBackend.acreate(config))
