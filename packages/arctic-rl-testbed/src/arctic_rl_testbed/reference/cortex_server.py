"""A Cortex (SnowAPI `cortex-training`) emulator over the reference engine: the REST surface
arctic-platform 0.1.4's `CortexTransport` speaks, so the real client, with its `base_url` (or `host`)
pointed here, drives a CPU engine on loopback. `arctic-rl serve --reference --api cortex` runs it.

Surface (under `/api/v2/databases/{database}/schemas/{schema}/cortex-training`):

- Control plane (answers at once): `POST ""` create a job from `sub_job_configs`, `GET ""` list,
  `GET /{job_id}` the job (states `pending` -> `initializing` -> `running`, or `failed` with a
  `reason`; `cancelled` after `POST /{job_id}:cancel`, which is idempotent and answers 200 with an
  empty body), `GET /{job_id}/checkpoints`.
- Data plane (answers `{"request_id", "job_id"}`; poll `GET /{job_id}/requests/{request_id}` until
  `done` or `failed`): `forward-backward` and `generate` (DSSST1 octet bodies, request chunks of at
  most 60 MiB; forward-backward always a chunk envelope whose `chunk_group_id` is the idempotency key:
  `cortex_chunks`), `step`, `save`, `load`, and `operation` (`weight-sync` async; `reset-prefix-cache`
  inline). Octet results come back as `result_chunk` events paged by `cursor`/`next_cursor` when the
  frame asked for chunked delivery (the 0.1.4 client always does), else as an inline base64 DSSST1
  `result`; JSON ops' results are inline JSON.
- Every request needs the PAT: `Authorization: Bearer <PAT>` and
  `X-Snowflake-Authorization-Token-Type: PROGRAMMATIC_ACCESS_TOKEN` (401 otherwise). The token is
  compared in constant time and never written anywhere.
- Errors are JSON `{"message", "code"}` (chunk-group errors: `{"code": "<chunk_group_...>",
  "chunk_group_id", "message"}`): 400 a malformed request, 401 the PAT, 404 an unknown job, request
  or checkpoint, 409 a job not running yet or a chunk-group conflict, 413 a body over 60 MiB,
  501 what Cortex routes but the emulator does not serve. The 0.1.4 client retries 404, 409, 429 and
  5xx; a request it cannot fix is answered 400 so it fails at once.

Results are Cortex's: forward-backward `{"job_id", "avg_loss", "metrics", "post_process_outputs": {}}`
(no `batch`), step `{"global_steps", "last_lr"}` (no `metrics`), save `{"checkpoint_id",
"checkpoint_path", "checkpoint_tag"}`, load `{"checkpoint_id", "global_steps"}`, generate
`{"job_id", "results": [{"text", "token_ids", "finish_reason"[, "logprobs"]}]}`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import hashlib
import logging
import secrets
import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arctic_rl_testbed.reference import http_auth, request_bounds
from arctic_rl_testbed.reference.app_runner import serve_application
from arctic_rl_testbed.reference.cortex_chunks import (
    ChunkFrameError,
    ChunkGroupError,
    ChunkGroups,
    ChunkStoreFull,
)
from arctic_rl_testbed.reference.cortex_payload import (
    CortexBodyError,
    forward_payload,
    lower,
    with_old_logprobs,
)
from arctic_rl_testbed.reference.deepspeed_mapping import DeepSpeedConfigError, training_overrides
from arctic_rl_testbed.reference.engine import ReferenceBackend
from arctic_rl_testbed.reference.fidelity import Fidelity
from arctic_rl_testbed.reference.file_root import FileRoot
from arctic_rl_testbed.reference.http_server import (
    REFERENCE_MODEL_NAME,
    HTTPError,
    vllm_logprobs_mode,
    vllm_sampling,
)
from arctic_rl_testbed.reference.lora import SERVER_DEFAULTS, lora_config
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings
from arctic_rl_testbed.reference.validation import PayloadError

if TYPE_CHECKING:
    from aiohttp import web

logger = logging.getLogger(__name__)

PAT_ENV = "ARCTIC_CORTEX_PAT"
ENDPOINT = "cortex-training"
PREFIX = "/api/v2/databases/{database}/schemas/{schema}/{endpoint}"
MAX_REQUEST_BYTES = 60 * 1024 * 1024  # SnowAPI's per-request cap (the client splits frames at it)
MAX_EVENTS_DEFAULT, MAX_EVENTS_CAP = 16, 512
MAX_REQUESTS_KEPT = 1024  # finished request records kept per job
TOKEN_TYPE_HEADER = "X-Snowflake-Authorization-Token-Type"
TOKEN_TYPE = "PROGRAMMATIC_ACCESS_TOKEN"
SUB_JOB_SEGMENT = {"training": "training", "sampling": "sampling", "log_probability": "log_prob"}
TRAINING_KEYS = frozenset(
    {
        "max_seq_len",
        "n_gpus",
        "train_batch_size",
        "gradient_clipping",
        "optimizer",
        "activation_checkpointing",
        "model_provider",
        "attn_implementation",
        "ep_size",
        "mb_spec",
        "ds_config",
        "peft_config",
        "load_optimizer_states",
    }
)
INFERENCE_KEYS = frozenset({"max_seq_len", "n_gpus", "vllm_config", "peft_config", "multiplex_job_id"})
SUB_JOB_KEYS = frozenset(
    {
        "job_type",
        "model_name",
        "dtype",
        "seed",
        "training_config",
        "inference_config",
        "source_checkpoint_info",
    }
)
SAVE_TYPES = ("resumable", "weights-only")
INLINE_OPERATIONS = frozenset(
    {"bootstrap-router-replay", "cancel-request", "reset-prefix-cache", "router-replay-discard", "tail-logs"}
)


class CortexError(Exception):
    """An error answer: status and the JSON body's message (and optional extra fields)."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"message": self.message, "code": self.status, **self.extra}


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class RequestRecord:
    request_id: str
    op: str
    status: str = "pending"  # pending -> running -> done | failed
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    result: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


