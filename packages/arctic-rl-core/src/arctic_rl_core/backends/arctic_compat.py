"""The thin compatibility layer between `arctic_rl_core.backends.arctic` and arctic-platform's
client (pinned to 0.1.4). Everything that depends on the client's module layout or private
structure lives here, so a version bump touches one file.

What it handles:

- names: the async RL client is `AsyncArcticRLClient` in 0.1.4 (`ArcticRLClient` is the sync
  one there; on main `ArcticRLClient` became the async one): `load_client_api` resolves the
  async class by behaviour, not by name, and refuses versions it was not verified against;
- the dependency gate: `make_transport` demands the `sft`/`rl` extras (DeepSpeed, vLLM, ...) for
  every on-prem transport, although talking to a remote HTTP server needs only
  `arctic-platform[transport]` (requests, aiohttp, torch, safetensors). For on-prem HTTP without
  `launch_local_server` this layer builds the HTTP transport itself and hands it to the client,
  so a driver that only talks to a remote server never needs the training stack. Launching a
  local server, the in-process Ray transport and Cortex go through `make_transport` unchanged
  (they do need their extras; the error names the extra);
- error bodies: the client's HTTP transport raises `aiohttp.ClientResponseError` and drops the
  server's error body; the transport built here raises `ArcticServerError` carrying it;
- the weight-sync transfer alone: the client's `sync_weights` also wakes and resets around the
  transfer; `transfer_weights` sends only the weight-sync operation, because
  `arctic_rl_core.weight_sync` drives (and checks) the transitions itself;
- the in-process Ray server's blocking methods: 0.1.4's `ArcticRLRayServer.forward_backward`,
  `forward`, `step`, `save` and `load_checkpoint` call `ray.get` inside `async def`, and its Ray
  transport awaits them on the caller's event loop, so a training step stalls that loop: a
  `generate` issued meanwhile (async GRPO) waits for the whole step, and no deadline can fire. The
  client's Ray transport is kept (built by 0.1.4's `make_transport`) but those ops run in a worker
  thread (`OFF_LOOP_RAY_OPS`), so the loop keeps answering and `ArcticBackend`'s
  `request_timeout` bounds them (a timed-out call's thread finishes in the background);
- the DeepSpeed rendezvous ports: 0.1.4 gives the training and the log-prob job the same
  `MASTER_PORT` whenever one is set (the Ray server's driver-captured `ds_master_port`, else each
  server's environment; 29500 / 29501 only when none is), so the second job's rendezvous collides
  with the first's. The Ray transport sets the server state's port per job (log-prob: the training
  port + 1) just before creating it; a launched local HTTP server is started without `MASTER_PORT`
  (`distinct_master_ports`). A remote HTTP server's environment is its own: do not export
  `MASTER_PORT` there.

Blocking calls (`create_client`, `destroy_jobs`) do HTTP with `requests`: callers run them off
the event loop thread (`asyncio.to_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import inspect
import logging
import os
import threading
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from arctic_rl_core.backends.arctic_errors import (
    ArcticServerError,
    ArcticTimeoutError,
    CallContext,
    unreachable_error,
)

SUPPORTED_VERSIONS: tuple[str, ...] = ("0.1.4",)
INSTALL_HINT = "pip install 'arctic-rl-core[transport]' (arctic-platform[transport]==0.1.4)"


class ArcticUnavailableError(ImportError):
    """arctic-platform is missing, has an unverified version, or lacks the extra a transport needs."""


@dataclass(frozen=True)
class ClientAPI:
    """The resolved pieces of arctic-platform's client this package uses."""

    version: str
    async_client: type
    client_config: type
    requests: Any  # the module of request builders (sync_weights_request, ...)
    job_handles: type


