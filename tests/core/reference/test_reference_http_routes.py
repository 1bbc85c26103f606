"""Routes of the reference HTTP server in-process (aiohttp test client): job rules, sampling
parameters, log-prob jobs, checkpoints, error statuses; and the ds_config mapping. These run the
STRICT profile (refusals with a 4xx naming the field); the default arctic-0.1.4 profile, where the
server answers as the real one, is pinned in test_reference_fidelity.py."""

from __future__ import annotations

import asyncio

import pytest
import torch
from aiohttp.test_utils import TestClient, TestServer
from arctic_platform import wire
from arctic_rl_testbed.reference.deepspeed_mapping import DeepSpeedConfigError, training_overrides
from arctic_rl_testbed.reference.fidelity import Fidelity, ServerProfile
from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME, ReferenceServer
from arctic_rl_testbed.reference.settings import OptimizerSettings, ReferenceEngineSettings

NAME = REFERENCE_MODEL_NAME


def _serve(test, file_root):
    async def main():
        server = ReferenceServer(
            ReferenceEngineSettings(num_threads=1),
            fidelity=Fidelity(profile=ServerProfile.STRICT),
            file_root=file_root,
        )
        async with TestClient(TestServer(server.application())) as client:
            await test(client, server)

    asyncio.run(main())


async def _init(client, job_type, **extra):
    response = await client.post("/initialize", json={"model_name": NAME, "job_type": job_type, **extra})
    return response.status, await response.json()


async def _wire_post(client, path, job_id, body):
    response = await client.post(
        path,
        params={"job_id": job_id},
        data=wire.dumps(body),
        headers={"Content-Type": "application/octet-stream"},
    )
    if response.content_type == "application/octet-stream":
        return response.status, wire.loads(await response.read())
    return response.status, await response.json()


def test_job_rules(tmp_path):
    async def test(client, server):
        assert await (await client.get("/health")).json() == {"status": "OK"}
        status, body = await _init(client, "training")
        assert (status, body["detail"]) == (400, "checkpoint_path is required for training jobs")
        status, body = await _init(client, "sampling", model_name="Qwen/Qwen3-8B")
        assert status == 400 and "never downloads" in body["detail"]
        assert (await _init(client, "critic"))[0] == 400
        status, body = await _init(client, "sampling", seed=7)
        assert (status, body) == (200, {"job_id": 1, "job_type": "sampling", "running": True})
        assert (await _init(client, "sampling", seed=7))[0] == 409
        status, body = await _init(client, "training", seed=8, checkpoint_path=str(tmp_path))
        assert status == 400 and "share one reference engine" in body["detail"]
        status, body = await _init(
            client, "training", seed=7, checkpoint_path=str(tmp_path), ds_config={"foo": 1}
        )
        assert status == 400 and "['foo']" in body["detail"]
        status, body = await _init(client, "training", seed=7, checkpoint_path=str(tmp_path))
        assert status == 200 and body["job_id"] == 2
        info = await (await client.get("/job/2")).json()
        assert info["status"] == "RUNNING" and info["checkpoint_path"] == str(tmp_path / "arctic_rl_job_2")
        assert (await client.get("/job/9")).status == 404
        assert (await client.post("/step", json={})).status == 422  # no job_id
        response = await client.post("/step", params={"job_id": 1}, json={})
        assert response.status == 400 and "is not a training job" in (await response.json())["detail"]
        response = await client.post("/step", params={"job_id": 2}, json={})
        assert response.status == 409 and "without forward_backward" in (await response.json())["detail"]
        for job_id in (1, 2):
            response = await client.post("/destroy", params={"job_id": job_id}, json={"job_type": "x"})
            assert await response.json() == {"job_id": job_id}
        status_body = await (await client.get("/status")).json()
        assert status_body == {"engine": None, "jobs": {}}
        assert server.state.engine is None

    _serve(test, tmp_path)