@dataclass
class Execution:
    """One run of a data-plane op; request records of a replayed chunk group share it."""

    task: asyncio.Task | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    outcome: tuple[str, dict[str, Any], list[dict[str, Any]], str] | None = None


@dataclass
class Checkpoint:
    checkpoint_id: str
    global_steps: int
    avg_loss: float | None
    created_at: str
    checkpoint_type: str
    path: Path

    def listing(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "global_steps": self.global_steps,
            "avg_loss": self.avg_loss,
            "created_at": self.created_at,
            "checkpoint_type": self.checkpoint_type,
        }


@dataclass
class CortexJob:
    job_id: str
    scope: tuple[str, str]  # (database, schema)
    sub_jobs: list[dict[str, Any]]
    model_name: str
    seed: int
    training: dict[str, Any] | None
    sampling_max_len: int | None
    peft: dict[str, Any] | None = None  # the LoRA adapter both sub-jobs were created with (peft_config)
    logprobs_mode: str = "raw_logprobs"  # the sampling sub-job's vllm_config.logprobs_mode (vLLM's default)
    status: str = "pending"
    reason: str = ""
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    engine: ReferenceBackend | None = None
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    chunks: ChunkGroups = field(default_factory=ChunkGroups)
    op_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)
    last_loss: float | None = None
    executions: int = 0  # data-plane ops run (a replayed chunk group is not counted twice)
    starter: asyncio.Task | None = None

    def sub_job_id(self, job_type: str) -> str | None:
        for sub in self.sub_jobs:
            if sub["job_type"] == job_type:
                return sub["sub_job_id"]
        return None

    def describe(self) -> dict[str, Any]:
        subs = [{**sub, "status": self.status} for sub in self.sub_jobs]
        return {
            "job_id": self.job_id,
            "status": self.status,
            "reason": self.reason,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "image_tag": "arctic-rl-reference-emulator",
            "sub_jobs": subs,
        }

    def set_status(self, status: str, reason: str = "") -> None:
        self.status, self.reason, self.updated_at = status, reason, _now()