@functools.cache
def load_client_api() -> ClientAPI:
    """Import arctic-platform's client lazily and check its version."""
    try:
        installed = version("arctic-platform")
    except PackageNotFoundError:
        raise ArcticUnavailableError(f"arctic-platform is not installed: {INSTALL_HINT}") from None
    if installed not in SUPPORTED_VERSIONS:
        raise ArcticUnavailableError(
            f"arctic-platform {installed} is installed; the Arctic backend is verified against "
            f"{', '.join(SUPPORTED_VERSIONS)} only: {INSTALL_HINT}"
        )
    try:
        from arctic_platform import client as client_module
        from arctic_platform.client import requests as request_builders
        from arctic_platform.client.transport import JobHandles
    except ImportError as exc:
        raise ArcticUnavailableError(
            f"cannot import arctic_platform.client ({exc}): {INSTALL_HINT}"
        ) from None
    return ClientAPI(
        version=installed,
        async_client=_async_client_class(client_module),
        client_config=client_module.ArcticClientConfig,
        requests=request_builders,
        job_handles=JobHandles,
    )


def _async_client_class(client_module: Any) -> type:
    for name in ("AsyncArcticRLClient", "ArcticRLClient"):
        candidate = getattr(client_module, name, None)
        if candidate is not None and inspect.iscoroutinefunction(getattr(candidate, "fwd_bwd", None)):
            return candidate
    raise ArcticUnavailableError("arctic_platform.client has no async RL client (AsyncArcticRLClient)")


# ----------------------------------------------------------------------------------------------
# Construction (blocking)
# ----------------------------------------------------------------------------------------------


def builds_own_http_transport(config: Any) -> bool:
    """On-prem HTTP to an existing server: this layer builds the transport (no sft/rl gate)."""
    backend = config.backend
    return backend.type == "onprem" and backend.protocol == "http" and not backend.launch_local_server


def create_client(config: Any, *, server_state: Any = None) -> Any:
    """Construct the async RL client: creates the jobs, or attaches when the config carries job
    ids. BLOCKING (HTTP, polling): never call it on an event loop thread."""
    api = load_client_api()
    if sends_token_to_base_url(config):
        if server_state is not None:
            raise ValueError(
                "server_state is only meaningful for the in-process Ray transport (protocol='ray')"
            )
        return _client_with_transport(api, config, _cortex_transport_class()(config))
    if builds_own_http_transport(config):
        if server_state is not None:
            raise ValueError(
                "server_state is only meaningful for the in-process Ray transport (protocol='ray')"
            )
        return _client_with_transport(api, config, _http_transport_class()(config))
    try:
        if config.backend.protocol == "ray":
            return _client_with_transport(api, config, _compat_ray_transport(config, server_state))
        with distinct_master_ports(config):
            return api.async_client(config, server_state=server_state)
    except ImportError as exc:
        what = (
            "Cortex needs arctic-platform[cortex]"
            if config.backend.type == "remote"
            else "the in-process Ray transport and launch_local_server run the Arctic server in this "
            "process and need arctic-platform[rl] (GPU stack); a driver of a remote HTTP server needs only "
            "[transport]: set protocol='http', launch_local_server=False"
        )
        raise ArcticUnavailableError(f"{what} ({exc})") from None