def test_generate_parameters_and_states(tmp_path):
    async def test(client, server):
        await _init(client, "sampling")
        status, body = await _wire_post(client, "/generate", 1, {"prompts": [[1, 2, 3]]})
        assert status == 422 and "text prompts only" in body["detail"]
        for params, fragment in (
            ({"n": 2}, "replicate prompts"),
            ({"use_beam_search": True}, "use_beam_search is not a vLLM sampling parameter"),
            ({"presence_penalty": 0.5}, "presence_penalty=0.5 is not supported"),
            ({"logprobs": -1}, "logprobs=-1"),
        ):
            status, body = await _wire_post(
                client, "/generate", 1, {"prompts": ["hi"], "sampling_params": params}
            )
            assert status == 400 and fragment in body["detail"], body
        neutral = {"max_tokens": 4, "temperature": 0.0, "top_k": 0, "repetition_penalty": 1.0, "logprobs": 0}
        status, body = await _wire_post(
            client, "/generate", 1, {"prompts": ["SELECT"], "sampling_params": neutral}
        )
        assert status == 200
        (result,) = body["results"]
        assert len(result["token_ids"]) == 4 and result["finish_reason"] == "length"
        assert [len(entry) for entry in result["logprobs"]] == [1, 1, 1, 1]
        assert all(
            e[str(t)]["rank"] == 1 for e, t in zip(result["logprobs"], result["token_ids"], strict=True)
        )
        first = result["token_ids"][0]
        stop = {"max_tokens": 4, "temperature": 0.0, "stop_token_ids": [first]}
        status, body = await _wire_post(
            client, "/generate", 1, {"prompts": ["SELECT"], "sampling_params": stop}
        )
        assert body["results"][0]["token_ids"] == [first] and body["results"][0]["finish_reason"] == "stop"
        status, body = await _wire_post(
            client, "/generate", 1, {"prompts": ["SELECT"], "sampling_params": None}
        )
        assert len(body["results"][0]["token_ids"]) <= 16  # vLLM's default max_tokens
        response = await client.post("/sleep-inference", params={"job_id": 1}, json={"level": 1})
        assert (await response.json())["sampling"]["level"] == 1
        status, body = await _wire_post(client, "/generate", 1, {"prompts": ["SELECT"]})
        assert status == 409 and "wake_inference" in body["detail"]
        response = await client.post("/wake-inference", params={"job_id": 1}, json=["kv_cache"])
        assert response.status == 409
        response = await client.post("/wake-inference", params={"job_id": 1}, data=b"")
        assert (await response.json())["sampling"]["state"] == "awake"
        op = {"operation_type": "reset-prefix-cache", "sub_job_type": "sampling", "payload": {"drain": True}}
        assert (await client.post("/operation", params={"job_id": 1}, json=op)).status == 200
        bad = {"operation_type": "compact", "payload": {}}
        assert (await client.post("/operation", params={"job_id": 1}, json=bad)).status == 400

    _serve(test, tmp_path)


def test_log_prob_jobs(tmp_path):
    async def test(client, server):
        await _init(client, "log_prob")  # without ds_config: a vLLM-like engine
        response = await client.post(
            "/log-probs", params={"job_id": 1}, json={"prompts": ["SELECT name"], "top_k": 2}
        )
        (result,) = wire.loads(await response.read())["results"]
        ids = server.engine.tokenizer.encode("SELECT name")
        assert result["prompt_len"] == len(ids) and result["prompt_logprobs"][0] is None
        with torch.no_grad():
            logp = torch.log_softmax(server.engine._reference(input_ids=torch.tensor([ids])).logits[0], -1)
        for t in range(1, len(ids)):
            entry = result["prompt_logprobs"][t]
            assert str(ids[t]) in entry and 2 <= len(entry) <= 3
            assert entry[str(ids[t])]["logprob"] == pytest.approx(logp[t - 1, ids[t]].item(), abs=1e-5)
        status, body = await _wire_post(client, "/forward", 1, {"batch": {}, "meta": {}, "processing": {}})
        assert status == 400 and "no DeepSpeed workers" in body["detail"]
        await client.post("/destroy", params={"job_id": 1}, json={"job_type": "log_prob"})
        await _init(client, "log_prob", ds_config={})
        body = {"prompts": ["SELECT", "The answer is"], "completions": [" name", " 4"]}
        response = await client.post("/log-probs", params={"job_id": 2}, json=body)
        tensor = wire.loads(await response.read())["results"]
        encoded = server.engine.tokenizer(
            ["SELECT name", "The answer is 4"], padding=True, return_tensors="pt"
        )
        assert tensor.shape == (2, encoded["input_ids"].shape[1] - 1)
        lengths = encoded["attention_mask"].sum(-1).tolist()
        for b, text in enumerate(["SELECT name", "The answer is 4"]):
            ids = server.engine.tokenizer.encode(text)
            with torch.no_grad():
                logp = torch.log_softmax(
                    server.engine._reference(input_ids=torch.tensor([ids])).logits[0], -1
                )
            for t in range(lengths[b] - 1):
                assert tensor[b, t].item() == pytest.approx(logp[t, ids[t + 1]].item(), abs=1e-5)
        # 0.1.4's /sleep-log-prob and /wake-log-prob offload the DeepSpeed engine and bring it back;
        # a forward in between is refused (the real server would fail inside its workers)
        response = await client.post("/sleep-log-prob", params={"job_id": 2}, json={})
        assert response.status == 200 and (await response.json())["workers"] == [{"state": "offloaded"}]
        status, body = await _wire_post(client, "/forward", 2, {"batch": {}, "meta": {}, "processing": {}})
        assert status == 409 and "POST /wake-log-prob first" in body["detail"]
        response = await client.post("/wake-log-prob", params={"job_id": 2}, json={})
        assert (await response.json())["workers"] == [{"state": "on_gpu"}]
        response = await client.post("/sleep-log-prob", params={"job_id": 99}, json={})
        assert response.status == 404

    _serve(test, tmp_path)


