"""The REAL arctic-platform 0.1.4 `CortexTransport` drives the Cortex emulator
(`arctic_rl_testbed.reference.cortex_server`) on loopback: every op the transport has
(create/wait/sub-jobs, forward-backward, generate, step, save, operation weight-sync and
reset-prefix-cache, cancel), the checkpoints list and `/load` through the transport's own `_send`,
the PAT on every call, chunk groups as the idempotency key, JSON error bodies.

0.1.4's transport sends the PAT only on its `host` path (https); with `base_url` it sends none, so
here (plain http on loopback) the test adds the two PAT headers to the transport's session, as a
caller pointing `base_url` at the emulator must.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
import requests
import torch

pytest.importorskip("tenacity")

from arctic_platform import wire
from arctic_platform.client import ArcticClientConfig, CortexConfig, TrainingConfig
from arctic_platform.client import requests as builders
from arctic_platform.client.transports import cortex as cortex_transport
from arctic_platform.client.transports.cortex import CortexTransport
from arctic_rl_testbed.reference.cortex_server import CortexEmulator
from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

PAT = "pat-test-3f9c1d7e5b"  # what the emulator was started with; must never reach a log line
DB, SCHEMA = "ARCTIC_DB", "RL"
LR = 1e-2


class _Server:
    def __init__(self, emulator: CortexEmulator, ssl_context=None) -> None:
        from aiohttp import web

        self.emulator = emulator
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def start() -> int:
            self.runner = web.AppRunner(emulator.application(), access_log=None)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ssl_context)
            await site.start()
            return self.runner.addresses[0][1]

        self.port = asyncio.run_coroutine_threadsafe(start(), self.loop).result(60)
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{self.port}"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = ReferenceEngineSettings(num_threads=1, colocated=False)
    emulator = CortexEmulator(PAT, settings, file_root=tmp_path_factory.mktemp("cortex-files"))
    srv = _Server(emulator)
    yield srv
    srv.stop()


def _config(url: str, *, retries: int = 1, sampling: bool = True) -> ArcticClientConfig:
    return ArcticClientConfig(
        model_name=REFERENCE_MODEL_NAME,
        seed=7,
        max_seq_len=64,
        training_gpus=1,
        sampling_gpus=1 if sampling else 0,
        job_ready_timeout=60,
        request_timeout=60,
        training=TrainingConfig(ds_config={"optimizer": {"type": "AdamW", "params": {"lr": LR}}}),
        backend=CortexConfig.model_validate(
            {"base_url": url, "database": DB, "schema": SCHEMA, "max_retries": retries}
        ),
    )


def _transport(url: str, *, token: str | None = PAT, **kwargs) -> CortexTransport:
    transport = CortexTransport(_config(url, **kwargs))
    transport.poll_interval = 0.05
    if token is not None:
        transport.session.headers.update(
            {
                "Authorization": f"Bearer {token}",
                "X-Snowflake-Authorization-Token-Type": "PROGRAMMATIC_ACCESS_TOKEN",
            }
        )
    return transport


def _cortex_body(*, old: torch.Tensor | None = None, eps_high: float | None = None, adv: float = 1.0) -> dict:
    """Two left-aligned rows: prompt then response, loss_mask/advantages on the predictions of the
    response tokens (shifted: index i trains token i+1)."""
    g = torch.Generator().manual_seed(3)
    lengths, prompts = (9, 6), (4, 3)
    width = max(lengths)
    ids = torch.zeros((2, width), dtype=torch.long)
    attention = torch.zeros((2, width), dtype=torch.long)
    mask = torch.zeros((2, width), dtype=torch.bool)
    for b, (n, p) in enumerate(zip(lengths, prompts, strict=True)):
        ids[b, :n] = torch.randint(10, 200, (n,), generator=g)
        attention[b, :n] = 1
        mask[b, p - 1 : n - 1] = True
    advantages = torch.where(mask, torch.full((2, width), adv), torch.zeros(2, width))
    context = {"input_ids": ids, "advantages": advantages, "loss_mask": mask}
    if old is not None:
        context["old_log_probs_shifted"] = old
    config = {"eps_clip": 0.2, "loss_agg_mode": "token-mean", "entropy_coeff": 0.0}
    if eps_high is not None:
        config["eps_clip_higher"] = eps_high
    return {
        "args": (),
        "kwargs": {"input_ids": ids, "attention_mask": attention},
        "context": context,
        "processing": {"post": ["compute_logprobs"], "loss_fn": "grpo", "config": config},
    }


@pytest.fixture(scope="module")
def job(server):
    transport = _transport(server.url)
    jobs = transport.initialize()
    yield transport, jobs
    transport.shutdown()


def test_create_wait_and_sub_job_ids(server, job):
    transport, jobs = job
    assert transport.job_id in server.emulator.jobs
    assert jobs.training == f"{transport.job_id}:training:0"
    assert jobs.sampling == f"{transport.job_id}:sampling:0"
    described = transport._job()
    assert described["status"] == "running"
    assert {s["job_type"] for s in described["sub_jobs"]} == {"training", "sampling"}
    assert any(j["job_id"] == transport.job_id for j in transport.list_jobs())


def test_every_transport_op_end_to_end(server, job):
    transport, jobs = job
    params = {"max_tokens": 4, "temperature": 0.0, "logprobs": 0}
    results = transport.call(builders.generate_request(jobs, ["What is 2 + 3?", "SELECT"], params))
    assert len(results["results"]) == 2
    by_ids = transport.call(builders.generate_request(jobs, [[11, 12, 13]], params))["results"]
    assert len(by_ids) == 1 and isinstance(by_ids[0]["token_ids"][0], int)
    first = results["results"][0]
    assert set(first) == {"text", "token_ids", "finish_reason", "logprobs"}
    assert 1 <= len(first["token_ids"]) <= 4 and len(first["logprobs"]) == len(first["token_ids"])

    out = transport.call(builders.fwd_bwd_request(jobs, _cortex_body()))
    # Cortex answers post_process_outputs (mapped to batch by the client), never batch itself
    assert out["batch"] == {} and "post_process_outputs" not in out
    # ratio 1 (pi_old = pi_new.detach()), token-mean over 8 trained tokens of advantage 1: loss -1
    assert out["avg_loss"] == pytest.approx(-1.0, abs=1e-5)
    step = transport.call(builders.step_request(jobs))
    assert set(step) == {"global_steps", "last_lr"} and step["global_steps"] == 1
    assert step["last_lr"] == pytest.approx(LR)

    synced = transport.call(builders.sync_weights_request(jobs))
    assert synced["source_sub_job_id"] == jobs.training and synced["target_sub_job_ids"] == [jobs.sampling]
    assert synced["num_bytes"] > 0
    reset = transport.call(builders.reset_prefix_cache_request(jobs))  # inline operation: no request_id
    assert reset["status"] == "ok"
    for noop in ("sleep-inference", "wake-inference", "sleep-training", "wake-training"):
        assert transport.call(builders.wake_training_request(jobs).__class__(noop, jobs.training, {})) == {}

    saved = transport.call(builders.save_checkpoint_request(jobs))
    assert saved["checkpoint_id"] == "global_step1" and saved["checkpoint_tag"] == "global_step1"
    # the 0.1.4 client has no list-checkpoints or load op: its own authenticated, retrying _send reaches them
    listed = transport._send("GET", f"{transport._prefix}/{transport.job_id}/checkpoints")["checkpoints"]
    assert [(c["checkpoint_id"], c["global_steps"], c["checkpoint_type"]) for c in listed] == [
        ("global_step1", 1, "resumable")
    ]
    assert listed[0]["avg_loss"] == pytest.approx(out["avg_loss"])

    transport.call(builders.fwd_bwd_request(jobs, _cortex_body(adv=-1.0)))
    assert transport.call(builders.step_request(jobs))["global_steps"] == 2
    submitted = transport._send(
        "POST", f"{transport._prefix}/{transport.job_id}/load", json={"checkpoint_id": "global_step1"}
    )
    loaded = transport._poll(submitted["request_id"])
    assert loaded == {"checkpoint_id": "global_step1", "global_steps": 1}
    assert transport.call(builders.step_request(jobs))["global_steps"] == 2  # step 1 restored, then one more

    with pytest.raises(NotImplementedError):
        transport.call(builders.fwd_no_grad_request(jobs, {}))
    with pytest.raises(NotImplementedError):
        transport.call(builders.load_checkpoint_request(jobs, "x"))


def test_clip_ratios_are_honoured(server, job):
    """With pi_old far below pi_new every ratio is clipped: token-mean loss = -(1 + eps_high) * A."""
    transport, jobs = job
    old = torch.full((2, 9), -60.0)
    out = transport.call(builders.fwd_bwd_request(jobs, _cortex_body(old=old, eps_high=0.28)))
    assert out["avg_loss"] == pytest.approx(-1.28, abs=1e-5)
    transport.call(builders.step_request(jobs))


def test_async_path(server, job):
    transport, jobs = job
    headers = dict(transport.session.headers)
    transport._auth_headers = lambda: {
        k: headers[k] for k in ("Authorization", "X-Snowflake-Authorization-Token-Type")
    }

    async def flow():
        try:
            out = await transport.acall(builders.fwd_bwd_request(jobs, _cortex_body()))
            step = await transport.acall(builders.step_request(jobs))
            gen = await transport.acall(builders.generate_request(jobs, ["hi"], {"max_tokens": 2}))
            return out, step, gen
        finally:
            await transport.aclose()

    out, step, gen = asyncio.run(flow())
    assert out["batch"] == {} and isinstance(out["avg_loss"], float)
    assert "metrics" not in step and step["global_steps"] >= 1
    assert len(gen["results"]) == 1


def test_replayed_chunk_group_is_applied_once(server):
    """Two identical jobs; one gets forward-backward's chunk group posted twice (a new request id,
    the same execution), the other once. After a step both hold the same weights."""
    a, b = _transport(server.url, sampling=False), _transport(server.url, sampling=False)
    jobs_a, jobs_b = a.initialize(), b.initialize()
    try:
        body = _cortex_body()
        chunks = a._octet_chunks(builders.fwd_bwd_request(jobs_a, body).body, "forward-backward")
        url = f"{a._prefix}/{a.job_id}/forward-backward"
        first = a._send("POST", url, data=chunks[0], headers={"Content-Type": "application/octet-stream"})
        again = a._send("POST", url, data=chunks[0], headers={"Content-Type": "application/octet-stream"})
        assert first["request_id"] != again["request_id"]
        assert a._poll(first["request_id"]) == a._poll(again["request_id"])
        emulated = server.emulator.jobs[a.job_id]
        assert emulated.executions == 1
        b.call(builders.fwd_bwd_request(jobs_b, body))
        for t, j in ((a, jobs_a), (b, jobs_b)):
            t.call(builders.step_request(j))
        probe = _cortex_body(adv=0.5)
        assert a.call(builders.fwd_bwd_request(jobs_a, probe))["avg_loss"] == pytest.approx(
            b.call(builders.fwd_bwd_request(jobs_b, probe))["avg_loss"], abs=0, rel=0
        )
        # a lost answer to the final chunk: the client retries the same chunk, the emulator runs it once
        before = emulated.executions
        server.emulator.faults.arm("forward-backward", status=503)
        a.call(builders.fwd_bwd_request(jobs_a, body))
        assert emulated.executions == before + 1
    finally:
        a.shutdown()
        b.shutdown()


def test_chunked_frames_and_chunk_group_errors(server, job, monkeypatch):
    transport, jobs = job
    # the client's 60 MiB split, shrunk so a small frame needs several chunks
    monkeypatch.setattr(cortex_transport, "_MAX_OCTET_BYTES", 8192 + 400)
    body = _cortex_body()
    chunks = transport._octet_chunks(body, "forward-backward")
    assert len(chunks) > 2
    out = transport.call(builders.fwd_bwd_request(jobs, body))
    assert out["avg_loss"] == pytest.approx(-1.0, abs=1e-5)
    transport.call(builders.step_request(jobs))

    url = f"{transport._prefix}/{transport.job_id}/forward-backward"
    octet = {"Content-Type": "application/octet-stream"}
    fresh = transport._octet_chunks(body, "forward-backward")
    resp = transport.session.post(url, data=fresh[1], headers=octet)  # unknown group, not chunk 0
    assert resp.status_code == 409 and resp.json()["code"] == "chunk_group_restart_required"
    transport.session.post(url, data=fresh[0], headers=octet).raise_for_status()
    resp = transport.session.post(url, data=fresh[-1], headers=octet)  # middle chunks missing
    assert resp.status_code == 409 and resp.json()["code"] == "chunk_group_missing_chunks"
    other = transport._octet_chunks(_cortex_body(adv=2.0), "forward-backward")
    meta = wire.read_byte_chunk_metadata(other[0])
    relabelled = wire.encode_byte_chunks(
        wire.decode_byte_chunks(other),
        kind="request",
        operation="fwd-bwd",
        max_bytes=8192 + 400,
        chunk_group_id=wire.read_byte_chunk_metadata(fresh[0])["chunk_group_id"],
        force_chunk=True,
    )
    assert meta["frame_sha256"] != wire.read_byte_chunk_metadata(fresh[0])["frame_sha256"]
    resp = transport.session.post(url, data=relabelled[0], headers=octet)  # same group id, another frame
    assert resp.status_code == 409 and resp.json()["code"] == "chunk_group_conflict"
    # a bare frame is off contract for forward-backward
    resp = transport.session.post(url, data=wire.dumps(body), headers=octet)
    assert resp.status_code == 400 and "chunk" in resp.json()["message"]


def test_pat_checked_on_every_call(server, job, caplog):
    caplog.set_level(logging.DEBUG)
    transport, _jobs = job
    prefix = transport._prefix
    paths = [
        ("GET", prefix),
        ("GET", f"{prefix}/{transport.job_id}"),
        ("POST", f"{prefix}/{transport.job_id}/step"),
    ]
    for headers in (
        {},
        {
            "Authorization": "Bearer wrong-token",
            "X-Snowflake-Authorization-Token-Type": "PROGRAMMATIC_ACCESS_TOKEN",
        },
        {"Authorization": f"Bearer {PAT}"},  # PAT without its token-type header
    ):
        for method, url in paths:
            resp = requests.request(method, url, headers=headers, json={}, timeout=30)
            assert resp.status_code == 401, (method, url, headers)
            assert resp.json()["code"] == 401 and "PROGRAMMATIC_ACCESS_TOKEN" in resp.json()["message"]
            assert PAT not in resp.text and "wrong-token" not in resp.text
    # the real client with no PAT (0.1.4's base_url mode) cannot even create a job
    with pytest.raises(requests.HTTPError) as err:
        _transport(server.url, token=None).initialize()
    assert err.value.response.status_code == 401
    assert PAT not in caplog.text


def test_error_bodies_are_json_and_name_the_problem(server, job):
    transport, jobs = job
    bad = _cortex_body()
    bad["context"]["loss_mask"][0, 8] = True  # the row's last real column: nothing to predict
    with pytest.raises(requests.HTTPError) as err:
        transport.call(builders.fwd_bwd_request(jobs, bad))
    assert err.value.response.status_code == 400
    assert "loss_mask[0, 8]" in err.value.response.json()["message"]
    with pytest.raises(requests.HTTPError) as err:
        transport.call(builders.step_request(jobs, learning_rate=0.5))
    assert err.value.response.json() == {"message": err.value.response.json()["message"], "code": 400}
    wrong_loss = _cortex_body()
    wrong_loss["processing"]["loss_fn"] = "arctic_rl_losses.server.policy_loss"
    with pytest.raises(requests.HTTPError) as err:
        transport.call(builders.fwd_bwd_request(jobs, wrong_loss))
    assert "dotted path" in err.value.response.json()["message"]
    too_big = transport.session.post(
        f"{transport._prefix}/{transport.job_id}/generate",
        data=b"\0" * (60 * 1024 * 1024 + 128 * 1024),
        headers={"Content-Type": "application/octet-stream"},
        timeout=60,
    )
    assert too_big.status_code == 413 and "request chunks" in too_big.json()["message"]
    resp = transport.session.get(f"{transport._prefix}/nosuchjob", timeout=30)
    assert resp.status_code == 404 and resp.json()["code"] == 404
    resp = transport.session.get(f"{transport._prefix}/{transport.job_id}/requests/nope", timeout=30)
    assert resp.status_code == 404
    resp = transport.session.get(
        transport._prefix.replace("cortex-training", "cortex-post-training"), timeout=30
    )
    assert resp.status_code == 404 and "cortex-training" in resp.json()["message"]


def test_job_states_and_cancel(server):
    transport = _transport(server.url, sampling=False)
    created = transport._send(
        "POST", transport._prefix, json={"sub_job_configs": transport._sub_job_configs()}
    )
    job_url = f"{transport._prefix}/{created['job_id']}"
    assert transport.session.get(job_url, timeout=30).json()["status"] in ("pending", "initializing")
    early = transport.session.post(f"{job_url}/step", json={}, timeout=30)
    assert (
        early.status_code == 409 and "wait until it is running" in early.json()["message"]
    )  # 0.1.4 retries 409
    transport.job_id = created["job_id"]
    transport._wait_running()
    assert transport.session.post(f"{job_url}:cancel", timeout=30).status_code == 200
    assert transport.session.post(f"{job_url}:cancel", timeout=30).status_code == 200  # idempotent
    assert transport._job()["status"] == "cancelled"
    assert server.emulator.jobs[created["job_id"]].engine is None
    late = transport.session.post(f"{job_url}/step", json={}, timeout=30)
    assert late.status_code == 400 and "cancelled" in late.json()["message"]
    bad = transport.session.post(
        transport._prefix, json={"sub_job_configs": [{"job_type": "trainer"}]}, timeout=30
    )
    assert bad.status_code == 400 and "job_type" in bad.json()["message"]


def test_finished_request_records_are_pruned():
    from arctic_rl_testbed.reference.cortex_server import RequestRecord, _prune

    records = {
        str(i): RequestRecord(str(i), "step", status="done" if i < 8 else "running") for i in range(10)
    }
    _prune(records, keep=4)
    assert list(records) == ["6", "7", "8", "9"]


def test_tls_host_path_sends_the_pat_itself(tmp_path, monkeypatch):
    """`--tls`: the unmodified 0.1.4 transport on its host path (https, its own PAT headers)."""
    from arctic_rl_testbed.reference.cortex_tls import self_signed

    tls = self_signed(tmp_path / "tls")
    settings = ReferenceEngineSettings(num_threads=1, colocated=False)
    srv = _Server(CortexEmulator(PAT, settings, file_root=tmp_path / "files"), tls.server_context())
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls.cert))
    try:

        def transport(pat: str) -> CortexTransport:
            config = _config(srv.url, sampling=False).model_copy(
                update={
                    "backend": CortexConfig.model_validate(
                        {
                            "host": f"127.0.0.1:{srv.port}",
                            "pat": pat,
                            "database": DB,
                            "schema": SCHEMA,
                            "max_retries": 0,
                        }
                    )
                }
            )
            made = CortexTransport(config)
            made.poll_interval = 0.05
            return made

        with pytest.raises(requests.HTTPError) as err:
            transport("not-the-pat").initialize()
        assert err.value.response.status_code == 401
        real = transport(PAT)
        assert real._prefix.startswith(
            f"https://127.0.0.1:{srv.port}/api/v2/databases/{DB}/schemas/{SCHEMA}/"
        )
        jobs = real.initialize()
        out = real.call(builders.fwd_bwd_request(jobs, _cortex_body()))
        assert out["avg_loss"] == pytest.approx(-1.0, abs=1e-5)
        assert real.call(builders.step_request(jobs))["global_steps"] == 1
        real.shutdown()
        assert srv.emulator.jobs[real.job_id].status == "cancelled"
    finally:
        srv.stop()