def apply_worker_env(config: Any, env: dict[str, str], environ: Any = None) -> str:
    """Make `env` reach the Arctic server's workers where this process can: 0.1.4 passes no Ray
    runtime environment (`ray.init(address="auto")`), so its workers inherit the environment of
    the process that started Ray. A server this client launches (`launch_local_server`, a copy of
    `os.environ`) and the in-process Ray server (this process starts Ray unless a cluster runs)
    get it through `os.environ`; a remote server and a running Ray cluster need it exported on
    every node before `ray start` (recipes/worker-env.sh). A variable this process already has
    with another value is an error (which one would the workers see?). Returns what was done."""

    environ = os.environ if environ is None else environ
    backend = config.backend
    if not env or getattr(backend, "type", "onprem") == "remote":
        return "nothing to set" if not env else "Cortex: not sent (Cortex runs its own workers)"
    names = ", ".join(f"{k}={v}" for k, v in sorted(env.items()))
    if backend.protocol == "http" and not backend.launch_local_server:
        logging.getLogger(__name__).info(
            "Arctic server at http://%s:%s: its workers need %s exported before `ray start` on every node "
            "(recipes/worker-env.sh); the 0.1.4 server cannot report its workers' environment",
            backend.host,
            backend.port,
            names,
        )
        return f"remote server: export {names} on its nodes"
    conflicts = [
        f"{k}={environ[k]!r} (wanted {v!r})" for k, v in sorted(env.items()) if environ.get(k, v) != v
    ]
    if conflicts:
        raise ValueError(
            f"this process has {', '.join(conflicts)}, which backend.worker_env / arctic_inference.enable set "
            "differently for the Arctic server's workers: unset them, or make the configuration agree"
        )
    environ.update(env)
    if backend.protocol == "ray":
        try:
            import ray
        except ImportError:
            ray = None
        if ray is not None and ray.is_initialized():
            logging.getLogger(__name__).warning(
                "Ray is already running: the Arctic server's workers get the environment Ray's daemons were "
                "started with, not this process's; make sure %s were exported before `ray start`",
                names,
            )
            return f"Ray already running: {names} must have been exported before `ray start`"
    return f"set in this process: {names}"


# The package each flash attention implementation loads (Hugging Face transformers' availability checks).
ATTENTION_KERNEL_PACKAGES: dict[str, tuple[str, str]] = {
    "flash_attention_2": ("distribution", "flash-attn"),
    "flash_attention_3": ("module", "flash_attn_interface"),
}
FLASH_EXTRA_HINT = (
    "install flash-attn where the server runs (`uv sync --locked --package adapter-<framework> --extra gpu "
    "--extra flash`: PyPI has only its sdist, compiled against torch and the CUDA 13 toolkit, for hours), or "
    "set kernels.attn_implementation=sdpa with zorro.enable=false (correct without it: rows are sent unpacked)"
)


def require_attention_kernel(client_config: Any, attn_implementation: str) -> None:
    """Before a server that runs from THIS Python environment starts (the in-process Ray server, a
    launched local HTTP server): the flash attention package `attn_implementation` (and ZoRRo, which
    needs flash attention) loads must be installed here, else the training job fails when it builds
    its model. A remote server's environment cannot be seen from here."""
    backend = client_config.backend
    local = getattr(backend, "type", "onprem") == "onprem" and (
        backend.protocol == "ray" or getattr(backend, "launch_local_server", False)
    )
    if not local or attn_implementation not in ATTENTION_KERNEL_PACKAGES:
        return

    kind, name = ATTENTION_KERNEL_PACKAGES[attn_implementation]
    if kind == "module":
        found = importlib.util.find_spec(name) is not None
    else:
        try:
            version(name)
            found = True
        except PackageNotFoundError:
            found = False
    if not found:
        raise ArcticUnavailableError(
            f"kernels.attn_implementation={attn_implementation}: {name} is not installed in this environment, "
            f"which the Arctic server's workers run from (backend {backend.protocol}): {FLASH_EXTRA_HINT}"
        )