def test_save_prune_and_load_latest(tmp_path):
    async def test(client, server):
        await _init(client, "training", checkpoint_path=str(tmp_path))
        root = tmp_path / "arctic_rl_job_1"
        for step in (1, 2, 3):
            response = await client.post(
                "/save", params={"job_id": 1}, json={"step": step, "save_total_limit": 2}
            )
            body = await response.json()
            assert body["path"] == str(root / f"checkpoint-{step}") and body["global_step"] == 0
        assert sorted(p.name for p in root.iterdir()) == ["checkpoint-2", "checkpoint-3", "latest"]
        response = await client.post("/load-checkpoint", params={"job_id": 1}, json={})
        assert (await response.json())["path"] == str(root / "checkpoint-3")
        response = await client.post("/save", params={"job_id": 1}, json={"checkpoint_type": "weights_only"})
        assert response.status == 400
        response = await client.post("/load-checkpoint", params={"job_id": 1}, json={"step": 9})
        assert response.status == 404

    _serve(test, tmp_path)


def test_ds_config_mapping():
    defaults = OptimizerSettings()
    overrides = training_overrides(
        {
            "train_batch_size": 16,
            "train_micro_batch_size_per_gpu": 2,
            "gradient_clipping": 0.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.8, 0.95], "weight_decay": 0.1}},
            "scheduler": {
                "type": "WarmupCosineLR",
                "params": {
                    "total_num_steps": 10,
                    "warmup_num_steps": 2,
                    "warmup_min_ratio": 0.0,
                    "cos_min_ratio": 0.1,
                },
            },
            "bf16": {"enabled": True},
            "zero_optimization": {"stage": 3},
        },
        dp_size=2,
        defaults=defaults,
    )
    assert overrides.grad_accum_steps == 4
    assert overrides.optimizer.model_dump() == {
        "lr": 2e-5,
        "betas": (0.8, 0.95),
        "eps": 1e-8,
        "weight_decay": 0.1,
        "grad_clip": None,
    }
    assert overrides.schedule.model_dump() == {
        "kind": "cosine",
        "warmup_steps": 2,
        "total_steps": 10,
        "min_lr_ratio": 0.1,
    }
    warm = training_overrides(
        {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3}}}, dp_size=1, defaults=defaults
    )
    assert (warm.schedule.kind, warm.schedule.warmup_steps, warm.optimizer.grad_clip) == ("constant", 3, 1.0)
    for bad, fragment in (
        ({"train_batch_size": 10, "gradient_accumulation_steps": 2}, "train_batch_size=10"),
        ({"optimizer": {"type": "SGD"}}, "AdamW only"),
        ({"scheduler": {"type": "OneCycle"}}, "OneCycle"),
        ({"sequence_parallel_size": 2}, "sp_size > 1"),
        ({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 1.0}}}, "warmup_max_lr=1.0"),
    ):
        with pytest.raises(DeepSpeedConfigError, match=fragment):
            training_overrides(bad, dp_size=1, defaults=defaults)


def test_sampling_job_honours_vllm_config_logprobs_mode(tmp_path):
    """`serve --reference`: the sampling job's vllm_config.logprobs_mode (vLLM's default raw_logprobs
    when absent) decides the returned log-probs; processed = the temperature-scaled distribution."""
    from arctic_rl_core.backends.protocol import SamplingParams

    params = {"max_tokens": 4, "temperature": 0.6, "seed": 5, "logprobs": 0}

    async def sampled(client, vllm_config):
        status, body = await _init(client, "sampling", **vllm_config)
        assert status == 200, body
        job_id = body["job_id"]
        status, body = await _wire_post(
            client, "/generate", job_id, {"prompts": ["SELECT"], "sampling_params": params}
        )
        assert status == 200, body
        (result,) = body["results"]
        await client.post("/destroy", params={"job_id": job_id}, json={})
        return result["token_ids"], [
            e[str(t)]["logprob"] for e, t in zip(result["logprobs"], result["token_ids"], strict=True)
        ]

    async def test(client, server):
        status, body = await _init(client, "sampling", vllm_config={"logprobs_mode": "raw_logits"})
        assert status == 400 and "vllm_config.logprobs_mode='raw_logits'" in body["detail"]
        raw_tokens, raw = await sampled(client, {})
        tokens, processed = await sampled(client, {"vllm_config": {"logprobs_mode": "processed_logprobs"}})
        assert tokens == raw_tokens and max(abs(a - b) for a, b in zip(raw, processed, strict=True)) > 1e-2
        await _init(client, "sampling")
        direct, _ = await server.engine.sample(
            ["SELECT"],
            SamplingParams(max_tokens=4, temperature=0.6, seed=5),
            logprobs_mode="processed_logprobs",
        )
        assert processed == pytest.approx(list(direct[0].logprobs), abs=1e-6)

    _serve(test, tmp_path)
