"""ArcticBackend driving the REAL arctic-platform 0.1.4 client (transport extra, CPU) through a
full step sequence against a local recording server that speaks the on-prem HTTP routes with the
DSSST1 codec. The server runs on its own thread and event loop: the client's constructor and
shutdown do blocking HTTP."""

from __future__ import annotations

import asyncio
import json
import pickle
import threading
from typing import Any

import pytest
import torch

pytest.importorskip("arctic_platform.client")
from aiohttp import web
from arctic_platform import wire as dssst1
from arctic_platform.client import ArcticClientConfig, AsyncArcticRLClient, OnPremConfig, TrainingConfig
from arctic_rl_core import dispatch
from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_core.backends.arctic_compat import ArcticServerError, ArcticUnavailableError
from arctic_rl_core.backends.protocol import FinishReason, InferenceState, SamplingParams, TrainingState
from arctic_rl_core.weight_sync import WeightSyncPolicy, prepare_for_training, sync_after_step
from arctic_rl_core.wire import (
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    response_logprobs,
    with_response_logprobs,
)

PAD = 0


class RecordingArcticServer:
    """The on-prem routes the 0.1.4 client uses, recording every request (route, job id, body)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.jobs: dict[int, str] = {}
        self._next_job = 1
        self.tensors_as_lists = False  # answer like a detensorizing worker (plain lists)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="recording-arctic-server", daemon=True)
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> RecordingArcticServer:
        self._thread.start()
        self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_get("/job/{job_id}", self._job)
        app.router.add_post("/{op}", self._op)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = runner.addresses[0][1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    # -- helpers --------------------------------------------------------------------------------
    def ops(self) -> list[str]:
        return [r["op"] for r in self.requests]

    def of(self, op: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["op"] == op]

    @staticmethod
    def _octet(obj: Any) -> web.Response:
        return web.Response(body=dssst1.dumps(obj), content_type="application/octet-stream")

    @staticmethod
    def _error(status: int, detail: str) -> web.Response:
        return web.json_response({"detail": detail}, status=status)

    # -- routes ---------------------------------------------------------------------------------
    async def _job(self, request: web.Request) -> web.Response:
        job_id = int(request.match_info["job_id"])
        self.requests.append({"op": "job", "job_id": job_id, "body": None})
        if job_id not in self.jobs:
            return self._error(404, f"Job {job_id} not found")
        return web.json_response({"job_type": self.jobs[job_id], "status": "RUNNING"})

    async def _op(self, request: web.Request) -> web.Response:
        op = request.match_info["op"]
        raw = await request.read()
        if request.content_type == "application/octet-stream" and raw:
            body = dssst1.loads(raw)
        else:
            body = json.loads(raw) if raw else None
        job_id = int(request.query["job_id"]) if "job_id" in request.query else None
        self.requests.append({"op": op, "job_id": job_id, "body": body})
        handler = getattr(self, "_" + op.replace("-", "_"), None)
        if handler is None:
            return self._error(404, f"no route /{op}")
        if op != "initialize" and job_id not in self.jobs:
            return self._error(404, f"Job {job_id} not found")
        return handler(job_id, body)

    def _initialize(self, _job_id: Any, body: dict) -> web.Response:
        if body["job_type"] == "training" and not body.get("checkpoint_path"):
            return self._error(400, "checkpoint_path is required for training jobs")
        job_id, self._next_job = self._next_job, self._next_job + 1
        self.jobs[job_id] = body["job_type"]
        return web.json_response({"job_id": job_id, "job_type": body["job_type"], "running": True})

    def _destroy(self, job_id: int, body: dict) -> web.Response:
        assert self.jobs.pop(job_id) == body["job_type"]
        return web.json_response({"job_id": job_id})

    def _forward(self, job_id: int, body: dict) -> web.Response:
        batch, meta = body["batch"], body["meta"]
        ids, mask = batch["input_ids"], batch["attention_mask"].bool()
        # shifted like the server: column t holds "log p(token t+1)", here -token/1000; pad value elsewhere
        logprobs = torch.full(ids.shape, float(meta["pad_token_id"]))
        next_ids = torch.roll(ids, shifts=-1, dims=1).float()
        logprobs[mask] = (-next_ids / 1000.0)[mask]
        out = {"logprobs": logprobs}
        if meta.get("calculate_entropy"):
            out["entropy"] = torch.ones(ids.shape)
        if self.tensors_as_lists:
            out = {key: value.tolist() for key, value in out.items()}
        return self._octet({"job_id": job_id, "batch": out, "metrics": {"fwd/rows": [2, 2]}, "avg_loss": 0.0})

    def _forward_backward(self, job_id: int, body: dict) -> web.Response:
        if body["processing"]["loss_fn"] != "verl_grpo":
            return self._error(400, f"unknown loss_fn {body['processing']['loss_fn']!r}: no such processor")
        tokens = int(body["batch"]["response_mask"].sum())
        metrics = {"actor/pg_loss": [0.5, 1.5], "loss.tokens": tokens, "_profile_ms": {"fwd": 3.0}}
        return self._octet({"job_id": job_id, "metrics": metrics, "avg_loss": 0.25})

    def _step(self, job_id: int, body: dict) -> web.Response:
        return web.json_response(
            {"job_id": job_id, "metrics": {"last_lr": [[2e-6], [2e-6]], "grad_norm": [0.5, 0.5]}}
        )

    def _generate(self, job_id: int, body: dict) -> web.Response:
        if not all(isinstance(p, str) for p in body["prompts"]):
            return self._error(422, "prompts must be strings")
        results = []
        for i, prompt in enumerate(body["prompts"]):
            token_ids = [100 + i, 200 + i, 2]
            # integer-keyed maps: the codec turns the keys into strings, as over real HTTP
            logprobs = [
                {t: {"logprob": -0.1 * (k + 1), "rank": 1}, 7: {"logprob": -9.0, "rank": 2}}
                for k, t in enumerate(token_ids)
            ]
            results.append(
                {
                    "text": f"{prompt}!",
                    "token_ids": token_ids,
                    "finish_reason": "stop" if i == 0 else "length",
                    "prompt_len": len(prompt),
                    "generation_len": 3,
                    "prefix_cache_len": 0,
                    "logprobs": logprobs if body["sampling_params"].get("logprobs") == 0 else None,
                }
            )
        return self._octet({"job_id": job_id, "results": results})

    def _operation(self, job_id: int, body: dict) -> web.Response:
        return web.json_response({"job_id": job_id, "status": "ok"})

    def _wake_inference(self, job_id: int, body: Any) -> web.Response:
        return web.json_response({"job_id": job_id})

    _sleep_inference = _sleep_training = _wake_training = _wake_inference
    _sleep_log_prob = _wake_log_prob = _wake_inference

    def _save(self, job_id: int, body: dict) -> web.Response:
        return web.json_response({"job_id": job_id, "path": f"{body['path']}/global_step_{body['step']}"})

    def _load_checkpoint(self, job_id: int, body: dict) -> web.Response:
        return web.json_response({"job_id": job_id, "path": body["path"], "global_step": body["step"]})


def _client_config(
    port: int, *, colocate: bool = True, checkpoint: str | None = "/ckpt"
) -> ArcticClientConfig:
    return ArcticClientConfig(
        model_name="tiny/model",
        seed=7,
        training_gpus=1,
        sampling_gpus=1,
        log_prob_gpus=1,
        job_ready_timeout=10,
        request_timeout=30,
        training=TrainingConfig(checkpoint_path=checkpoint, cuda_ipc=True),
        backend=OnPremConfig(protocol="http", host="127.0.0.1", port=port, colocate=colocate),
    )


SPEC = PayloadSpec(pad_token_id=PAD, max_prompt_len=4, max_response_len=3, rollout_n=2, temperature=0.8)
SAMPLES = [
    RolloutSample([11, 12], [13, 14, 15], advantages=1.0),
    RolloutSample([21, 22, 23], [24], advantages=-1.0),
]


def test_full_step_sequence_through_the_real_client():
    with RecordingArcticServer() as server:
        backend = ArcticBackend.create(_client_config(server.port))
        assert backend.owns_jobs
        # jobs created in the client's order, each polled until RUNNING
        inits = server.of("initialize")
        assert [r["body"]["job_type"] for r in inits] == ["sampling", "log_prob", "training"]
        training_init = inits[2]["body"]
        assert (training_init["checkpoint_path"], training_init["cuda_ipc"], training_init["seed"]) == (
            "/ckpt",
            True,
            7,
        )
        ids = {kind: job for job, kind in server.jobs.items()}

        # generate: text prompts, sampled-token log-probs from string-keyed maps
        out = dispatch.run(
            backend.generate(["hi", "yo"], SamplingParams(max_tokens=8, temperature=0.8, logprobs=True))
        )
        assert out.weights_version == 0
        assert [c.finish_reason for c in out.completions] == [FinishReason.STOP, FinishReason.LENGTH]
        assert out.completions[1].token_ids == (101, 201, 2)
        assert out.completions[0].logprobs == pytest.approx((-0.1, -0.2, -0.3))
        sent = server.of("generate")[0]
        assert sent["job_id"] == ids["sampling"]
        assert sent["body"]["sampling_params"] == {
            "max_tokens": 8, "temperature": 0.8, "top_p": 1.0, "top_k": -1, "stop": [], "seed": None, "logprobs": 0,
        }  # fmt: skip
        with pytest.raises(TypeError, match="text prompts only"):
            dispatch.run(backend.generate([[1, 2]], SamplingParams(max_tokens=4)))
        assert len(server.of("generate")) == 1  # refused before any HTTP

        # colocated: sampler to sleep before training
        policy = WeightSyncPolicy(
            colocated=True, cuda_ipc=True, offload_optimizer_before_sync=True, sleep_training_after="all"
        )
        dispatch.run(prepare_for_training(backend, policy))

        # old log-probs: forward (numpy input is converted to torch before sending)
        forward = build_forward_payload(SAMPLES, SPEC)
        forward.batch["attention_mask"] = forward.batch["attention_mask"].numpy()
        fwd = dispatch.run(backend.forward(forward))
        request = server.of("forward")[0]
        assert request["job_id"] == ids["training"]
        assert isinstance(request["body"]["batch"]["attention_mask"], torch.Tensor)
        assert request["body"]["processing"] == {
            "post": ["apply_temperature", "compute_entropy_and_logprobs"],
            "loss_fn": None,
        }
        assert request["body"]["meta"]["temperature"] == 0.8
        assert fwd.logprobs_B_S.dtype == torch.float32 and fwd.metrics == {"fwd/rows": 2.0}
        old, mask = response_logprobs(fwd.logprobs_B_S, build_forward_payload(SAMPLES, SPEC), SPEC)
        torch.testing.assert_close(old, torch.tensor([[-0.013, -0.014, -0.015], [-0.024, 0.0, 0.0]]))
        assert mask.tolist() == [[True, True, True], [True, False, False]]

        # reference log-probs go to the log_prob job
        dispatch.run(backend.forward(build_forward_payload(SAMPLES, SPEC), reference_model=True))
        assert server.of("forward")[1]["job_id"] == ids["log_prob"]

        # train step
        train = build_train_payload(with_response_logprobs(SAMPLES, old, field="old_logprobs"), SPEC)
        result = dispatch.run(backend.forward_backward(train))
        assert result.loss == 0.25
        assert result.metrics == {"actor/pg_loss": 1.0, "loss.tokens": 4.0, "_profile_ms/fwd": 3.0}
        sent_batch = server.of("forward-backward")[0]["body"]["batch"]
        for key, tensor in train.batch.items():
            assert torch.equal(sent_batch[key], tensor), key
        step = dispatch.run(backend.step())
        assert (step.grad_norm, step.learning_rate, step.step) == (0.5, 2e-6, 1)
        assert server.of("step")[0]["body"] == {}

        # weight sync: the checked colocated sequence, each op on its job
        server.requests.clear()
        version = dispatch.run(sync_after_step(backend, policy))
        assert version == 1
        assert [(r["op"], r["job_id"], r["body"]) for r in server.requests] == [
            ("sleep-training", ids["training"], {"mode": "non_lp"}),
            ("wake-inference", ids["sampling"], ["weights"]),
            (
                "operation",
                ids["training"],
                {
                    "operation_type": "weight-sync",
                    "sub_job_id": ids["training"],
                    "sub_job_type": "training",
                    "payload": {
                        "source_sub_job_id": ids["training"],
                        "target_sub_job_ids": [ids["sampling"]],
                        "cuda_ipc": True,
                        "low_memory": False,
                    },
                },
            ),
            ("wake-inference", ids["sampling"], ["kv_cache"]),
            (
                "operation",
                ids["sampling"],
                {
                    "operation_type": "reset-prefix-cache",
                    "sub_job_type": "sampling",
                    "payload": {"drain": True, "timeout_s": 60.0, "retry_interval_s": 0.1},
                },
            ),
            ("sleep-training", ids["training"], {"mode": "all"}),
        ]
        state = dispatch.run(backend.state())
        assert (state.inference, state.training, state.weights_version) == (
            InferenceState.AWAKE,
            TrainingState.ASLEEP,
            1,
        )
        out = dispatch.run(backend.generate(["hi"], SamplingParams(max_tokens=4)))
        assert out.weights_version == 1 and out.completions[0].logprobs is None
        with pytest.raises(RuntimeError, match="wake_training"):
            dispatch.run(backend.step())  # the trainer is asleep after a colocated sync

        # checkpoints
        saved = dispatch.run(backend.save_checkpoint("/ckpt/run", 1))
        assert saved == "/ckpt/run/global_step_1"
        dispatch.run(backend.load_checkpoint("/ckpt/run", 1))
        assert server.of("load-checkpoint")[0]["body"] == {"path": "/ckpt/run", "step": 1}

        # shutdown: destroys the three jobs it created, off the loop thread; then a no-op
        threads: list[str] = []
        transport = backend._client.transport
        original = transport.shutdown

        def recording_shutdown() -> None:
            threads.append(threading.current_thread().name)
            original()

        transport.shutdown = recording_shutdown
        server.requests.clear()
        dispatch.run(backend.shutdown())
        assert sorted(r["body"]["job_type"] for r in server.of("destroy")) == [
            "log_prob",
            "sampling",
            "training",
        ]
        assert threads and threads[0] != "arctic-rl-dispatch"
        assert server.jobs == {}
        dispatch.run(backend.shutdown())
        assert len(server.of("destroy")) == 3
        with pytest.raises(RuntimeError, match="shut-down"):
            dispatch.run(backend.step())


def test_server_error_bodies_are_surfaced():
    with RecordingArcticServer() as server:
        with pytest.raises(RuntimeError, match="checkpoint_path is required for training jobs"):
            ArcticBackend.create(_client_config(server.port, checkpoint=None))
        assert server.jobs == {}  # the client destroyed the jobs it had already created
        assert [r["body"]["job_type"] for r in server.of("destroy")] == ["sampling", "log_prob"]

        backend = ArcticBackend.create(_client_config(server.port, colocate=False))
        bogus = build_train_payload(
            [
                RolloutSample(s.prompt_ids, s.response_ids, old_logprobs=[-1.0] * len(s.response_ids))
                for s in SAMPLES
            ],
            PayloadSpec(
                pad_token_id=PAD,
                max_prompt_len=4,
                max_response_len=3,
                rollout_n=2,
                temperature=0.8,
                loss_fn="bogus",
            ),
        )
        with pytest.raises(ArcticServerError) as caught:
            dispatch.run(backend.forward_backward(bogus))
        assert caught.value.status == 400 and caught.value.op == "forward-backward"
        assert "unknown loss_fn 'bogus': no such processor" in str(caught.value)
        # payloads are checked before they are sent
        with pytest.raises(ValueError, match=r"forward\(\) needs processing.loss_fn=None"):
            dispatch.run(backend.forward(bogus))
        no_ref = ArcticBackend.create(
            _client_config(server.port, colocate=False).model_copy(update={"log_prob_gpus": 0})
        )
        with pytest.raises(ValueError, match="needs a log-prob job: allocate log_prob_gpus > 0"):
            dispatch.run(no_ref.forward(build_forward_payload(SAMPLES, SPEC), reference_model=True))
        dispatch.run(no_ref.shutdown())
        dispatch.run(backend.shutdown())


def test_handle_pickles_and_reconnects_without_creating_or_destroying_jobs():
    with RecordingArcticServer() as server:
        backend = ArcticBackend.create(_client_config(server.port))
        try:
            dispatch.run(backend.sleep_inference(1))
            creates = len(server.of("initialize"))
            handle = pickle.loads(pickle.dumps(backend.handle()))  # what crosses a Ray task boundary
            other = handle.connect()
            assert not other.owns_jobs
            assert len(server.of("initialize")) == creates  # attached, nothing created
            state = dispatch.run(other.state())
            assert state.inference is InferenceState.ASLEEP and state.colocated
            sent = len(server.requests)
            dispatch.run(other.wake_training())  # the trainer is awake: nothing to send
            assert len(server.requests) == sent
            dispatch.run(other.sleep_training("all"))
            assert server.requests[-1]["op"] == "sleep-training"
            assert server.requests[-1]["job_id"] == backend._client.jobs.training
            dispatch.run(other.shutdown())
            assert server.of("destroy") == []  # the reconnected backend destroys nothing
        finally:
            dispatch.run(backend.shutdown())
        assert len(server.of("destroy")) == 3


def test_transport_only_install_reaches_a_remote_http_server():
    """The client's own gate demands the sft/rl extras for any on-prem transport; this env has only
    [transport], so the plain client cannot even be built, while the backend can."""
    with RecordingArcticServer() as server:
        config = _client_config(server.port)
        with pytest.raises(ImportError, match=r"arctic-platform\[sft\]"):
            AsyncArcticRLClient(config)
        assert server.of("initialize") == []
        backend = ArcticBackend.create(config)
        assert len(server.of("initialize")) == 3
        dispatch.run(backend.shutdown())

        ray = config.model_copy(update={"backend": OnPremConfig(protocol="ray", colocate=True)})
        with pytest.raises(ArcticUnavailableError, match=r"need arctic-platform\[rl\]"):
            ArcticBackend.create(ray)


def test_log_probs_are_tensors_whatever_the_transport_returned():
    with RecordingArcticServer() as server:
        server.tensors_as_lists = True
        backend = ArcticBackend.create(_client_config(server.port, colocate=False))
        try:
            spec = PayloadSpec(
                pad_token_id=PAD,
                max_prompt_len=4,
                max_response_len=3,
                rollout_n=2,
                temperature=0.8,
                calculate_entropy=True,
            )
            payload = build_forward_payload(SAMPLES, spec)
            out = dispatch.run(backend.forward(payload))
            assert isinstance(out.logprobs_B_S, torch.Tensor) and out.logprobs_B_S.dtype == torch.float32
            assert out.entropy_B_S is not None and out.entropy_B_S.shape == (2, 7)
            values, _ = response_logprobs(out.logprobs_B_S, payload, spec)
            torch.testing.assert_close(values[1], torch.tensor([-0.024, 0.0, 0.0]))
        finally:
            dispatch.run(backend.shutdown())


def test_blocking_constructor_is_refused_on_an_event_loop():
    async def inside_loop() -> None:
        ArcticBackend.create(_client_config(1))

    with pytest.raises(RuntimeError, match=r"await ArcticBackend.acreate"):
        asyncio.run(inside_loop())


def test_acreate_runs_the_constructor_off_the_loop():
    with RecordingArcticServer() as server:
        backend = dispatch.run(ArcticBackend.acreate(_client_config(server.port)))
        assert len(server.of("initialize")) == 3
        dispatch.run(backend.shutdown())
        assert server.jobs == {}


def test_save_checkpoint_sends_export_hf_and_save_total_limit():
    with RecordingArcticServer() as server:
        backend = ArcticBackend.create(_client_config(server.port, colocate=False))
        saved = dispatch.run(backend.save_checkpoint("/ckpt/run", 3, export_hf=True, save_total_limit=2))
        body = server.of("save")[-1]["body"]
        assert (body["path"], body["step"], body["export_hf"], body["save_total_limit"]) == (
            "/ckpt/run",
            3,
            True,
            2,
        )
        assert saved == "/ckpt/run/global_step_3"  # the directory the server answered
        dispatch.run(backend.save_checkpoint("/ckpt/run", 4))
        body = server.of("save")[-1]["body"]
        assert (body["export_hf"], body["save_total_limit"]) == (False, None)
        dispatch.run(backend.shutdown())


def test_colocated_reference_engine_is_offloaded_between_reference_forwards():
    """0.1.4 keeps the DeepSpeed log-prob job on the shared GPUs unless told (/sleep-log-prob)."""
    from arctic_platform.client import SamplingConfig

    with RecordingArcticServer() as server:
        config = _client_config(server.port).model_copy(
            update={"sampling": SamplingConfig(log_prob_engine="deepspeed")}
        )
        backend = ArcticBackend.create(config)
        ids = {kind: job for job, kind in server.jobs.items()}
        assert server.ops()[-1] == "sleep-log-prob" and server.requests[-1]["job_id"] == ids["log_prob"]
        server.requests.clear()
        dispatch.run(backend.forward(build_forward_payload(SAMPLES, SPEC), reference_model=True))
        assert [(r["op"], r["job_id"]) for r in server.requests] == [
            ("wake-log-prob", ids["log_prob"]),
            ("forward", ids["log_prob"]),
            ("sleep-log-prob", ids["log_prob"]),
        ]
        server.requests.clear()
        dispatch.run(backend.forward(build_forward_payload(SAMPLES, SPEC)))  # old log-probs: trainer only
        assert server.ops() == ["forward"]
        dispatch.run(backend.shutdown())
    with RecordingArcticServer() as server:  # not colocated: the engine has its own GPUs
        config = _client_config(server.port, colocate=False)
        backend = ArcticBackend.create(
            config.model_copy(update={"sampling": SamplingConfig(log_prob_engine="deepspeed")})
        )
        dispatch.run(backend.forward(build_forward_payload(SAMPLES, SPEC), reference_model=True))
        assert "sleep-log-prob" not in server.ops() and "wake-log-prob" not in server.ops()
        dispatch.run(backend.shutdown())