def bounded_construction(construct: Any, config: Any) -> Any:
    """`construct(config)` (job creation: BLOCKING), bounded: 0.1.4's Ray transport waits for its
    jobs with no timeout (`ray.get` on the state actor). The bound is the client's own
    `job_ready_timeout` per job it creates, plus `startup_timeout` when it launches a server; on
    expiry the construction thread is abandoned (a daemon) and `ArcticTimeoutError` names what
    hung. HTTP polls within the same bound itself."""

    handles = load_client_api().job_handles.from_config(config)
    creating = [t for t in ("sampling", "log_prob", "training") if getattr(config, f"{t}_gpus", 0) > 0]
    if handles.any_set:
        creating = []
    backend = config.backend
    bound = float(config.job_ready_timeout) * max(1, len(creating)) + float(config.request_timeout)
    if getattr(backend, "launch_local_server", False):
        bound += float(backend.startup_timeout)
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = construct(config)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="arctic-client-construction", daemon=True)
    thread.start()
    thread.join(bound)
    if thread.is_alive():
        context = call_context(
            _ConfigOnly(config), "initialize", job_type=creating[0] if creating else "training"
        )
        raise ArcticTimeoutError(
            f"creating the Arctic jobs {creating or '(reattach)'} at {context.server} did not finish within "
            f"{bound:g} s (job_ready_timeout={config.job_ready_timeout:g} s per job + request_timeout): the "
            f"server may be stuck allocating GPUs or loading the model; check {context.server_log}",
            context,
        )
    if "error" in outcome:
        error = outcome["error"]
        if _refused(error):
            context = call_context(
                _ConfigOnly(config), "initialize", job_type=creating[0] if creating else "training"
            )
            raise unreachable_error(context, error) from None
        raise error
    return outcome["value"]


def _refused(error: BaseException) -> bool:
    """Nothing answered at the server's address (connection refused, unknown host, ...)."""
    try:
        import requests
    except ImportError:
        return isinstance(error, ConnectionError)
    return isinstance(error, (requests.ConnectionError, ConnectionRefusedError))


@dataclass(frozen=True)
class _ConfigOnly:
    """A stand-in client for `call_context` before a client exists."""

    config: Any
    jobs: Any = None


def sends_token_to_base_url(config: Any) -> bool:
    """Cortex at a `base_url` with a PAT (the Cortex emulator on loopback): 0.1.4's `CortexTransport`
    sends the PAT only on its `host` (https) path, so this layer's subclass sends it here too."""
    backend = config.backend
    pat = getattr(backend, "pat", None)
    return (
        getattr(backend, "protocol", None) == "cortex"
        and backend.base_url is not None
        and pat is not None
        and bool(pat.get_secret_value())
    )


@functools.cache
def _cortex_transport_class() -> type:
    try:
        from arctic_platform.client.transports.cortex import CortexTransport
    except ImportError as exc:
        raise ArcticUnavailableError(f"Cortex needs arctic-platform[cortex] ({exc})") from None

    class TokenAtBaseUrlCortexTransport(CortexTransport):
        """0.1.4's Cortex transport, sending the PAT headers to `base_url` as well (both its
        `requests` session and its `aiohttp` session take `_auth_headers()`)."""

        def _auth_headers(self) -> dict[str, str]:
            return {
                "Authorization": f"Bearer {self.config.backend.pat.get_secret_value()}",
                "X-Snowflake-Authorization-Token-Type": "PROGRAMMATIC_ACCESS_TOKEN",
            }

    return TokenAtBaseUrlCortexTransport


def _client_with_transport(api: ClientAPI, config: Any, transport: Any) -> Any:
    """The client with a transport built here. Mirrors the client core's constructor in 0.1.4
    (transport, then `initialize_or_cleanup`), which otherwise insists on `make_transport`."""
    from arctic_platform.client.transport import initialize_or_cleanup

    client = api.async_client.__new__(api.async_client)
    client.config = config
    client.transport = transport
    client.jobs = initialize_or_cleanup(transport)
    return client


# The client ops whose 0.1.4 Ray server method calls `ray.get` inside `async def` (checked against
# the installed sources by tests/core/runtime/test_runtime_ray_off_loop.py).
OFF_LOOP_RAY_OPS: frozenset[str] = frozenset(
    {"forward-backward", "forward", "step", "save", "load-checkpoint"}
)


def _compat_ray_transport(config: Any, server_state: Any) -> Any:
    """0.1.4's in-process Ray transport, built by its own `make_transport` (its dependency gate and
    server-state creation unchanged), with `OFF_LOOP_RAY_OPS` run in a worker thread and a
    rendezvous port of its own for each DeepSpeed job."""
    from arctic_platform.client.base import make_transport

    return with_blocking_ops_off_loop(make_transport(config, server_state=server_state))


