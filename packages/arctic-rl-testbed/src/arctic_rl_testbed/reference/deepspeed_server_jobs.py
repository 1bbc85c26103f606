"""arctic-platform 0.1.4's own server code driving its own `DeepSpeedWorker`s, on a CPU.

`ServerJobs` calls the functions behind the 0.1.4 HTTP server's routes
(`arctic_platform.common.http_server`: `initialize`, `forward_backward`, `forward`, `step`, `save`,
`load_checkpoint`, `log_probs`, `destroy`) in this process, with the server's own app state. So the
batch split across data-parallel ranks (`http_split_batch`: rows first across ranks, `dp_size`
injected), the worker's split into gradient-accumulation micro-batches, its pipeline, loss, backward
and `engine.step`, the metrics' combination across micro-batches and ranks
(`finalize_fwd_bwd_metrics`), checkpoint paths, `latest`, pruning and HF export are the real code.
What is not:

- **Where the ranks run**: a `WorkerProcess` per rank instead of a Ray actor (`deepspeed_actor_stand_in`
  stands in for Ray's actor API while `/initialize` creates them; `deepspeed_cpu_shims` lets the
  worker run on a CPU). `MASTER_PORT` is set to a free port for each job's `/initialize` (the server
  reads it from its environment; two jobs, or two servers on one machine, must not share one).
- **The server process's setup**: `main()` starts Ray and uvicorn; `ServerJobs` sets the same app
  state fields it does (`sampling_gpus=0`, `log_prob_engine="deepspeed"`, not colocated).
- **Routes whose code calls `ray.get`** (sleep/wake training: `offload_*` / `backload_to_gpu` per rank)
  and the **weight sync** (NCCL or CUDA IPC into vLLM workers, or the colocated CPU-file path, whose
  receiving side is vLLM's `load_weights_from_shm_path`): `export_weights` runs the worker half of the
  CPU-file path (`gather_and_save_state_dict`, every rank, as `sync_weights_cpu_file` does) and hands the
  saved weights to the caller, which loads them into its CPU sampler in place of vLLM.

The server keeps its state on a module-level FastAPI `app`: calls from every `ServerJobs` of a process
take one lock and swap their own state in for the duration of the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arctic_rl_testbed.reference.deepspeed_actor_stand_in import WorkerActorClass, WorkerHandle
from arctic_rl_testbed.reference.deepspeed_cpu_shims import cpu_ds_config, extras_gate_open
from arctic_rl_testbed.reference.deepspeed_worker_process import WorkerProcess

_APP_LOCK = threading.RLock()
logger = logging.getLogger(__name__)


class ServerRefusal(RuntimeError):
    """The 0.1.4 server answered with an HTTP error (its `HTTPException`): status and detail."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


