"""The Arctic on-prem HTTP API (arctic-platform 0.1.4's routes, bodies and response shapes) in front
of one `ReferenceBackend`, with aiohttp and arctic-platform's DSSST1 codec for binary bodies.

Jobs: `/initialize` creates `sampling`, `log_prob` and `training` jobs that share one engine (built
on the first job, seeded from it); `model_name` is `REFERENCE_MODEL_NAME` or a local model
directory. A training job needs `checkpoint_path` (as on the server) and may carry a `ds_config`
whose optimizer/schedule/clipping/accumulation keys are honoured (`deepspeed_mapping`). A
`log_prob` job with a `ds_config` is a DeepSpeed reference engine (`/forward`, tensor `/log-probs`);
without one it is vLLM-like (`/log-probs` returns prompt log-probs); both use the frozen initial
weights. Every data route takes `?job_id=`. Errors come back as JSON `{"detail": ...}`: 400 bad
input, 401 no or wrong token, 403 a path outside the file root, 404 unknown job, 409 wrong state or
a file in the way, 413 a body over the size limit, 422 unreadable body or a malformed field. A
client mistake in a path, step, limit or body size is answered before any side effect. Where
arctic-platform 0.1.4 answers differently (it ignores unknown keys, answers a bare 500 where a
worker fails, ...) the `Fidelity` profile decides (`fidelity.py`; default: as 0.1.4); the state
guard (409) is separate and on by default.

Files: every caller-chosen path resolves inside one file root given at start (`file_root`); saves
are atomic (`checkpoint`). Authentication: an optional bearer token (`http_auth`), required to bind
a non-loopback address; `/status` shows no paths to a request without it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.checkpoint_manifest import CheckpointDamaged

from arctic_rl_testbed.parity.server_trace import ServerTraceRecorder
from arctic_rl_testbed.reference import http_auth, request_bounds
from arctic_rl_testbed.reference.app_runner import serve_application
from arctic_rl_testbed.reference.checkpoint import CheckpointWriteError, prune_checkpoint_dirs, write_latest
from arctic_rl_testbed.reference.deepspeed_backend import DeepSpeedReferenceBackend, create_reference_backend
from arctic_rl_testbed.reference.deepspeed_mapping import training_overrides
from arctic_rl_testbed.reference.fidelity import (
    GENERATE_KEYS,
    INTERNAL_ERROR_BODY,
    LOAD_KEYS,
    SAVE_KEYS,
    STEP_KEYS,
    WEIGHT_SYNC_KEYS,
    Fidelity,
    FidelityRefusal,
    InternalServerError,
    deepspeed_rejects,
)
from arctic_rl_testbed.reference.file_root import FileRoot, PathRefused
from arctic_rl_testbed.reference.fixed_rollouts import FixedRollouts, FixedRolloutsError
from arctic_rl_testbed.reference.sampler import LOGPROBS_MODES
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings
from arctic_rl_testbed.reference.sleep_state import BackendStateError
from arctic_rl_testbed.reference.tokenizer import stop_token_ids

if TYPE_CHECKING:
    from aiohttp import web

    from arctic_rl_testbed.reference.engine import ReferenceBackend

logger = logging.getLogger(__name__)

REFERENCE_MODEL_NAME = "arctic-rl/reference-tiny"
JOB_TYPES = ("training", "sampling", "log_prob")
MAX_BODY_BYTES = 1 << 30
VLLM_DEFAULT_MAX_TOKENS = 16
# vLLM sampling keys accepted only at their default (no effect), so that clients sending a full dict work.
VLLM_NEUTRAL: dict[str, Any] = {
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_p": 0.0,
    "min_tokens": 0,
    "ignore_eos": False,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "include_stop_str_in_output": False,
    "detokenize": True,
    "prompt_logprobs": None,
    "logit_bias": None,
    "best_of": None,
    "truncate_prompt_tokens": None,
}


class HTTPError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass
class Job:
    job_id: int
    job_type: str
    info: dict[str, Any]
    cuda_ipc: bool = False
    low_memory: bool = False
    deepspeed: bool = False  # log_prob job: DeepSpeed reference engine (else vLLM-like)
    offloaded: bool = False  # log_prob job: /sleep-log-prob moved its DeepSpeed engine to the CPU
    max_model_len: int | None = None  # sampling job: vllm_config.max_model_len
    logprobs_mode: str = "raw_logprobs"  # sampling job: vllm_config.logprobs_mode (vLLM's default if absent)


@dataclass
class ServerState:
    jobs: dict[int, Job] = field(default_factory=dict)
    next_job_id: int = 1
    engine: ReferenceBackend | None = None
    engine_seed: int | None = None
    engine_model: str | None = None


class ReferenceServer:
    """Routes of the on-prem server over one reference engine (`application()` builds the aiohttp app)."""

    def __init__(
        self,
        settings: ReferenceEngineSettings | None = None,
        *,
        request_log: Path | None = None,
        fidelity: Fidelity | None = None,
        file_root: str | Path | FileRoot | None = None,
        token: str | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        parity_trace: Path | None = None,
        fixed_rollouts: FixedRollouts | None = None,
    ) -> None:
        self.fidelity = fidelity or Fidelity()
        self.settings = self.fidelity.engine_settings(settings or ReferenceEngineSettings())
        self.state = ServerState()
        self._lock = asyncio.Lock()
        self.request_log = request_log
        # `--parity-trace`: every training payload as decoded here (arctic_rl_testbed.parity.server_trace)
        self.parity = None
        if parity_trace is not None:
            self.parity = ServerTraceRecorder(parity_trace)
        # `--fixed-rollouts`: /generate serves these completions instead of sampling (fixed_rollouts.py)
        self.fixed_rollouts = fixed_rollouts
        self.files = file_root if isinstance(file_root, FileRoot) else FileRoot(file_root)
        self.token = token or None
        self.max_body_bytes = max_body_bytes

    def application(self) -> web.Application:
        from aiohttp import web

        self.files.root.mkdir(parents=True, exist_ok=True)
        middlewares = [request_bounds.size_limit_middleware(self.max_body_bytes, _too_large)]
        if self.request_log is not None:
            middlewares.append(_request_logger(self.request_log))
        middlewares.append(http_auth.middleware(self.token))
        app = web.Application(client_max_size=self.max_body_bytes, middlewares=middlewares)
        routes: list[tuple[str, str, Callable[[web.Request], Awaitable[Any]]]] = [
            ("GET", "/health", self.health),
            ("GET", "/status", self.status),
            ("GET", "/job/{job_id}", self.job),
            ("POST", "/initialize", self.initialize),
            ("POST", "/destroy", self.destroy),
            ("POST", "/forward-backward", self.forward_backward),
            ("POST", "/forward", self.forward),
            ("POST", "/step", self.step),
            ("POST", "/generate", self.generate),
            ("POST", "/log-probs", self.log_probs),
            ("POST", "/operation", self.operation),
            ("POST", "/weight-sync", self.weight_sync),
            ("POST", "/reset-prefix-cache", self.reset_prefix_cache),
            ("POST", "/sleep-inference", self.sleep_inference),
            ("POST", "/wake-inference", self.wake_inference),
            ("POST", "/sleep-training", self.sleep_training),
            ("POST", "/wake-training", self.wake_training),
            ("POST", "/sleep-log-prob", self.sleep_log_prob),
            ("POST", "/wake-log-prob", self.wake_log_prob),
            ("POST", "/save", self.save),
            ("POST", "/load-checkpoint", self.load_checkpoint),
            ("POST", "/weight-norm", self.weight_norm),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, path, _guarded(handler, self.fidelity, self.max_body_bytes))
        app.on_cleanup.append(lambda _app: self.close())
        return app

    async def close(self) -> None:
        engine, self.state.engine = self.state.engine, None
        if engine is not None:
            await engine.shutdown()
        self.files.remove_temporary()

    # -- jobs -----------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> Any:
        return {"status": "OK"}

    async def status(self, request: web.Request) -> Any:
        engine = None if self.state.engine is None else self.state.engine.settings.model_dump(mode="json")
        jobs = {str(jid): dict(job.info) for jid, job in self.state.jobs.items()}
        if not (self.token and http_auth.authorized(request, self.token)):
            # Paths only to a request that carries the server's token (so never without a token set).
            hidden = "(hidden: /status shows paths only to a request with the server's token)"
            for info in jobs.values():
                for key in ("checkpoint_path", "sync_path"):
                    if info.get(key) is not None:
                        info[key] = hidden
                if info.get("model_name") not in (None, REFERENCE_MODEL_NAME):
                    info["model_name"] = hidden
            if (
                engine is not None
                and isinstance(engine.get("model"), dict)
                and engine["model"].get("model_path")
            ):
                engine["model"]["model_path"] = hidden
        return {"engine": engine, "jobs": jobs}

    async def job(self, request: web.Request) -> Any:
        try:
            job_id = int(request.match_info["job_id"])
        except ValueError:
            raise HTTPError(422, f"job id {request.match_info['job_id']!r} is not an integer") from None
        return self._job(job_id, JOB_TYPES).info

    async def initialize(self, request: web.Request) -> Any:
        body = await _json_body(request, required=True)
        if not isinstance(body, Mapping) or not isinstance(body.get("model_name"), str):
            raise HTTPError(422, "/initialize needs a JSON object with model_name (str) and job_type")
        job_type = body.get("job_type", "training")
        if job_type not in JOB_TYPES:
            raise HTTPError(400, f"Unknown job type: {job_type}")
        for other in self.state.jobs.values():
            if other.job_type == job_type:
                raise HTTPError(409, f"{job_type.capitalize()} job already running")
        self.fidelity.training_config(body)
        seed = body.get("seed")
        seed = 42 if seed is None else seed
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise HTTPError(422, f"seed={seed!r}: must be an integer")
        async with self._lock:
            fresh = self.state.engine is None
            try:
                return await self._create_job(body, job_type, seed)
            except BaseException:
                if fresh:  # a failed first job leaves no engine behind
                    await self.close()
                raise

    async def _create_job(self, body: Mapping[str, Any], job_type: str, seed: int) -> dict[str, Any]:
        engine = await self._engine_for(body["model_name"], seed)
        job_id = self.state.next_job_id
        job = Job(job_id, job_type, {})
        info: dict[str, Any] = {
            "job_id": job_id,
            "job_type": job_type,
            "model_name": body["model_name"],
            "status": "RUNNING",
            "checkpoint_path": None,
            "sync_path": None,
            "sp_size": 1,
        }
        if job_type == "training":
            await self._init_training(engine, body, job, info)
        elif job_type == "sampling":
            job.max_model_len = _max_model_len(body.get("vllm_config"), engine.max_model_len)
            job.logprobs_mode = vllm_logprobs_mode(body.get("vllm_config"))
        else:
            job.deepspeed = body.get("ds_config") is not None
            info["engine"] = "deepspeed" if job.deepspeed else "vllm"
            if job.deepspeed and isinstance(
                engine, DeepSpeedReferenceBackend
            ):  # the 0.1.4 log-prob job itself
                await engine.start_log_prob_job(dict(body))
        job.info = info
        self.state.jobs[job_id] = job
        self.state.next_job_id += 1
        return {"job_id": job_id, "job_type": job_type, "running": True}

    async def _engine_for(self, model_name: str, seed: int) -> ReferenceBackend:

        if self.state.engine is not None:
            if model_name != self.state.engine_model or not self.fidelity.job_seed(
                seed, self.state.engine_seed
            ):
                raise HTTPError(
                    400,
                    f"model_name={model_name!r} seed={seed} but the running jobs share one reference engine with "
                    f"model_name={self.state.engine_model!r} seed={self.state.engine_seed}: use the same values",
                )
            return self.state.engine
        settings = self.settings.model_copy(update={"seed": seed})
        if model_name != REFERENCE_MODEL_NAME:
            if not Path(model_name).is_dir():
                raise HTTPError(
                    400,
                    f"model_name={model_name!r}: the reference server serves {REFERENCE_MODEL_NAME!r} (its configured "
                    "tiny model) or a local model directory; it never downloads",
                )
            model = settings.model.model_copy(update={"model_path": model_name})
            settings = settings.model_copy(update={"model": model})

        engine = await asyncio.to_thread(create_reference_backend, settings)
        self.state.engine, self.state.engine_seed, self.state.engine_model = engine, seed, model_name
        return engine

    async def _init_training(
        self, engine: ReferenceBackend, body: Mapping[str, Any], job: Job, info: dict
    ) -> None:
        if body.get("checkpoint_path") is None:
            raise HTTPError(400, "checkpoint_path is required for training jobs")
        checkpoint_root = self.files.resolve("checkpoint_path", body["checkpoint_path"])
        if isinstance(engine, DeepSpeedReferenceBackend):
            # the 0.1.4 training job itself, from the client's body: its ds_config goes to DeepSpeed as is,
            # and the job's folder and weight-sync file are the ones the 0.1.4 server made
            real = await engine.start_training_job({**body, "checkpoint_path": str(checkpoint_root)})
            info["checkpoint_path"], info["sync_path"] = real["checkpoint_path"], real["sync_path"]
            job.cuda_ipc, job.low_memory = bool(real["cuda_ipc"]), bool(real["low_memory"])
            info["cuda_ipc"], info["low_memory"] = job.cuda_ipc, job.low_memory
            return
        ds_config = body.get("ds_config")
        if ds_config is not None:
            if not isinstance(ds_config, Mapping):
                raise HTTPError(422, "ds_config must be a JSON object")
            rejected = deepspeed_rejects(ds_config)
            if rejected is not None:  # 0.1.4: the worker's DeepSpeed raises while the job starts
                raise InternalServerError(rejected) if self.fidelity.as_0_1_4 else HTTPError(400, rejected)
            overrides = training_overrides(
                ds_config, dp_size=engine.settings.dp_size, defaults=engine.settings.optimizer
            )
            await engine.configure_training(
                optimizer=overrides.optimizer,
                schedule=overrides.schedule,
                grad_accum_steps=overrides.grad_accum_steps,
            )
        directory = checkpoint_root / f"arctic_rl_job_{job.job_id}"
        if directory.exists() and not directory.is_dir():
            raise HTTPError(
                409, f"checkpoint_path={body['checkpoint_path']!r}: {directory} is a file, not a folder"
            )
        directory.mkdir(parents=True, exist_ok=True)
        info["checkpoint_path"] = str(directory)
        info["sync_path"] = str(directory / "weight_sync.pt")
        job.cuda_ipc, job.low_memory = bool(body.get("cuda_ipc", False)), bool(body.get("low_memory", False))
        info["cuda_ipc"], info["low_memory"] = job.cuda_ipc, job.low_memory

    async def destroy(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        await _json_body(request, required=False)
        async with self._lock:
            job = self.state.jobs.pop(job_id, None)
            if job is None:
                raise HTTPError(404, f"Job {job_id} not found")
            if self.parity is not None and job.job_type == "training" and self.state.engine is not None:
                self.parity.finish(self.state.engine)  # the run's last training state
            if not self.state.jobs:
                await self.close()
        return {"job_id": job_id}

    def _job(self, job_id: int, types: tuple[str, ...] | str) -> Job:
        types = (types,) if isinstance(types, str) else types
        job = self.state.jobs.get(job_id)
        if job is None:
            raise HTTPError(404, f"Job {job_id} not found")
        if job.job_type not in types:
            raise HTTPError(400, f"Job {job_id} is not a {', '.join(types)} job")
        assert self.state.engine is not None
        return job

    @property
    def engine(self) -> ReferenceBackend:
        assert self.state.engine is not None
        return self.state.engine

    # -- training ---------------------------------------------------------------------------------
    async def forward_backward(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        self._job(job_id, "training")
        payload = await _wire_body(request)
        if self.request_log is not None:  # which rollouts this step trains, at which trainer version
            request[ROLLOUT_LOG_KEY] = {
                "trainer_version": (await self.engine.state()).trainer_version,
                "rollouts": _trained_rollout_digests(payload),
            }
        received = None if self.parity is None else self.parity.received(payload)
        result = await self.engine.train(payload)
        if self.parity is not None:
            self.parity.forward_backward(received, result.output.loss)
        response: dict[str, Any] = {
            "job_id": job_id,
            "metrics": result.output.metrics,
            "avg_loss": result.output.loss,
        }
        if result.logprobs_B_S is not None:
            response["batch"] = {"logprobs": result.logprobs_B_S}
            if result.entropy_B_S is not None:
                response["batch"]["entropy"] = result.entropy_B_S
        return _Wire(response)

    async def forward(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        if self.fidelity.as_0_1_4 and job_id not in self.state.jobs:
            raise InternalServerError(f"/forward: job {job_id} (0.1.4 reads app.state.jobs[job_id] first)")
        job = self._job(job_id, ("training", "log_prob"))
        if job.job_type == "log_prob" and not job.deepspeed:
            raise HTTPError(
                400, f"Job {job_id} (log_prob) has no DeepSpeed workers: create it with a ds_config"
            )
        if job.offloaded:
            # 0.1.4 runs the forward with the engine's parameters on the CPU: it fails in the worker
            detail = f"Job {job_id} (log_prob) is offloaded (/sleep-log-prob): POST /wake-log-prob first"
            if self.fidelity.state_guard:
                raise HTTPError(409, detail)
            raise InternalServerError(detail)
        payload = await _wire_body(request)
        received = None if self.parity is None else self.parity.received(payload)
        out = await self.engine.forward(payload, reference_model=job.job_type == "log_prob")
        if self.parity is not None:
            self.parity.forward(received, out, reference_model=job.job_type == "log_prob")
        batch: dict[str, Any] = {"logprobs": out.logprobs_B_S}
        if out.entropy_B_S is not None:
            batch["entropy"] = out.entropy_B_S
        # a forward that names a loss runs it without grad and reports it, as the 0.1.4 worker does
        return _Wire(
            {
                "job_id": job_id,
                "batch": batch,
                "metrics": dict(out.metrics),
                "avg_loss": out.metrics.get("loss", 0.0),
            }
        )

    async def step(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        self._job(job_id, "training")
        body = self.fidelity.known_keys(
            "/step", _json_object(await _json_body(request, required=False), "/step"), STEP_KEYS
        )
        out = await self.engine.step(self.fidelity.step_learning_rate(body))
        if self.parity is not None:
            self.parity.step(out)
        metrics = {"last_lr": out.learning_rate, "grad_norm": out.grad_norm}
        return {"job_id": job_id, "metrics": _per_rank(metrics, self.engine.settings.dp_size), "batch": {}}

    async def save(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        job = self._job(job_id, "training")
        body = self.fidelity.known_keys(
            "/save", _json_object(await _json_body(request, required=False), "/save"), SAVE_KEYS
        )
        # Every field is checked before anything is written.
        if body.get("checkpoint_type", "resumable") != "resumable" and not self.fidelity.as_0_1_4:
            raise HTTPError(
                400, f"checkpoint_type={body['checkpoint_type']!r}: the reference saves 'resumable' only"
            )
        root = self._checkpoint_root(job, body.get("path"))
        step = _optional_count(body, "step", "the checkpoint's step (checkpoint-<step>)")
        limit = _optional_count(body, "save_total_limit", "how many checkpoint-N folders to keep (0 = all)")
        export_hf = body.get("export_hf", False)
        if not isinstance(export_hf, bool):
            raise HTTPError(422, f"export_hf={export_hf!r}: must be true or false")
        path = root / f"checkpoint-{step}" if step is not None else root
        for target in (root, path):
            if target.exists() and not target.is_dir():
                raise HTTPError(
                    409,
                    f"/save: {self.files.shown(target)} is a file, not a folder: remove it or save elsewhere",
                )
        extra = {"checkpoint_id": body.get("checkpoint_id"), "stage_info": body.get("stage_info")}
        if isinstance(self.engine, DeepSpeedReferenceBackend):  # 0.1.4's /save: its paths, latest and pruning
            request = {"path": str(root), "step": step, "export_hf": export_hf, "save_total_limit": limit}
            answer = await self.engine.server_save(request, extra)
            return {"job_id": job_id, **answer}
        global_step = await self.engine.save_to(path, export_hf=export_hf, extra=extra)
        if step is not None:
            write_latest(root, step)
        if limit:
            prune_checkpoint_dirs(root, limit)
        hf_path = str(path / "hf") if export_hf else None
        return {"job_id": job_id, "path": str(path), "hf_path": hf_path, "global_step": global_step}

    def _checkpoint_root(self, job: Job, path: Any) -> Path:
        if path is None or path == "":
            return Path(job.info["checkpoint_path"])
        return self.files.resolve("path", path)

    async def load_checkpoint(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        job = self._job(job_id, "training")
        body = self.fidelity.known_keys(
            "/load-checkpoint",
            _json_object(await _json_body(request, required=False), "/load-checkpoint"),
            LOAD_KEYS,
        )
        path = self._checkpoint_root(job, body.get("path"))
        step = _optional_count(body, "step", "the checkpoint's step (checkpoint-<step>)")
        if step is not None:
            path = path / f"checkpoint-{step}"
        elif not body.get("path") and (path / "latest").is_file():
            path = path / f"checkpoint-{int((path / 'latest').read_text().strip())}"
        global_step = await self.engine.load_from(path)
        return {"job_id": job_id, "path": str(path), "global_step": global_step}

    # -- sampling ---------------------------------------------------------------------------------
    async def generate(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        job = self._job(job_id, "sampling")
        body = self.fidelity.known_keys("/generate", await _wire_body(request), GENERATE_KEYS)
        prompts = body.get("prompts")
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise HTTPError(
                422, "prompts must be a list of strings (the on-prem server takes text prompts only)"
            )
        params, top, stop_ids = vllm_sampling(
            body.get("sampling_params"), job.max_model_len or 0, fidelity=self.fidelity
        )
        if self.fixed_rollouts is not None:
            return await self._generate_fixed(request, job, job_id, prompts, params, top, stop_ids)
        sequences, version = await self.engine.sample(
            prompts,
            params,
            top_logprobs=top,
            extra_stop_ids=stop_ids,
            max_model_len=job.max_model_len,
            logprobs_mode=job.logprobs_mode,
        )
        if self.request_log is not None:  # the weights version each rollout was sampled with
            request[ROLLOUT_LOG_KEY] = {
                "weights_version": version,
                "rollouts": [rollout_digest(s.prompt_ids, s.token_ids) for s in sequences],
            }
        results = []
        for seq in sequences:
            result: dict[str, Any] = {
                "text": seq.text,
                "token_ids": list(seq.token_ids),
                "finish_reason": seq.finish_reason.value,
                "prompt_len": len(seq.prompt_ids),
                "generation_len": len(seq.token_ids),
                "prefix_cache_len": 0,
            }
            result = self.fidelity.generate_result(result, version)
            if top is not None:
                result["logprobs"] = [_logprob_entries(entries) for entries in seq.top_logprobs]
            results.append(result)
        return _Wire({"job_id": job_id, "results": results})

    async def _generate_fixed(
        self,
        request: web.Request,
        job: Job,
        job_id: int,
        prompts: list[str],
        params: SamplingParams,
        top: int | None,
        stop_ids: frozenset[int],
    ) -> Any:
        """/generate from `--fixed-rollouts` (fixed_rollouts.py): the same checks and result shape,
        the completions read from the file."""
        assert self.fixed_rollouts is not None
        if top:
            raise HTTPError(
                400,
                f"sampling_params.logprobs={top}: --fixed-rollouts reports the served token's log-prob only "
                "(logprobs=0), not top-k alternatives",
            )

        version = await self.engine.generate_version()  # the state guard's generate checks
        tokenizer = self.engine.tokenizer
        try:
            self.fixed_rollouts.check_vocabulary(self.engine.vocab_size)
            served = self.fixed_rollouts.serve(
                prompts,
                max_tokens=params.max_tokens,
                stop_ids=stop_token_ids(tokenizer) | stop_ids,
                decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
                stop=params.stop,
            )
        except FixedRolloutsError as err:
            raise HTTPError(400, str(err)) from None
        prompt_lens = [len(tokenizer.encode(p, add_special_tokens=True)) for p in prompts]
        scores = None
        if top is not None:  # the served tokens' log-probs under the sampler's current weights
            scores = await self.engine.score_completions(
                prompts, [s.token_ids for s in served], params, logprobs_mode=job.logprobs_mode
            )
        if self.request_log is not None:
            request[ROLLOUT_LOG_KEY] = {
                "weights_version": version,
                "rollouts": [
                    rollout_digest(tokenizer.encode(p, add_special_tokens=True), s.token_ids)
                    for p, s in zip(prompts, served, strict=True)
                ],
                "fixed_rollouts": True,
            }
        results = []
        for i, (completion, prompt_len) in enumerate(zip(served, prompt_lens, strict=True)):
            result: dict[str, Any] = {
                "text": completion.text,
                "token_ids": list(completion.token_ids),
                "finish_reason": completion.finish_reason,
                "prompt_len": prompt_len,
                "generation_len": len(completion.token_ids),
                "prefix_cache_len": 0,
            }
            if scores is not None:
                result["logprobs"] = [
                    {token: {"logprob": lp, "rank": rank}}
                    for token, (lp, rank) in zip(completion.token_ids, scores[i], strict=True)
                ]
            results.append(self.fidelity.generate_result(result, version))
        return _Wire({"job_id": job_id, "results": results})

    async def log_probs(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        job = self._job(job_id, "log_prob")
        body = await _json_body(request, required=True)
        prompts, completions = body.get("prompts"), body.get("completions")
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise HTTPError(422, "prompts must be a list of strings")
        if completions is not None and (
            not isinstance(completions, list) or len(completions) != len(prompts)
        ):
            raise HTTPError(422, "completions must be a list of strings, one per prompt")
        texts = (
            [p + c for p, c in zip(prompts, completions, strict=True)] if completions is not None else prompts
        )
        if job.deepspeed:
            results: Any = await self.engine.reference_token_logprobs(texts)
        else:
            top_k = int(body.get("top_k", 1))
            results = []
            for ids, entries, next_token in await self.engine.reference_prompt_logprobs(texts, top_k):
                results.append(
                    {
                        "text": self.engine.tokenizer.decode([next_token], skip_special_tokens=True),
                        "token_ids": [next_token],
                        "finish_reason": "length",
                        "prompt_len": len(ids),
                        "generation_len": 1,
                        "prefix_cache_len": 0,
                        "prompt_logprobs": [None if e is None else _logprob_entries(e) for e in entries],
                    }
                )
        return _Wire({"job_id": job_id, "results": results})

    # -- weight sync, caches, sleep/wake ------------------------------------------------------------
    async def operation(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        body = await _json_body(request, required=True)
        if not isinstance(body, Mapping) or "operation_type" not in body:
            raise HTTPError(422, "/operation needs a JSON object with operation_type")
        payload = body.get("payload") or {}
        kind = body["operation_type"]
        if kind == "weight-sync":
            return await self._weight_sync(payload)
        if kind == "reset-prefix-cache":
            return await self._reset_prefix_cache(job_id)
        if kind == "sleep-inference":
            return await self._sleep_inference(job_id, payload.get("level", 1))
        if kind == "wake-inference":
            return await self._wake_inference(job_id, payload.get("tags"))
        raise HTTPError(400, f"unknown operation_type {kind!r}")

    async def weight_sync(self, request: web.Request) -> Any:
        _job_id(request)
        return await self._weight_sync(await _json_body(request, required=True))

    async def _weight_sync(self, payload: Mapping[str, Any]) -> Any:
        """The source training job's weights into the target sampling job (the response names the source)."""
        payload = self.fidelity.known_keys("weight-sync payload", payload, WEIGHT_SYNC_KEYS)
        try:
            source, targets = int(payload["source_sub_job_id"]), list(payload["target_sub_job_ids"])
        except (KeyError, TypeError, ValueError):
            raise HTTPError(422, "weight-sync needs source_sub_job_id and target_sub_job_ids") from None
        training = self._job(source, "training")
        for target in targets:
            self._job(int(target), "sampling")
        cuda_ipc = payload.get("cuda_ipc")
        low_memory = payload.get("low_memory")
        report = await self.engine.sync_weights_detailed(
            cuda_ipc=training.cuda_ipc if cuda_ipc is None else bool(cuda_ipc),
            low_memory=training.low_memory if low_memory is None else bool(low_memory),
        )
        return {
            "job_id": source,
            "status": "ok",
            "weights_version": report.weights_version,
            "num_buckets": report.transfer.num_buckets,
            "num_bytes": report.transfer.num_bytes,
        }

    async def reset_prefix_cache(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        await _json_body(request, required=False)
        return await self._reset_prefix_cache(job_id)

    async def _reset_prefix_cache(self, job_id: int) -> Any:
        self._job(job_id, "sampling")
        await self.engine.reset_prefix_cache()
        return {"job_id": job_id, "sampling": {"status": "ok"}}

    async def sleep_inference(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        body = await _json_body(request, required=False)
        level = request.query.get("level", 1)
        if isinstance(body, Mapping) and body.get("level") is not None:
            level = body["level"]
        return await self._sleep_inference(job_id, level)

    async def _sleep_inference(self, job_id: int, level: Any) -> Any:
        self._job(job_id, "sampling")
        try:
            level = int(level)
        except (TypeError, ValueError):
            raise HTTPError(422, f"level={level!r}: must be 1 or 2") from None
        await self.engine.sleep_inference(level)
        return {"job_id": job_id, "sampling": {"state": "asleep", "level": level}}

    async def wake_inference(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        body = await _json_body(request, required=False)
        tags = body.get("tags") if isinstance(body, Mapping) else body
        return await self._wake_inference(job_id, tags)

    async def _wake_inference(self, job_id: int, tags: Any) -> Any:
        self._job(job_id, "sampling")
        if tags is not None and (not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)):
            raise HTTPError(422, f"tags={tags!r}: send a list of 'weights' / 'kv_cache', or no body")
        await self.engine.wake_inference(tags)
        state = await self.engine.state()
        return {"job_id": job_id, "sampling": {"state": state.inference.value, "tags": tags}}

    async def sleep_training(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        self._job(job_id, "training")
        body = await _json_body(request, required=False)
        mode = request.query.get("mode", "all")
        if isinstance(body, Mapping) and body.get("mode") is not None:
            mode = str(body["mode"])
        await self.engine.sleep_training(mode)
        return {"job_id": job_id, "workers": [{"state": mode}] * self.engine.settings.dp_size}

    async def wake_training(self, request: web.Request) -> Any:
        job_id = _job_id(request)
        self._job(job_id, "training")
        await _json_body(request, required=False)
        await self.engine.wake_training()
        return {"job_id": job_id, "workers": [{"state": "awake"}] * self.engine.settings.dp_size}

    async def sleep_log_prob(self, request: web.Request) -> Any:
        """0.1.4: offload the DeepSpeed log-prob engine to the CPU (a no-op without DeepSpeed workers)."""
        return await self._log_prob_residency(request, offloaded=True)

    async def wake_log_prob(self, request: web.Request) -> Any:
        return await self._log_prob_residency(request, offloaded=False)

    async def _log_prob_residency(self, request: web.Request, *, offloaded: bool) -> Any:
        job_id = _job_id(request)
        job = self._job(job_id, "log_prob")
        await _json_body(request, required=False)
        if not job.deepspeed:
            return {"job_id": job_id, "workers": []}
        if isinstance(self.engine, DeepSpeedReferenceBackend):  # 0.1.4's offload_to_cpu / backload_to_gpu
            workers = await self.engine.set_log_prob_residency(offloaded=offloaded)
            job.offloaded = offloaded
            return {"job_id": job_id, "workers": workers}
        job.offloaded = offloaded
        state = "offloaded" if offloaded else "on_gpu"
        return {"job_id": job_id, "workers": [{"state": state}] * self.engine.settings.dp_size}

    async def weight_norm(self, request: web.Request) -> Any:
        body = _json_object(await _json_body(request, required=True), "/weight-norm")
        ids = {}
        for key in ("training_job_id", "sampling_job_id"):
            value = body.get(key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise HTTPError(
                    422, f"/weight-norm {key}={value!r}: send {{'training_job_id': N, 'sampling_job_id': M}}"
                )
            ids[key] = value
        self._job(ids["training_job_id"], "training")
        self._job(ids["sampling_job_id"], "sampling")
        trainer, sampler = self.engine.trainer_parameters(), self.engine.sampler_parameters()
        return {
            "training_norm": math.sqrt(sum(float((p.double() ** 2).sum()) for p in trainer.values())),
            "sampling_norm": math.sqrt(sum(float((p.double() ** 2).sum()) for p in sampler.values())),
            "training_num_params": sum(p.numel() for p in trainer.values()),
            "sampling_num_params": sum(p.numel() for p in sampler.values()),
        }


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Wire:
    """A response body to send as DSSST1 octet-stream."""

    obj: Any


def _guarded(
    handler: Callable[[web.Request], Awaitable[Any]],
    fidelity: Fidelity | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def route(request: web.Request) -> web.Response:
        from aiohttp import web
        from arctic_platform import wire

        try:
            result = await handler(request)
        except (FidelityRefusal, InternalServerError) as err:
            return _fidelity_response(err)
        except (HTTPError, PathRefused) as err:
            return web.json_response({"detail": err.detail}, status=err.status)
        except web.HTTPRequestEntityTooLarge:
            detail = (
                f"{request.path}: the body is larger than the server's limit of {max_body_bytes} bytes; send "
                "less per request (fewer or shorter sequences)"
            )
            return web.json_response({"detail": detail}, status=413)
        except web.HTTPException as err:
            return web.json_response({"detail": f"{request.path}: {err.reason}"}, status=err.status)
        except FloatingPointError as err:  # a non-finite gradient norm: the payload's values
            return web.json_response({"detail": str(err)}, status=422)
        except CheckpointWriteError as err:  # a full disk: nothing of the save was kept (a guard 0.1.4 lacks)
            logger.warning("%s %s: %s", request.method, request.path, err)
            return web.json_response({"detail": str(err)}, status=507)
        except CheckpointDamaged as err:  # named file, before anything was loaded (a guard 0.1.4 lacks)
            return web.json_response({"detail": str(err)}, status=409)
        except BackendStateError as err:
            return web.json_response({"detail": str(err)}, status=409)
        except (FileNotFoundError, ValueError, RuntimeError) as err:
            internal = None if fidelity is None else fidelity.internal_error(err)
            if internal is not None:  # 0.1.4: the worker raised and nothing handles it
                logger.info("%s %s: %s (answered 500 as 0.1.4)", request.method, request.path, err)
                return web.Response(status=internal[0], text=internal[1])
            status = 404 if isinstance(err, FileNotFoundError) else 400
            return web.json_response({"detail": str(err)}, status=status)
        except Exception as err:  # report, never kill the server
            logger.exception("%s %s failed", request.method, request.path)
            return web.json_response({"detail": f"{type(err).__name__}: {err}"}, status=500)
        if isinstance(result, _Wire):
            return web.Response(body=wire.dumps(result.obj), content_type="application/octet-stream")
        return web.json_response(result)

    return route


def _fidelity_response(err: FidelityRefusal | InternalServerError) -> web.Response:
    """The strict profile's refusal (JSON detail), or 0.1.4's bare 500 where its worker fails."""
    from aiohttp import web

    if isinstance(err, FidelityRefusal):
        return web.json_response({"detail": err.detail}, status=err.status)
    logger.info("answered 500 as arctic-platform 0.1.4 does: %s", err)
    return web.Response(status=500, text=INTERNAL_ERROR_BODY)


def _too_large(error: request_bounds.BodyTooLarge) -> web.Response:
    from aiohttp import web

    return web.json_response({"detail": str(error)}, status=413)


def _job_id(request: web.Request) -> int:
    raw = request.query.get("job_id")
    if raw is None:
        raise HTTPError(422, f"{request.path} needs the job_id query parameter")
    try:
        return int(raw)
    except ValueError:
        raise HTTPError(422, f"job_id={raw!r} is not an integer") from None


async def _json_body(request: web.Request, *, required: bool) -> Any:
    raw = await request.read()
    if not raw:
        if required:
            raise HTTPError(422, f"{request.path} needs a JSON body")
        return None
    try:
        return request_bounds.parse_json(raw, what=request.path)
    except request_bounds.JsonTooDeep as err:
        raise HTTPError(400, str(err)) from None
    except ValueError:
        raise HTTPError(422, f"{request.path}: the body is not JSON") from None


async def _wire_body(request: web.Request) -> Any:
    from arctic_platform import wire

    raw = await request.read()
    try:
        body = wire.loads(raw)
    except Exception as err:
        raise HTTPError(422, f"{request.path}: the body is not a DSSST1 frame ({err})") from None
    if not isinstance(body, dict):
        raise HTTPError(422, f"{request.path}: the body must decode to a dict")
    return body


def vllm_sampling(
    params: Mapping[str, Any] | None, max_model_len: int, *, fidelity: Fidelity | None = None
) -> tuple[SamplingParams, int | None, frozenset[int]]:
    """A vLLM `sampling_params` dict -> (SamplingParams, logprobs k or None, extra stop token ids)."""
    fidelity = fidelity or Fidelity()
    params = dict(params or {})
    known = {"n", "max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "logprobs", "stop_token_ids"}
    for key, value in params.items():
        if key in known:
            continue
        if key in VLLM_NEUTRAL:
            if value != VLLM_NEUTRAL[key] and not (key == "best_of" and value == 1):
                raise HTTPError(
                    400, f"sampling_params.{key}={value!r} is not supported by the reference sampler"
                )
            continue
        fidelity.unknown_sampling_key(key)
    fidelity.sampling_n(params.get("n"))
    _check_sampling_ranges(params)
    max_tokens = params.get("max_tokens", VLLM_DEFAULT_MAX_TOKENS)
    if max_tokens is None:
        max_tokens = max(1, max_model_len)
    temperature = float(params.get("temperature", 1.0) if params.get("temperature") is not None else 1.0)
    top_k = params.get("top_k")
    stop = params.get("stop")
    stop = () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)
    logprobs = params.get("logprobs")
    try:
        sampling = SamplingParams(
            max_tokens=int(max_tokens),
            temperature=0.0 if temperature < 1e-5 else temperature,
            top_p=1.0 if params.get("top_p") is None else float(params["top_p"]),
            top_k=-1 if top_k in (None, 0, -1) else int(top_k),
            stop=stop,
            seed=params.get("seed"),
            logprobs=logprobs is not None,
        )
    except ValueError as err:
        raise HTTPError(400, f"sampling_params: {err}") from None
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0):
        raise HTTPError(400, f"sampling_params.logprobs={logprobs!r}: must be an integer >= 0")
    stop_ids = frozenset(int(t) for t in (params.get("stop_token_ids") or ()))
    return sampling, logprobs, stop_ids


# vLLM's ranges of the numeric sampling fields: key -> (integer?, in range?, the range in words)
_SAMPLING_RANGES: dict[str, tuple[bool, Callable[[float], bool], str]] = {
    "temperature": (False, lambda v: v >= 0, ">= 0 (0 is greedy)"),
    "top_p": (False, lambda v: 0 < v <= 1, "in (0, 1]"),
    "max_tokens": (True, lambda v: v >= 1, ">= 1"),
    "top_k": (True, lambda v: v >= -1, ">= 1, or -1 or 0 for no limit"),
    "seed": (True, lambda v: True, "any"),
}


def _check_sampling_ranges(params: Mapping[str, Any]) -> None:
    """400 naming the field for a numeric sampling value of the wrong type, not finite (NaN, Infinity)
    or out of vLLM's range (a negative temperature; 0.1.4's vLLM would fail inside the server with a
    bare 500)."""
    for key, (integer, in_range, words) in _SAMPLING_RANGES.items():
        value = params.get(key)
        if value is None:
            continue
        kind = "an integer" if integer else "a finite number"
        wrong_type = isinstance(value, bool) or not isinstance(value, int if integer else (int, float))
        if wrong_type or not math.isfinite(value) or not in_range(value):
            raise HTTPError(400, f"sampling_params.{key}={value!r}: must be {kind} {words}")


def _logprob_entries(entries: Mapping[int, tuple[float, int]]) -> dict[int, dict[str, float | int]]:
    return {token: {"logprob": lp, "rank": rank} for token, (lp, rank) in entries.items()}


def vllm_logprobs_mode(vllm_config: Any) -> str:
    """The sampling engine's vLLM `logprobs_mode` (vLLM's default `raw_logprobs` when not sent)."""

    mode = vllm_config.get("logprobs_mode") if isinstance(vllm_config, Mapping) else None
    if mode is None:
        return "raw_logprobs"
    if mode not in LOGPROBS_MODES:
        raise HTTPError(
            400,
            f"vllm_config.logprobs_mode={mode!r}: the reference engine honours {', '.join(LOGPROBS_MODES)}",
        )
    return str(mode)


def _max_model_len(vllm_config: Any, model_limit: int) -> int | None:
    if not isinstance(vllm_config, Mapping) or vllm_config.get("max_model_len") is None:
        return None
    value = int(vllm_config["max_model_len"])
    if value > model_limit:
        raise HTTPError(
            400,
            f"vllm_config.max_model_len={value} exceeds the reference model's max_position_embeddings={model_limit}",
        )
    return value


def _per_rank(metrics: dict[str, float], dp_size: int) -> dict[str, Any]:
    """The server merges per-rank step metrics: scalars with one rank, lists with several."""
    return metrics if dp_size == 1 else {k: [v] * dp_size for k, v in metrics.items()}


def _json_object(body: Any, route: str) -> dict[str, Any]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise HTTPError(422, f"{route}: the body must be a JSON object, got {type(body).__name__}")
    return body


def _optional_count(body: Mapping[str, Any], key: str, meaning: str) -> int | None:
    """A field that is absent/null or a whole number >= 0 (not true/false, not 1.5, not Infinity)."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HTTPError(422, f"{key}={value!r}: must be a whole number >= 0 ({meaning}), or null")
    return value


ROLLOUT_LOG_KEY = "arctic_rollout_log"  # what a handler adds to its request's log line


def rollout_digest(prompt_ids: Any, response_ids: Any) -> str:
    """A short name for one rollout (its prompt and response token ids), the same at /generate and
    at /forward-backward, so a request log tells which sampled rollout a training step trained."""

    tokens = [int(t) for t in prompt_ids] + [-1] + [int(t) for t in response_ids]
    return hashlib.sha1(json.dumps(tokens).encode()).hexdigest()[:16]


def _trained_rollout_digests(payload: Any) -> list[str]:
    """`rollout_digest` of every row of a /forward-backward body (micro-batch list or one batch):
    prompt = the real tokens of the first `prompts` width columns, response = the rest."""
    batches = payload.get("batch") if isinstance(payload, Mapping) else None
    out: list[str] = []
    for batch in batches if isinstance(batches, list) else [batches]:
        if not isinstance(batch, Mapping) or "input_ids" not in batch or "prompts" not in batch:
            continue
        width = int(batch["prompts"].shape[1])
        ids, mask = batch["input_ids"], batch["attention_mask"].bool()
        for row in range(ids.shape[0]):
            prompt = ids[row, :width][mask[row, :width]].tolist()
            response = ids[row, width:][mask[row, width:]].tolist()
            out.append(rollout_digest(prompt, response))
    return out


def _request_logger(path: Path) -> Any:
    """aiohttp middleware: one JSON line per request to `path` (route, job id, the control fields of
    JSON bodies: operation type, level, tags, mode, step), in the order the server received them, from
    whichever client sent them; /generate adds the weights version it sampled with and a digest of
    each rollout, /forward-backward the trainer version and the digests of the rollouts it trains.
    Tests read it to check the sequence a multi-process run produced."""
    from aiohttp import web

    @web.middleware
    async def log_request(request: web.Request, handler: Any) -> Any:
        entry: dict[str, Any] = {"route": request.path, "job_id": request.query.get("job_id")}
        if request.content_type != "application/octet-stream" and request.can_read_body:
            raw = await request.read()  # aiohttp keeps the body for the handler
            try:
                body = request_bounds.parse_json(raw, what=request.path) if raw else None
            except ValueError:  # the handler answers it
                body = None
            entry.update(_control_fields(body))
        response = await handler(request)
        entry.update(request.get(ROLLOUT_LOG_KEY) or {})
        entry["status"] = response.status
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")
        return response

    return log_request


def _control_fields(body: Any) -> dict[str, Any]:
    if isinstance(body, list):
        return {"tags": body}
    if not isinstance(body, Mapping):
        return {}
    fields = {
        k: body[k] for k in ("operation_type", "level", "tags", "mode", "step", "job_type") if k in body
    }
    payload = body.get("payload")
    if isinstance(payload, Mapping):
        fields.update({k: payload[k] for k in ("level", "tags") if k in payload})
    return fields


async def serve(
    settings: ReferenceEngineSettings,
    host: str,
    port: int,
    *,
    file_root: str | Path | FileRoot | None = None,
    token: str | None = None,
    on_ready: Callable[[str, int], None] | None = None,
    stop: asyncio.Event | None = None,
    request_log: Path | None = None,
    fidelity: Fidelity | None = None,
    parity_trace: Path | None = None,
    fixed_rollouts: FixedRollouts | None = None,
) -> None:
    """Run the server until `stop` is set (or SIGINT/SIGTERM when `stop` is None). A non-loopback
    `host` needs a `token` (`http_auth.BindRefused` otherwise)."""
    http_auth.check_bind(host, token)
    server = ReferenceServer(
        settings,
        request_log=request_log,
        fidelity=fidelity,
        file_root=file_root,
        token=token,
        parity_trace=parity_trace,
        fixed_rollouts=fixed_rollouts,
    )
    await serve_application(server.application(), host, port, on_ready=on_ready, stop=stop)