def with_blocking_ops_off_loop(transport: Any) -> Any:
    """`transport`, as `CompatRayTransport` when it is 0.1.4's `RayTransport` (its class is swapped
    for a subclass that overrides `acall` and `_start` only; its state is untouched)."""
    from arctic_platform.client.transports.onprem_ray import RayTransport

    if isinstance(transport, RayTransport) and not getattr(transport, "_blocking_ops_off_loop", False):
        transport.__class__ = _compat_ray_transport_class(type(transport))
    return transport


@functools.cache
def _compat_ray_transport_class(ray_transport: type) -> type:
    class CompatRayTransport(ray_transport):
        """0.1.4's `RayTransport`: blocking server methods run off the caller's event loop, and each
        DeepSpeed job is created with its own rendezvous port."""

        _blocking_ops_off_loop = True

        async def acall(self, request: Any) -> dict:
            if request.op not in OFF_LOOP_RAY_OPS:
                return await super().acall(request)
            method, args = self._resolve(request)
            return await asyncio.to_thread(_run_blocking_coroutine, method, args)

        def _start(self, payload: dict) -> Any:
            port = ray_job_master_port(self._state, payload.get("job_type"))
            if port is not None:
                import ray

                ray.get(self._state.__ray_call__.remote(_set_ds_master_port, port))
            return super()._start(payload)

    return CompatRayTransport


LOG_PROB_PORT_OFFSET = 1  # 0.1.4's own default pair is 29500 (training) / 29501 (log-prob)


def ray_job_master_port(state: Any, job_type: str | None) -> int | None:
    """The rendezvous port to give the Ray server state before it creates `job_type`, or None to
    leave 0.1.4's choice: it picks `ds_master_port` (the driver's MASTER_PORT), else the state
    actor's own MASTER_PORT, for BOTH DeepSpeed jobs; only with neither are they 29500 / 29501."""
    if job_type not in ("training", "log_prob"):
        return None
    import ray

    shared = ray.get(state.__ray_call__.remote(_shared_master_port))
    if shared is None:
        return None
    port = shared + (LOG_PROB_PORT_OFFSET if job_type == "log_prob" else 0)
    if job_type == "log_prob":
        logging.getLogger(__name__).warning(
            "MASTER_PORT=%s reaches the Arctic Ray server: arctic-platform 0.1.4 would give the training and "
            "the log-prob job that one rendezvous port; the log-prob job gets %s",
            shared,
            port,
        )
    return port


def _shared_master_port(state: Any) -> int | None:
    """(In the server-state actor.) The port 0.1.4 would give every DeepSpeed job, if one is set."""

    if getattr(state, "_arctic_rl_shared_port", None) is not None:
        return state._arctic_rl_shared_port
    port = state.ds_master_port
    if port is None and os.environ.get("MASTER_PORT"):
        port = int(os.environ["MASTER_PORT"])
    state._arctic_rl_shared_port = port  # read once: the per-job values below overwrite ds_master_port
    return port


def _set_ds_master_port(state: Any, port: int) -> None:
    """(In the server-state actor.) The port its next DeepSpeed job rendezvous on."""
    state.ds_master_port = port


@contextlib.contextmanager
def distinct_master_ports(config: Any) -> Any:
    """While a client launches a local HTTP server that will run both DeepSpeed jobs: without
    MASTER_PORT in this process's environment (the server copies it, and would give both jobs that
    port; without it they get 29500 / 29501). Restored afterwards."""

    backend = config.backend
    launches = getattr(backend, "protocol", None) == "http" and getattr(backend, "launch_local_server", False)
    both = getattr(config, "training_gpus", 0) > 0 and getattr(config, "log_prob_gpus", 0) > 0
    port = os.environ.get("MASTER_PORT")
    if not (launches and both and port is not None):
        yield
        return
    logging.getLogger(__name__).warning(
        "MASTER_PORT=%s is not passed to the Arctic HTTP server this client launches: arctic-platform 0.1.4 "
        "would give its training and log-prob jobs that one rendezvous port (without it: 29500 / 29501)",
        port,
    )
    del os.environ["MASTER_PORT"]
    try:
        yield
    finally:
        os.environ.setdefault("MASTER_PORT", port)