class CortexEmulator:
    """The Cortex routes over reference engines (one engine per job; `application()` builds the app)."""

    def __init__(
        self,
        token: str,
        settings: ReferenceEngineSettings | None = None,
        *,
        fidelity: Fidelity | None = None,
        file_root: str | Path | FileRoot | None = None,
        poll_wait_s: float = 0.1,
    ) -> None:
        if not token:
            raise ValueError(f"the Cortex emulator needs a PAT: export {PAT_ENV}")
        self._token = token
        self.fidelity = fidelity or Fidelity()
        # Cortex's GRPO honours the clip ratios it is sent (0.1.4's on-prem verl_grpo does not)
        self.settings = self.fidelity.engine_settings(settings or ReferenceEngineSettings()).model_copy(
            update={"honour_clip_ratios": True}
        )
        self.files = file_root if isinstance(file_root, FileRoot) else FileRoot(file_root)
        self.jobs: dict[str, CortexJob] = {}
        self.poll_wait_s = poll_wait_s
        self.faults = FaultPlan()
        self._waiters: dict[str, asyncio.Event] = {}
        self._settlers: set[asyncio.Task] = set()

    # -- app ------------------------------------------------------------------------------------
    def application(self) -> web.Application:
        from aiohttp import web

        self.files.root.mkdir(parents=True, exist_ok=True)
        limit = MAX_REQUEST_BYTES + 64 * 1024
        app = web.Application(
            client_max_size=limit,
            middlewares=[
                request_bounds.size_limit_middleware(limit, _too_large),
                self._errors,
                self._authenticate,
            ],
        )
        job = "{job_id:[^/:]+}"
        routes: list[tuple[str, str, Callable[[web.Request], Awaitable[Any]]]] = [
            ("POST", "", self.create_job),
            ("GET", "", self.list_jobs),
            ("GET", f"/{job}", self.get_job),
            ("POST", f"/{job}:cancel", self.cancel_job),
            ("GET", f"/{job}/checkpoints", self.list_checkpoints),
            ("GET", f"/{job}/requests/{{request_id}}", self.poll_request),
            ("POST", f"/{job}/forward-backward", self.forward_backward),
            ("POST", f"/{job}/generate", self.generate),
            ("POST", f"/{job}/step", self.step),
            ("POST", f"/{job}/save", self.save),
            ("POST", f"/{job}/load", self.load),
            ("POST", f"/{job}/operation", self.operation),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, PREFIX + path, self._json_route(handler))
        app.on_cleanup.append(lambda _app: self.close())
        return app

    async def close(self) -> None:
        for job in self.jobs.values():
            await self._release(job)
        self.files.remove_temporary()

    def _json_route(self, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        async def route(request: web.Request) -> web.StreamResponse:
            from aiohttp import web

            _check_scope(request)
            result = await handler(request)
            if isinstance(result, web.StreamResponse):
                return result
            return web.json_response(result)

        return route

    @property
    def _errors(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
            try:
                return await handler(request)
            except CortexError as err:
                return web.json_response(err.body(), status=err.status)
            except ChunkGroupError as err:
                return web.json_response(err.body(), status=409)
            except ChunkFrameError as err:
                return web.json_response({"message": str(err), "code": 400}, status=400)
            except ChunkStoreFull as err:
                return web.json_response({"message": str(err), "code": 429}, status=429)
            except web.HTTPRequestEntityTooLarge:
                return web.json_response(
                    {"message": _too_large_message(request.path), "code": 413}, status=413
                )
            except web.HTTPException as err:
                return web.json_response(
                    {"message": f"{request.path}: {err.reason}", "code": err.status}, status=err.status
                )
            except Exception as err:  # report, never kill the server
                logger.exception("%s %s failed", request.method, request.path)
                return web.json_response({"message": f"{type(err).__name__}: {err}", "code": 500}, status=500)

        return errors

    @property
    def _authenticate(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
            if not http_auth.authorized(request, self._token):
                message = (
                    "missing or wrong programmatic access token: send 'Authorization: Bearer <PAT>' with "
                    f"'{TOKEN_TYPE_HEADER}: {TOKEN_TYPE}'"
                )
                return web.json_response({"message": message, "code": 401}, status=401)
            if request.headers.get(TOKEN_TYPE_HEADER) != TOKEN_TYPE:
                message = f"the {TOKEN_TYPE_HEADER} header must be {TOKEN_TYPE} with a PAT bearer token"
                return web.json_response({"message": message, "code": 401}, status=401)
            return await handler(request)

        return authenticate

    # -- control plane --------------------------------------------------------------------------
    async def create_job(self, request: web.Request) -> Any:
        body = await _json_object(request)
        configs = body.get("sub_job_configs")
        unknown = sorted(set(body) - {"sub_job_configs", "experiment_name"})
        if unknown:
            raise CortexError(400, f"create-job body has unknown keys {unknown}: send sub_job_configs")
        if not isinstance(configs, list) or not configs:
            raise CortexError(400, "sub_job_configs must be a non-empty list of sub-job configs")
        job_id = secrets.token_hex(4)
        job = self._new_job(job_id, _scope(request), configs)
        self.jobs[job_id] = job
        job.starter = asyncio.create_task(self._start(job))
        return {"job_id": job_id}

    def _new_job(self, job_id: str, scope: tuple[str, str], configs: list[Any]) -> CortexJob:
        subs: list[dict[str, Any]] = []
        counts: dict[str, int] = {}
        models, seeds = set(), set()
        training: dict[str, Any] | None = None
        sampling_max_len: int | None = None
        logprobs_mode = "raw_logprobs"
        pefts: dict[str, Any] = {}  # job type -> its peft_config (LoRA)
        for i, sub in enumerate(configs):
            if not isinstance(sub, Mapping):
                raise CortexError(400, f"sub_job_configs[{i}] is a {type(sub).__name__}: send an object")
            unknown = sorted(set(sub) - SUB_JOB_KEYS)
            if unknown:
                raise CortexError(400, f"sub_job_configs[{i}] has unknown keys {unknown}")
            job_type = sub.get("job_type")
            if job_type not in SUB_JOB_SEGMENT:
                raise CortexError(
                    400,
                    f"sub_job_configs[{i}].job_type={job_type!r}: use training, sampling or log_probability",
                )
            if not isinstance(sub.get("model_name"), str) or not sub["model_name"]:
                raise CortexError(400, f"sub_job_configs[{i}].model_name is required")
            if sub.get("source_checkpoint_info") is not None:
                raise CortexError(
                    501,
                    f"sub_job_configs[{i}].source_checkpoint_info: create-time initialization is not emulated",
                )
            models.add(sub["model_name"])
            seed = sub.get("seed")
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
                raise CortexError(400, f"sub_job_configs[{i}].seed={seed!r}: must be an integer")
            seeds.add(42 if seed is None else seed)
            index = counts.get(job_type, 0)
            counts[job_type] = index + 1
            if index:
                raise CortexError(
                    400, f"sub_job_configs: more than one {job_type} sub-job (the emulator runs one each)"
                )
            entry: dict[str, Any] = {
                "sub_job_id": f"{job_id}:{SUB_JOB_SEGMENT[job_type]}:{index}",
                "job_type": job_type,
                "model_name": sub["model_name"],
            }
            if job_type == "training":
                training = self._training_config(sub.get("training_config"), i)
                entry["training_config"] = training
                pefts["training"] = training.get("peft_config")
            else:
                if sub.get("training_config") is not None:
                    raise CortexError(
                        400, f"sub_job_configs[{i}] ({job_type}) takes inference_config, not training_config"
                    )
                inference = _inference_config(sub.get("inference_config"), i)
                entry["inference_config"] = inference
                if job_type == "sampling":
                    sampling_max_len = int(inference["max_seq_len"])
                    logprobs_mode = _sampling_logprobs_mode(inference, i)
                    pefts["sampling"] = inference.get("peft_config")
            if sub.get("dtype") is not None:
                entry["dtype"] = sub["dtype"]
            subs.append(entry)
        if len(models) > 1:
            raise CortexError(
                400, f"sub_job_configs name different models {sorted(models)}: one job serves one model"
            )
        if len(seeds) > 1 and not self.fidelity.as_0_1_4:
            raise CortexError(
                400,
                f"sub_job_configs carry different seeds {sorted(seeds)}: the emulator's sub-jobs share one engine",
            )
        model_name = models.pop()
        if model_name != REFERENCE_MODEL_NAME and not Path(model_name).is_dir():
            raise CortexError(
                400,
                f"model_name={model_name!r}: the Cortex emulator serves {REFERENCE_MODEL_NAME!r} (its tiny CPU model) "
                "or a local model directory; it never downloads",
            )
        peft = _job_peft(pefts)
        job = CortexJob(job_id, scope, subs, model_name, min(seeds), training, sampling_max_len, peft)
        job.logprobs_mode = logprobs_mode
        return job

    def _training_config(self, config: Any, i: int) -> dict[str, Any]:
        if config is None:
            return {}
        if not isinstance(config, Mapping):
            raise CortexError(400, f"sub_job_configs[{i}].training_config must be an object")
        unknown = sorted(set(config) - TRAINING_KEYS)
        if unknown:
            raise CortexError(400, f"sub_job_configs[{i}].training_config has unknown keys {unknown}")
        if config.get("peft_config") is not None:
            _check_peft(config["peft_config"], f"sub_job_configs[{i}].training_config.peft_config")
        return dict(config)

    async def _start(self, job: CortexJob) -> None:
        """pending -> initializing -> running (engine built, training configured), or failed."""

        await asyncio.sleep(0)
        job.set_status("initializing")
        try:
            settings = self.settings.model_copy(update={"seed": job.seed, "peft": job.peft})
            if job.model_name != REFERENCE_MODEL_NAME:
                model = settings.model.model_copy(update={"model_path": job.model_name})
                settings = settings.model_copy(update={"model": model})
            engine = await asyncio.to_thread(ReferenceBackend, settings)
            job.engine = engine
            limit = job.sampling_max_len
            if limit is not None and limit > engine.max_model_len:
                raise ValueError(
                    f"inference_config.max_seq_len={limit} exceeds the model's max_position_embeddings="
                    f"{engine.max_model_len}"
                )
            if job.training:
                ds_config = _training_ds_config(job.training)
                if ds_config:
                    overrides = training_overrides(
                        ds_config, dp_size=engine.settings.dp_size, defaults=engine.settings.optimizer
                    )
                    await engine.configure_training(
                        optimizer=overrides.optimizer,
                        schedule=overrides.schedule,
                        grad_accum_steps=overrides.grad_accum_steps,
                    )
        except (DeepSpeedConfigError, ValueError, OSError) as err:
            job.set_status("failed", str(err))
            await self._release(job)
            return
        except Exception as err:
            logger.exception("job %s failed to start", job.job_id)
            job.set_status("failed", f"{type(err).__name__}: {err}")
            await self._release(job)
            return
        if job.status == "initializing":
            job.set_status("running")

    async def list_jobs(self, request: web.Request) -> Any:
        wanted = request.query.get("status")
        scope = _scope(request)
        jobs = [j.describe() for j in self.jobs.values() if j.scope == scope]
        if wanted:
            jobs = [j for j in jobs if j["status"] == wanted.lower()]
        return {"jobs": jobs}

    async def get_job(self, request: web.Request) -> Any:
        return self._job(request).describe()

    async def cancel_job(self, request: web.Request) -> Any:
        from aiohttp import web

        job = self._job(request)
        if job.status == "failed":
            raise CortexError(400, f"job {job.job_id} has failed ({job.reason}); there is nothing to cancel")
        if job.status != "cancelled":
            job.set_status("cancelled", "cancelled by the caller")
            async with job.op_lock:  # a running op finishes first; queued ones then fail as cancelled
                await self._release(job)
        return web.Response(status=200)

    async def _release(self, job: CortexJob) -> None:
        if job.starter is not None and not job.starter.done() and job.starter is not asyncio.current_task():
            job.starter.cancel()
        engine, job.engine = job.engine, None
        job.chunks.clear()  # an unfinished upload of a cancelled or failed job is freed with it
        if engine is not None:
            await engine.shutdown()

    async def list_checkpoints(self, request: web.Request) -> Any:
        job = self._job(request)
        ordered = sorted(job.checkpoints.values(), key=lambda c: (c.global_steps, c.created_at))
        return {"checkpoints": [c.listing() for c in ordered]}

    # -- requests -------------------------------------------------------------------------------
    async def poll_request(self, request: web.Request) -> Any:
        job = self._job(request)
        record = job.requests.get(request.match_info["request_id"])
        if record is None:
            raise CortexError(
                404, f"request {request.match_info['request_id']} not found in job {job.job_id}"
            )
        if record.status in ("pending", "running") and self.poll_wait_s > 0:
            await asyncio.sleep(0)  # let a just-submitted op start
            waiter = self._waiters.get(record.request_id)
            if waiter is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(waiter.wait()), self.poll_wait_s)
        try:
            max_events = int(request.query.get("max_events", MAX_EVENTS_DEFAULT))
            cursor = int(request.query.get("cursor") or 0)
        except ValueError:
            raise CortexError(400, "max_events and cursor must be whole numbers") from None
        max_events = max(1, min(max_events, MAX_EVENTS_CAP))
        events, next_cursor = [], ""
        if record.status == "done" and record.events:
            if not 0 <= cursor <= len(record.events):
                raise CortexError(
                    400, f"cursor={cursor} is outside this request's {len(record.events)} result chunks"
                )
            events = record.events[cursor : cursor + max_events]
            end = cursor + len(events)
            next_cursor = str(end) if end < len(record.events) else ""
        return {
            "request_id": record.request_id,
            "status": record.status,
            "created_at": record.created_at,
            "updated_at": record.updated_at,
            "result": record.result if record.status == "done" else {},
            "error": record.error,
            "events": events,
            "next_cursor": next_cursor,
        }

    def _submit(
        self,
        job: CortexJob,
        op: str,
        run: Callable[[], Awaitable[dict[str, Any]]] | None = None,
        *,
        octet: bool = False,
        chunked_delivery: bool = False,
        execution: Execution | None = None,
    ) -> tuple[dict[str, Any], Execution]:
        """A request record for `op`, run (in submission order) unless it shares `execution`."""
        record = RequestRecord(request_id=secrets.token_hex(8), op=op)
        job.requests[record.request_id] = record
        _prune(job.requests)
        done = asyncio.Event()
        self._waiters[record.request_id] = done
        if execution is None:
            assert run is not None
            shared = execution = Execution()

            async def execute() -> None:
                async with job.op_lock:
                    record.status, record.updated_at = "running", _now()
                    try:
                        if job.engine is None or job.status != "running":
                            raise CortexError(400, f"job {job.job_id} is {job.status}")
                        result = await run()
                        job.executions += 1
                        outcome = ("done", *_delivered(result, octet=octet, chunked=chunked_delivery), "")
                    except CortexError as err:
                        outcome = ("failed", {}, [], err.message)
                    except Exception as err:
                        outcome = ("failed", {}, [], _failure(err))
                    shared.outcome = outcome
                    shared.done.set()

            shared.task = asyncio.create_task(execute())

        async def settle(execution: Execution) -> None:
            await execution.done.wait()
            assert execution.outcome is not None
            record.status, record.result, record.events, record.error = execution.outcome
            record.updated_at = _now()
            done.set()
            self._waiters.pop(record.request_id, None)

        self._settlers.add(task := asyncio.create_task(settle(execution)))
        task.add_done_callback(self._settlers.discard)
        return {"request_id": record.request_id, "job_id": job.job_id}, execution

    # -- data plane -----------------------------------------------------------------------------
    async def forward_backward(self, request: web.Request) -> Any:
        job = self._running(request, "training")
        raw = await request.read()
        accepted = job.chunks.accept(raw, operation="fwd-bwd", bare_allowed=False)
        fault = self.faults.take("forward-backward", accepted.final)
        if accepted.execution is not None:  # a replayed group: its one execution, never a second run
            submitted, _ = self._submit(job, "forward-backward", execution=accepted.execution)
            return self._maybe_fail(fault, submitted)
        if accepted.frame is None:
            return self._maybe_fail(fault, _chunk_ack(job, accepted))
        body, chunked = _decode_frame(accepted.frame, job, accepted.group_id)
        lowered = self._lower(job, body, accepted.group_id)
        submitted, execution = self._submit(
            job, "forward-backward", lambda: self._train(job, lowered), octet=True, chunked_delivery=chunked
        )
        job.chunks.attach(accepted.group_id, execution)
        return self._maybe_fail(fault, submitted)

    def _lower(self, job: CortexJob, body: Any, group_id: str | None) -> Any:
        assert job.engine is not None
        try:
            return lower(body, pad_token_id=job.engine.pad_token_id, vocab_size=job.engine.vocab_size)
        except CortexBodyError as err:
            job.chunks.forget(group_id)
            raise CortexError(400, str(err)) from None

    async def _train(self, job: CortexJob, lowered: Any) -> dict[str, Any]:
        engine = job.engine
        assert engine is not None
        payload = lowered.payload
        if lowered.needs_old_logprobs:  # the server's GRPO: pi_old = pi_new.detach()
            out = await engine.forward(forward_payload(lowered))
            payload = with_old_logprobs(lowered, out.logprobs_B_S)
        result = await engine.train(payload)
        job.last_loss = float(result.output.loss)
        return {
            "job_id": job.job_id,
            "avg_loss": float(result.output.loss),
            "metrics": dict(result.output.metrics),
            "post_process_outputs": {},
        }

    async def generate(self, request: web.Request) -> Any:
        job = self._running(request, "sampling")
        raw = await request.read()
        accepted = job.chunks.accept(raw, operation="generate", bare_allowed=True)
        if accepted.execution is not None:
            submitted, _ = self._submit(job, "generate", execution=accepted.execution)
            return submitted
        if accepted.frame is None:
            return _chunk_ack(job, accepted)
        body, chunked = _decode_frame(accepted.frame, job, accepted.group_id)
        prompts, params, top, stop_ids = self._generate_args(job, body, accepted.group_id)
        submitted, execution = self._submit(
            job,
            "generate",
            lambda: self._sample(job, prompts, params, top, stop_ids),
            octet=True,
            chunked_delivery=chunked,
        )
        job.chunks.attach(accepted.group_id, execution)
        return submitted

    def _generate_args(self, job: CortexJob, body: Any, group_id: str | None) -> tuple[Any, Any, Any, Any]:
        try:
            if not isinstance(body, Mapping):
                raise CortexError(400, "generate body must decode to a dict")
            unknown = sorted(set(body) - {"prompts", "sampling_params", "routing_key", "strict"})
            if unknown:
                raise CortexError(400, f"generate body has unknown keys {unknown}")
            prompts = body.get("prompts")
            if not isinstance(prompts, list) or not prompts or not all(_is_prompt(p) for p in prompts):
                raise CortexError(400, "prompts must be a non-empty list of strings and/or token-id lists")
            if any(isinstance(p, list) for p in prompts) and any(isinstance(p, str) for p in prompts):
                raise CortexError(
                    400, "prompts mix text and token-id prompts: the emulator takes one kind per call"
                )
            params = body.get("sampling_params")
            if isinstance(params, list):
                raise CortexError(
                    400,
                    "sampling_params as a per-prompt list is not emulated: send one sampling_params object",
                )
            if params is not None and not isinstance(params, Mapping):
                raise CortexError(400, "sampling_params must be an object")
            limit = job.sampling_max_len or 0
            for i, prompt in enumerate(prompts):
                if isinstance(prompt, list) and limit and len(prompt) >= limit:
                    raise CortexError(
                        400, f"prompts[{i}] has {len(prompt)} tokens >= inference_config.max_seq_len={limit}"
                    )
            sampling, top, stop_ids = vllm_sampling(params, limit, fidelity=self.fidelity)
        except HTTPError as err:
            job.chunks.forget(group_id)
            raise CortexError(400, err.detail) from None
        except CortexError:
            job.chunks.forget(group_id)
            raise
        return prompts, sampling, top, stop_ids

    async def _sample(
        self, job: CortexJob, prompts: Any, params: Any, top: Any, stop_ids: Any
    ) -> dict[str, Any]:
        assert job.engine is not None
        sequences, _version = await job.engine.sample(
            prompts,
            params,
            top_logprobs=top,
            extra_stop_ids=stop_ids,
            max_model_len=job.sampling_max_len,
            logprobs_mode=job.logprobs_mode,
        )
        results = []
        for seq in sequences:
            result: dict[str, Any] = {
                "text": seq.text,
                "token_ids": list(seq.token_ids),
                "finish_reason": seq.finish_reason.value,
            }
            if top is not None:
                result["logprobs"] = [
                    {str(token): {"logprob": lp, "rank": rank} for token, (lp, rank) in entries.items()}
                    for entries in seq.top_logprobs
                ]
            results.append(result)
        return {"job_id": job.job_id, "results": results}

    async def step(self, request: web.Request) -> Any:
        job = self._running(request, "training")
        body = await _json_object(request, required=False)
        unknown = sorted(set(body) - {"learning_rate"})
        if unknown:
            raise CortexError(
                400, f"step body has unknown keys {unknown}: Cortex's step takes learning_rate only"
            )
        if body.get("learning_rate") is not None:
            raise CortexError(
                400,
                f"step learning_rate={body['learning_rate']!r}: the emulator applies the job's optimizer schedule "
                "only (set optimizer.lr / the ds_config scheduler at job creation and send no learning_rate)",
            )

        async def run() -> dict[str, Any]:
            assert job.engine is not None
            out = await job.engine.step(None)
            return {"global_steps": int(out.step), "last_lr": float(out.learning_rate)}

        return self._submit(job, "step", run)[0]

    async def save(self, request: web.Request) -> Any:
        job = self._running(request, "training")
        body = await _json_object(request, required=False)
        on_prem = sorted(set(body) & {"path", "step", "save_total_limit", "stage_info"})
        if on_prem:
            raise CortexError(
                400, f"save body has {on_prem}: those are on-prem fields; Cortex's save takes checkpoint_type"
            )
        unknown = sorted(set(body) - {"checkpoint_id", "checkpoint_type", "export_hf"})
        if unknown:
            raise CortexError(400, f"save body has unknown keys {unknown}")
        if body.get("export_hf") not in (None, False):
            raise CortexError(400, "export_hf=true is an on-prem field: use checkpoint_type='weights-only'")
        kind = str(body.get("checkpoint_type") or "resumable").lower()
        if kind not in SAVE_TYPES:
            raise CortexError(
                400, f"checkpoint_type={body.get('checkpoint_type')!r}: use resumable or weights-only"
            )

        async def run() -> dict[str, Any]:
            engine = job.engine
            assert engine is not None
            checkpoint_id = f"global_step{engine.global_step}"
            path = self.files.root / "cortex" / job.job_id / checkpoint_id
            if path.exists():
                shutil.rmtree(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            steps = await engine.save_to(path, export_hf=kind == "weights-only")
            job.checkpoints[checkpoint_id] = Checkpoint(
                checkpoint_id, steps, job.last_loss, _now(), kind, path
            )
            return {
                "checkpoint_id": checkpoint_id,
                "checkpoint_path": f"@{job.job_id}/checkpoints/{checkpoint_id}",
                "checkpoint_tag": checkpoint_id,
            }

        return self._submit(job, "save", run)[0]

    async def load(self, request: web.Request) -> Any:
        job = self._running(request, "training")
        body = await _json_object(request)
        unknown = sorted(set(body) - {"checkpoint_id", "source_job_id", "target_sub_job_id"})
        if unknown:
            raise CortexError(
                400,
                f"load body has unknown keys {unknown}: send checkpoint_id (source_job_id, target_sub_job_id)",
            )
        checkpoint_id = body.get("checkpoint_id")
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise CortexError(400, "load needs checkpoint_id (an id from GET /{job_id}/checkpoints)")
        target = body.get("target_sub_job_id")
        if target is not None:
            owned = {sub["sub_job_id"]: sub["job_type"] for sub in job.sub_jobs}
            if target not in owned:
                raise CortexError(400, f"target_sub_job_id={target!r} is not a sub-job of job {job.job_id}")
            if owned[target] != "training":
                raise CortexError(
                    501, f"target_sub_job_id={target!r} is a {owned[target]} sub-job: load targets training"
                )
        source = job
        source_id = body.get("source_job_id")
        if source_id is not None:
            source = self.jobs.get(str(source_id))
            if source is None or source.scope != job.scope:
                raise CortexError(404, f"source_job_id={source_id!r}: no such job")
        checkpoint = source.checkpoints.get(checkpoint_id)
        if checkpoint is None:
            raise CortexError(404, f"checkpoint {checkpoint_id!r} not found in job {source.job_id}")
        if checkpoint.checkpoint_type != "resumable":
            raise CortexError(
                400,
                f"checkpoint {checkpoint_id!r} is {checkpoint.checkpoint_type}: load takes a resumable checkpoint",
            )

        async def run() -> dict[str, Any]:
            assert job.engine is not None
            steps = await job.engine.load_from(checkpoint.path)
            return {"checkpoint_id": checkpoint_id, "global_steps": int(steps)}

        return self._submit(job, "load", run)[0]

    async def operation(self, request: web.Request) -> Any:
        job = self._running(request, None)
        body = await _json_object(request)
        kind = body.get("operation_type")
        if not isinstance(kind, str):
            raise CortexError(400, "operation needs operation_type")
        unknown = sorted(set(body) - {"operation_type", "sub_job_id", "sub_job_type", "payload"})
        if unknown:
            raise CortexError(400, f"operation body has unknown keys {unknown}")
        hint_id, hint_type = body.get("sub_job_id"), body.get("sub_job_type")
        owned = {sub["sub_job_id"]: sub["job_type"] for sub in job.sub_jobs}
        if hint_id is not None and hint_id not in owned:
            raise CortexError(400, f"sub_job_id={hint_id!r} is not a sub-job of job {job.job_id}")
        if hint_id is not None and hint_type is not None and owned[hint_id] != hint_type:
            raise CortexError(400, f"sub_job_id={hint_id!r} is a {owned[hint_id]} sub-job, not {hint_type!r}")
        payload = body.get("payload") or {}
        if not isinstance(payload, Mapping):
            raise CortexError(400, "operation payload must be an object")
        if kind == "weight-sync":
            return self._weight_sync(job, payload)
        if kind == "reset-prefix-cache":
            self._need(job, "sampling")
            assert job.engine is not None
            await job.engine.reset_prefix_cache()
            return {"operation_type": kind, "status": "ok"}
        if kind in INLINE_OPERATIONS or kind == "forward":
            raise CortexError(
                501, f"operation_type={kind!r} is routed by Cortex but not emulated by this server"
            )
        raise CortexError(400, f"unknown operation_type {kind!r}")

    def _weight_sync(self, job: CortexJob, payload: Mapping[str, Any]) -> Any:
        unknown = sorted(
            set(payload)
            - {"source_sub_job_id", "target_sub_job_ids", "weight_format", "cuda_ipc", "low_memory"}
        )
        if unknown:
            raise CortexError(400, f"weight-sync payload has unknown keys {unknown}")
        source, targets = payload.get("source_sub_job_id"), payload.get("target_sub_job_ids")
        if source != job.sub_job_id("training"):
            raise CortexError(
                400,
                f"weight-sync source_sub_job_id={source!r}: the job's training sub-job is {job.sub_job_id('training')!r}",
            )
        if not isinstance(targets, list) or targets != [job.sub_job_id("sampling")] or targets == [None]:
            raise CortexError(
                400,
                f"weight-sync target_sub_job_ids={targets!r}: send [{job.sub_job_id('sampling')!r}] (the job's sampling sub-job)",
            )
        weight_format = payload.get("weight_format") or "vllm"
        if weight_format == "lora" and job.peft is None:
            raise CortexError(
                400, "weight_format='lora' needs a job created with peft_config on both sub-jobs"
            )
        if weight_format not in ("vllm", "hf", "lora"):
            raise CortexError(400, f"weight_format={weight_format!r}: use vllm, hf or lora")
        if payload.get("cuda_ipc") or payload.get("low_memory"):
            raise CortexError(
                400, "cuda_ipc / low_memory are colocated weight-sync modes; Cortex never colocates"
            )

        async def run() -> dict[str, Any]:
            assert job.engine is not None
            report = await job.engine.sync_weights_detailed(
                cuda_ipc=False, low_memory=False, weight_format=weight_format
            )
            return {
                "source_sub_job_id": source,
                "target_sub_job_ids": targets,
                "weight_format": weight_format,
                "num_bytes": report.transfer.num_bytes,
            }

        return self._submit(job, "weight-sync", run)[0]

    # -- lookups --------------------------------------------------------------------------------
    def _job(self, request: web.Request) -> CortexJob:
        job = self.jobs.get(request.match_info["job_id"])
        if job is None or job.scope != _scope(request):
            raise CortexError(404, f"job {request.match_info['job_id']} not found")
        return job

    def _running(self, request: web.Request, sub_job: str | None) -> CortexJob:
        job = self._job(request)
        if job.status in ("pending", "initializing"):
            raise CortexError(409, f"job {job.job_id} is {job.status}: wait until it is running")
        if job.status != "running":
            raise CortexError(
                400, f"job {job.job_id} is {job.status}" + (f" ({job.reason})" if job.reason else "")
            )
        if sub_job is not None:
            self._need(job, sub_job)
        return job

    def _need(self, job: CortexJob, sub_job: str) -> None:
        if job.sub_job_id(sub_job) is None:
            raise CortexError(400, f"job {job.job_id} has no {sub_job} sub-job")

    def _maybe_fail(self, fault: int | None, answer: dict[str, Any]) -> Any:
        if fault is None:
            return answer
        raise CortexError(fault, f"injected fault {fault} (the request was applied; its answer is lost)")


@dataclass
class FaultPlan:
    """Test hook: answer the next `count` final chunks of `op` with `status` AFTER applying them (a lost
    answer, so the client retries the same chunk)."""

    op: str | None = None
    status: int = 503
    count: int = 0

    def arm(self, op: str, status: int = 503, count: int = 1) -> None:
        self.op, self.status, self.count = op, status, count

    def take(self, op: str, final: bool) -> int | None:
        if self.count and op == self.op and final:
            self.count -= 1
            return self.status
        return None


# -- helpers ----------------------------------------------------------------------------------------


def _prune(requests: dict[str, RequestRecord], keep: int = MAX_REQUESTS_KEPT) -> None:
    """Forget the oldest finished request records beyond `keep` (a long run's results do not pile up;
    polling a forgotten one answers 404)."""
    excess = len(requests) - keep
    if excess <= 0:
        return
    for request_id in [rid for rid, r in requests.items() if r.status in ("done", "failed")][:excess]:
        del requests[request_id]


def _check_scope(request: web.Request) -> None:
    info = request.match_info
    if info.get("endpoint") != ENDPOINT:
        raise CortexError(
            404, f"endpoint {info.get('endpoint')!r} not found: the emulator serves {ENDPOINT!r}"
        )
    for key in ("database", "schema"):
        if not info.get(key):
            raise CortexError(400, f"the URL names no {key}: set the client's database and schema")


def _too_large_message(path: str) -> str:
    return (
        f"{path}: the body is over SnowAPI's {MAX_REQUEST_BYTES} byte request limit; split the DSSST1 frame into "
        "request chunks (wire.encode_byte_chunks max_bytes=60 MiB)"
    )


def _too_large(error: request_bounds.BodyTooLarge) -> web.Response:
    from aiohttp import web

    message = f"{_too_large_message(error.path)} (Content-Length {error.size} bytes)"
    return web.json_response({"message": message, "code": 413}, status=413)


def _scope(request: web.Request) -> tuple[str, str]:
    return request.match_info["database"], request.match_info["schema"]


async def _json_object(request: web.Request, *, required: bool = True) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        if required:
            raise CortexError(400, f"{request.path.rsplit('/', 1)[-1]} needs a JSON body")
        return {}
    try:
        body = request_bounds.parse_json(raw, what=request.path)
    except request_bounds.JsonTooDeep as err:
        raise CortexError(400, str(err)) from None
    except ValueError:
        raise CortexError(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise CortexError(400, f"the body must be a JSON object, got {type(body).__name__}")
    return body


def _decode_frame(frame: bytes, job: CortexJob, group_id: str | None) -> tuple[Any, bool]:
    from arctic_platform import wire

    try:
        body = wire.loads(frame)
    except wire.WireError as err:
        job.chunks.forget(group_id)
        raise CortexError(400, f"the body is not a DSSST1 frame ({err})") from None
    options = wire.read_metadata(frame).get("response_options") or {}
    return body, isinstance(options, Mapping) and options.get("delivery") == "chunked"


def _chunk_ack(job: CortexJob, accepted: Any) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "chunk_group_id": accepted.group_id,
        "chunk_idx": accepted.chunk_idx,
        "total_chunks": accepted.total,
        "status": "accepted",
    }


def _delivered(
    result: dict[str, Any], *, octet: bool, chunked: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(inline result, result_chunk events): JSON ops inline; octet ops as DSSST1, chunked when asked."""
    from arctic_platform import wire

    if not octet:
        return result, []
    if not chunked:
        frame = wire.dumps(result)
        inline = {
            "content_type": "application/octet-stream",
            "encoding": "base64",
            "wire_format": wire.WIRE_FORMAT_VERSION,
            "payload_b64": base64.b64encode(frame).decode("ascii"),
        }
        return inline, []
    events = [
        {
            "type": "result_chunk",
            "payload_b64": base64.b64encode(chunk).decode("ascii"),
            "payload_sha256": hashlib.sha256(chunk).hexdigest(),
        }
        for chunk in wire.encode_result_chunks(result, max_bytes=MAX_REQUEST_BYTES)
    ]
    return {}, events


def _failure(err: BaseException) -> str:
    if isinstance(err, PayloadError | ValueError | RuntimeError | FloatingPointError):
        return str(err)
    logger.error("data-plane op failed: %s: %s", type(err).__name__, err)
    return f"{type(err).__name__}: {err}"


def _is_prompt(prompt: Any) -> bool:
    if isinstance(prompt, str):
        return True
    return (
        isinstance(prompt, list)
        and bool(prompt)
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    )


def _check_peft(peft: Any, where: str) -> None:
    """A sub-job's peft_config is a PEFT LoraConfig-compatible object (the reference engine builds it)."""

    if not isinstance(peft, Mapping):
        raise CortexError(
            400, f"{where} must be an object (a PEFT LoraConfig: peft_type, r, lora_alpha, ...)"
        )
    try:
        lora_config(dict(peft))
    except ValueError as error:
        raise CortexError(400, f"{where}: {error}") from None


# What the sampling sub-job's adapter must share with the training sub-job's (spec 7.3 / 8.3).
PEFT_MATCHED_KEYS = ("r", "lora_alpha", "target_modules")


def _job_peft(pefts: Mapping[str, Any]) -> dict[str, Any] | None:
    """The job's one LoRA adapter config: both sub-jobs enable it, with the same shape (LoRA sync needs
    LoRA on both sub-jobs at creation; the sampler's r, lora_alpha and target_modules must match)."""

    training, sampling = pefts.get("training"), pefts.get("sampling")
    if training is None and sampling is None:
        return None
    if training is None and "training" in pefts:
        raise CortexError(
            501,
            "inference_config.peft_config with a dense training sub-job: the emulator syncs adapters only from a "
            "training sub-job created with the same peft_config",
        )
    if training is not None and "sampling" in pefts and sampling is None:
        raise CortexError(
            400,
            "training_config.peft_config without inference_config.peft_config: LoRA sync needs LoRA enabled on "
            "the sampling sub-job too (give it the same peft_config)",
        )
    if training is not None and sampling is not None:
        differ = [
            key
            for key in PEFT_MATCHED_KEYS
            if training.get(key, SERVER_DEFAULTS.get(key)) != sampling.get(key, SERVER_DEFAULTS.get(key))
        ]
        if differ:
            raise CortexError(
                400,
                f"peft_config {differ} differ between the training and the sampling sub-job: the sampler's "
                "adapter must match the trained one (reuse the same peft_config)",
            )
    return dict(training if training is not None else sampling)


def _sampling_logprobs_mode(inference: Mapping[str, Any], i: int) -> str:
    """vLLM's `logprobs_mode` of the sampling sub-job's engine (`raw_logprobs`, vLLM's default, when unset)."""

    try:
        return vllm_logprobs_mode(inference.get("vllm_config"))
    except HTTPError as err:
        raise CortexError(400, f"sub_job_configs[{i}].inference_config.{err}") from None


def _inference_config(config: Any, i: int) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise CortexError(400, f"sub_job_configs[{i}].inference_config is required (max_seq_len, n_gpus)")
    unknown = sorted(set(config) - INFERENCE_KEYS)
    if unknown:
        raise CortexError(400, f"sub_job_configs[{i}].inference_config has unknown keys {unknown}")
    if config.get("peft_config") is not None:
        _check_peft(config["peft_config"], f"sub_job_configs[{i}].inference_config.peft_config")
    for key in ("max_seq_len", "n_gpus"):
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise CortexError(
                400, f"sub_job_configs[{i}].inference_config.{key}={value!r}: must be an integer > 0"
            )
    return dict(config)


def _training_ds_config(training: Mapping[str, Any]) -> dict[str, Any]:
    """The DeepSpeed-shaped config the engine honours: the sub-job's ds_config, else its typed
    optimizer / gradient_clipping."""
    ds = dict(training.get("ds_config") or {})
    optimizer = training.get("optimizer")
    if isinstance(optimizer, Mapping) and "optimizer" not in ds:
        params = {k: v for k, v in optimizer.items() if k != "name"}
        ds["optimizer"] = {"type": optimizer.get("name", "AdamW"), "params": params}
    if training.get("gradient_clipping") is not None and "gradient_clipping" not in ds:
        ds["gradient_clipping"] = training["gradient_clipping"]
    return ds


async def serve(
    settings: ReferenceEngineSettings,
    host: str,
    port: int,
    *,
    token: str,
    file_root: str | Path | FileRoot | None = None,
    on_ready: Callable[[str, int], None] | None = None,
    stop: asyncio.Event | None = None,
    fidelity: Fidelity | None = None,
    emulator: CortexEmulator | None = None,
    ssl_context: Any = None,
) -> None:
    """Run the emulator until `stop` is set (or SIGINT/SIGTERM when `stop` is None); https with
    `ssl_context` (`cortex_tls`)."""
    server = emulator or CortexEmulator(token, settings, fidelity=fidelity, file_root=file_root)
    await serve_application(
        server.application(), host, port, ssl_context=ssl_context, on_ready=on_ready, stop=stop
    )