def server_module() -> Any:
    """`arctic_platform.common.http_server`, imported with its extras gate open (see
    `deepspeed_cpu_shims.extras_gate_open`)."""

    with extras_gate_open():
        import arctic_platform.common.http_server as server
    return server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerJobs:
    """The 0.1.4 server's training and log-prob jobs (module docstring). Call `close()` when done."""

    def __init__(self, *, training_gpus: int, log_prob_gpus: int, num_threads: int = 1) -> None:
        from starlette.datastructures import State

        server = server_module()
        from arctic_platform.common.utils.ray_pg import ColocatePlacement

        self._server = server
        self._num_threads = num_threads
        self.processes: list[WorkerProcess] = []
        state = State()
        # the fields 0.1.4's `main()` sets before serving (no sampling pool: the caller samples)
        state.training_gpus = training_gpus
        state.sampling_gpus = 0
        state.log_prob_gpus = log_prob_gpus
        state.log_prob_engine = "deepspeed"
        state.colocate = False
        state.placement = ColocatePlacement()
        state.placement_group = None
        state.n_bundles = 0
        state.training_workers = []
        state.sampling_pool = None
        state.log_prob_pool = None
        state.log_prob_workers = []
        state.log_prob_tokenizer = None
        state.jobs = {}
        state.next_job_id = 1
        state.weight_sync_ready = False
        state.weight_sync_bucket_size = server._WEIGHT_SYNC_BUCKET_SIZE
        self.state = state
        self.cpu_additions: dict[str, list[str]] = {}  # job type -> ds_config keys cpu_ds_config added
        self._closed = False

    # -- calls into the server's code -------------------------------------------------------------
    @contextlib.contextmanager
    def _as_the_server(self, *, starting_workers: bool = False) -> Iterator[Any]:
        server = self._server
        if self._closed:
            raise RuntimeError("the DeepSpeed server jobs are shut down: create a new engine")

        with _APP_LOCK, extras_gate_open():  # the routes import arctic_platform.rl lazily (load balancer)
            saved_state = server.app.state
            server.app.state = self.state
            patched: list[tuple[Any, str, Any]] = []
            saved_port = os.environ.get("MASTER_PORT")
            if starting_workers:
                import arctic_platform.common.deepspeed_worker as worker_module

                actor = WorkerActorClass(num_threads=self._num_threads, started=self.processes.append)
                for module in (server, worker_module):
                    patched.append((module, "DeepSpeedWorker", module.DeepSpeedWorker))
                    module.DeepSpeedWorker = actor
                os.environ["MASTER_PORT"] = str(free_port())
            try:
                yield server
            except server.HTTPException as error:
                raise ServerRefusal(error.status_code, str(error.detail)) from None
            finally:
                for module, name, value in patched:
                    setattr(module, name, value)
                if starting_workers:
                    if saved_port is None:
                        os.environ.pop("MASTER_PORT", None)
                    else:
                        os.environ["MASTER_PORT"] = saved_port
                server.app.state = saved_state

    def initialize(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /initialize (training or log_prob job with a ds_config): starts the job's ranks. The
        `ds_config` first goes through `deepspeed_cpu_shims.cpu_ds_config` (what it adds is logged)."""

        ds_config, added = cpu_ds_config(body.get("ds_config"))
        if added:
            logger.warning(
                "DeepSpeed trainer, %s job: added %s to the client's ds_config (DeepSpeed's CPU Adam is a C++ op "
                "it would JIT-compile; torch.optim.AdamW is the same update)",
                body.get("job_type"),
                ", ".join(added),
            )
            body = {**body, "ds_config": ds_config}
        self.cpu_additions[str(body.get("job_type"))] = added
        with self._as_the_server(starting_workers=True) as server:
            from arctic_platform.common.utils.server_models import JobConfig

            return asyncio.run(server.initialize(JobConfig(**body)))

    def forward_backward(self, job_id: int, payload: dict[str, Any]) -> dict[str, Any]:
        """POST /forward-backward: the DSSST1 body in, the decoded DSSST1 response out."""
        from arctic_platform import wire

        with self._as_the_server() as server:
            response = asyncio.run(server.forward_backward(job_id, wire.dumps(payload)))
        return wire.loads(response.body)

    def forward(self, job_id: int, payload: dict[str, Any]) -> dict[str, Any]:
        """POST /forward (training or log_prob job)."""
        from arctic_platform import wire

        with self._as_the_server() as server:
            response = asyncio.run(server.forward(job_id, wire.dumps(payload)))
        return wire.loads(response.body)

    def step(self, job_id: int) -> dict[str, Any]:
        with self._as_the_server() as server:
            from arctic_platform.common.utils.server_models import StepRequest

            return asyncio.run(server.step(job_id, StepRequest()))

    def save(self, job_id: int, **request: Any) -> dict[str, Any]:
        """POST /save with a `SaveRequest(**request)` (path, step, export_hf, save_total_limit, ...)."""
        with self._as_the_server() as server:
            from arctic_platform.common.utils.server_models import SaveRequest

            return asyncio.run(server.save(job_id, SaveRequest(**request)))

    def load_checkpoint(self, job_id: int, **request: Any) -> dict[str, Any]:
        with self._as_the_server() as server:
            from arctic_platform.common.utils.server_models import LoadCheckpointRequest

            return asyncio.run(server.load_checkpoint(job_id, LoadCheckpointRequest(**request)))

    def log_probs(self, job_id: int, prompts: list[str], completions: list[str] | None = None) -> Any:
        """POST /log-probs on a DeepSpeed log_prob job: `[B, S-1]` log p(token t+1)."""
        from arctic_platform import wire

        with self._as_the_server() as server:
            from arctic_platform.common.utils.server_models import LogProbsRequest

            request = LogProbsRequest(prompts=prompts, completions=completions)
            response = asyncio.run(server.log_probs(job_id, request))
        return wire.loads(response.body)["results"]

    def destroy(self, job_id: int) -> None:
        job = self.state.jobs.get(job_id)
        if job is None:
            return
        with self._as_the_server() as server:
            asyncio.run(server.destroy(job_id, job["job_type"]))

    # -- what runs without the server's route code -------------------------------------------------
    def workers(self, job_id: int) -> list[WorkerHandle]:
        job = self.state.jobs[job_id]
        return list(
            self.state.training_workers if job["job_type"] == "training" else self.state.log_prob_workers
        )

    def call_ranks(self, job_id: int, method: str, *args: Any) -> list[Any]:
        """`worker.<method>(*args)` on every rank of the job at once (what the routes that `ray.get`
        do); the ranks' values in rank order."""
        futures = [handle.process.submit(method, *args) for handle in self.workers(job_id)]
        return [future.result() for future in futures]

    def export_weights(self, job_id: int) -> list[tuple[str, Any]]:
        """The training job's full weights as (name, tensor) pairs, by the worker's half of the
        colocated CPU-file weight sync: every rank runs `gather_and_save_state_dict` (a collective under
        ZeRO-3), rank 0 writes the file, which is read back and removed."""
        import torch

        with tempfile.TemporaryDirectory(prefix="arctic-rl-weight-sync-") as directory:
            path = str(Path(directory) / "weight_sync.pt")
            self.call_ranks(job_id, "gather_and_save_state_dict", path)
            return torch.load(path, map_location="cpu", weights_only=True)

    def close(self) -> None:
        """Destroy every job and stop every worker process (idempotent)."""
        if self._closed:
            return
        for job_id in list(self.state.jobs):
            with contextlib.suppress(Exception):
                self.destroy(job_id)
        self._closed = True
        for process in self.processes:
            process.close()