def _run_blocking_coroutine(method: Any, args: tuple) -> Any:
    """Run one of the server's blocking coroutines to completion on this (worker) thread's own loop."""
    return asyncio.run(method(*args))


@functools.cache
def _http_transport_class() -> type:
    from arctic_platform import wire
    from arctic_platform.client.transports.onprem_http import HttpTransport

    class ErrorBodyHttpTransport(HttpTransport):
        """0.1.4's HTTP transport, raising `ArcticServerError` with the server's error body."""

        def call(self, request: Any) -> dict:
            url, kwargs = self._http_args(request)
            response = self.session.post(url, timeout=self.timeout, **kwargs)
            if response.status_code >= 400:
                raise ArcticServerError(request.op, response.status_code, response.text)
            if "application/octet-stream" in response.headers.get("Content-Type", ""):
                return wire.loads(response.content)
            return response.json()

        async def acall(self, request: Any) -> dict:
            session = await self._ensure_asession()
            url, kwargs = self._http_args(request)
            async with session.post(url, **kwargs) as response:
                if response.status >= 400:
                    raise ArcticServerError(request.op, response.status, await response.text())
                if "application/octet-stream" in response.headers.get("Content-Type", ""):
                    return wire.loads(await response.read())
                return await response.json()

    return ErrorBodyHttpTransport


# ----------------------------------------------------------------------------------------------
# Calls
# ----------------------------------------------------------------------------------------------

# The job each client op addresses in 0.1.4 (`client/requests.py`); weight-sync goes from the
# training job to the sampling job.
_OP_JOB: dict[str, str] = {
    "generate": "sampling",
    "sleep-inference": "sampling",
    "wake-inference": "sampling",
    "reset-prefix-cache": "sampling",
    "log-probs": "log_prob",
}
_RAY_LOGS = (
    "the Ray worker logs of the server's actors (/tmp/ray/session_latest/logs/worker-*.err on their nodes)"
)


def call_context(
    client: Any, op: str, *, job_type: str | None = None, payload_bytes: int | None = None
) -> CallContext:
    """Which job and server an op goes to, and where that server logs what it does not answer."""
    job_type = job_type or _OP_JOB.get(op, "training")
    jobs = getattr(client, "jobs", None)
    job_id = getattr(jobs, job_type, None)
    job = f"{job_type} job {job_id}" if job_id is not None else f"{job_type} job (none)"
    if op == "weight-sync":
        job += f" -> sampling job {getattr(jobs, 'sampling', None)}"
    backend = client.config.backend
    kind = getattr(backend, "type", "onprem")
    if kind == "remote":
        url = getattr(backend, "base_url", None) or getattr(backend, "host", None) or "Snowflake Cortex"
        server, log = f"Cortex {url}", "the Cortex job's logs in Snowflake"
    elif getattr(backend, "protocol", "http") == "ray":
        server, log = "the in-process Ray server (ray.init(address='auto'))", _RAY_LOGS
    else:
        server = f"http://{backend.host}:{backend.port}"
        process = (
            "this process's stderr (the client launched the server as its child)"
            if getattr(backend, "launch_local_server", False)
            else f"the output of the server process at {server} (`arctic-rl serve --reference`: the terminal or "
            "file its output goes to; the Arctic server, `python -m arctic_platform.common.http_server`: its "
            "stderr"
        )
        log = f"{process}, and for a failure inside an Arctic worker {_RAY_LOGS})"
        if getattr(backend, "launch_local_server", False):
            log = f"{process}, and for a failure inside a worker {_RAY_LOGS}"
    return CallContext(op=op, job=job, server=server, payload_bytes=payload_bytes, server_log=log)


def weight_format(client_config: Any) -> str | None:
    """`"lora"` when the jobs train LoRA adapters (`training.peft`, Cortex only): the sync then sends
    only the adapter tensors; None = the server's full-weight default."""
    return "lora" if getattr(getattr(client_config, "training", None), "peft", None) else None


async def transfer_weights(
    client: Any, *, cuda_ipc: bool | None, low_memory: bool | None, weight_format: str | None = None
) -> dict:
    """Only the weight-sync operation (no wake / reset around it)."""
    request = load_client_api().requests.sync_weights_request(
        client.jobs, cuda_ipc=cuda_ipc, low_memory=low_memory, weight_format=weight_format
    )
    return await client.transport.acall(request)


LOG_PROB_OFFLOAD_OPS = ("sleep-log-prob", "wake-log-prob")


def _log_prob_residency_request(client: Any, op: str) -> Any:
    from arctic_platform.client.transport import Request

    if op not in LOG_PROB_OFFLOAD_OPS:
        raise ValueError(f"op={op!r}: expected one of {LOG_PROB_OFFLOAD_OPS}")
    return Request(op, client.jobs.require("log_prob"), {})


async def log_prob_residency(client: Any, op: str) -> dict:
    """`/sleep-log-prob` or `/wake-log-prob`: offload the DeepSpeed log-prob (reference) engine to
    CPU or bring it back. Server routes of 0.1.4 that the client does not expose. Over HTTP they are
    plain POSTs; the Ray server's methods take the job id only (no body), so they are called
    directly there."""
    request = _log_prob_residency_request(client, op)
    server = getattr(client.transport, "_server", None)
    if server is not None and client.config.backend.protocol == "ray":
        return await getattr(server, op.replace("-", "_"))(request.job_id)
    return await client.transport.acall(request)


def log_prob_residency_blocking(client: Any, op: str) -> dict:
    """`log_prob_residency` from a thread without a loop (construction). BLOCKING."""
    request = _log_prob_residency_request(client, op)
    transport = client.transport
    server = getattr(transport, "_server", None)
    if server is not None and client.config.backend.protocol == "ray":
        return transport._run_on_loop(getattr(server, op.replace("-", "_"))(request.job_id))
    return transport.call(request)


async def close_session(client: Any) -> None:
    """Close the client's async HTTP session (on the loop that owns it)."""
    await client.transport.aclose()


def destroy_jobs(client: Any) -> None:
    """Destroy the client's jobs (and stop a server it launched). BLOCKING."""
    client.transport.shutdown()


def release_connections(client: Any) -> None:
    """Free the client's connections without destroying any job. BLOCKING.

    A reattached Ray transport's `shutdown()` only closes its private loop (0.1.4 skips the
    destroy in reconnect mode); HTTP transports keep a `requests` session to close. Other
    transports' `shutdown()` would destroy the jobs, so it is not called here."""
    transport = client.transport
    if getattr(transport, "_reconnect", False):
        transport.shutdown()
    session = getattr(transport, "session", None)
    if session is not None and callable(getattr(session, "close", None)):
        session.close()


def reconnect_config(client: Any) -> Any:
    """A config that reattaches to the client's jobs (job ids set: no job creation, no HTTP)."""
    return client.reconnect_config()


def server_state(client: Any) -> Any:
    """The Ray transport's server-state handle (needed to reattach from another process); None
    for other transports."""
    getter = getattr(client.transport, "get_server_state", None)
    return getter() if callable(getter) else None


def owns_jobs(config: Any) -> bool:
    """True when constructing a client from `config` creates jobs (no reconnect ids set)."""
    return not load_client_api().job_handles.from_config(config).any_set


def in_event_loop_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
