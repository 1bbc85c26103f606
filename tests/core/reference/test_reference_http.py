"""The REAL arctic-platform 0.1.4 client drives `arctic-rl serve --reference` in a subprocess."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import selectors
import subprocess
import sys
import time

import pytest
import torch

client_module = pytest.importorskip("arctic_platform.client")


from arctic_platform.client import (  # noqa: E402
    ArcticClientConfig,
    AsyncArcticRLClient,
    OnPremConfig,
    SamplingConfig,
    TrainingConfig,
)
from arctic_platform.client.transports.onprem_http import HttpTransport  # noqa: E402
from arctic_rl_core.backends.protocol import string_keyed_to_int  # noqa: E402
from arctic_rl_core.wire import (  # noqa: E402
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    response_logprobs,
    with_response_logprobs,
)
from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME  # noqa: E402
from arctic_rl_testbed.reference.tokenizer import build_tokenizer  # noqa: E402

PROMPTS = ["What is 2 + 3?", "SELECT name FROM", "The answer is", "Count the rows"]
P, R = 10, 6


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "arctic_rl_core.cli.main",
            "serve",
            "--reference",
            "--port",
            "0",
            "--num-threads",
            "1",
            "--file-root",  # every test's tmp_path is under the session's base folder
            str(tmp_path_factory.getbasetemp()),
            # strict: generate results carry the sampler's weights_version (0.1.4's never do), which
            # this test reads; the 0.1.4 profile is driven in tests/core/reference/test_reference_fidelity.py
            "--profile",
            "strict",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline, line = time.monotonic() + 120, ""
        while "listening on" not in line:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {line!r}")
            if selector.select(timeout=1):
                line = proc.stdout.readline()
        port = int(line.strip().rsplit(":", 1)[1])
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _payload(batch_payload):
    return {"batch": batch_payload.batch, "meta": batch_payload.meta, "processing": batch_payload.processing}


def test_real_client_drives_the_reference_server(server, tmp_path, monkeypatch):
    monkeypatch.setattr(
        "arctic_platform.client.base.make_transport", lambda config, server_state=None: HttpTransport(config)
    )
    ds_config = {
        "train_batch_size": 4,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2,
        "gradient_clipping": 1.0,
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": 1e-4, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.0},
        },
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2},
    }
    config = ArcticClientConfig(
        model_name=REFERENCE_MODEL_NAME,
        seed=3,
        training_gpus=1,
        sampling_gpus=1,
        log_prob_gpus=1,
        job_ready_timeout=60,
        request_timeout=120,
        training=TrainingConfig(checkpoint_path=str(tmp_path), ds_config=ds_config),
        sampling=SamplingConfig(log_prob_engine="deepspeed"),
        backend=OnPremConfig(host="127.0.0.1", port=server),
    )
    client = AsyncArcticRLClient(config)  # blocking HTTP: /initialize + /job polling
    assert (
        client.jobs.training is not None
        and client.jobs.sampling is not None
        and client.jobs.log_prob is not None
    )
    tokenizer = build_tokenizer()
    spec = PayloadSpec(
        pad_token_id=tokenizer.pad_token_id,
        max_prompt_len=P,
        max_response_len=R,
        rollout_n=1,
        temperature=1.0,
        grad_accum_steps=2,
    )

    async def flow():
        try:
            await steps()
        finally:
            await client.shutdown()  # posts /destroy for every job; idempotent

    async def steps():
        results = await client.generate(
            PROMPTS, {"max_tokens": R, "temperature": 1.0, "logprobs": 1, "seed": 5}
        )
        assert [r["weights_version"] for r in results] == [0] * 4
        samples, sampled = [], []
        for prompt, result in zip(PROMPTS, results, strict=True):
            assert set(result) >= {
                "text",
                "token_ids",
                "finish_reason",
                "prompt_len",
                "generation_len",
                "logprobs",
            }
            assert result["generation_len"] == len(result["token_ids"]) and result["prefix_cache_len"] == 0
            picked = []
            for token, entry in zip(result["token_ids"], result["logprobs"], strict=True):
                entry = string_keyed_to_int(entry)  # JSON subtree: integer keys arrive as strings
                assert 1 <= len(entry) <= 2 and token in entry
                picked.append(entry[token]["logprob"])
            sampled.append(picked)
            samples.append(
                RolloutSample(
                    prompt_ids=tokenizer.encode(prompt), response_ids=result["token_ids"], advantages=1.0
                )
            )
        forward = build_forward_payload(samples, spec)
        out = await client.fwd_no_grad(_payload(forward))
        old, _mask = response_logprobs(out["batch"]["logprobs"], forward, spec)
        for b, picked in enumerate(sampled):
            torch.testing.assert_close(old[b, : len(picked)], torch.tensor(picked), atol=1e-4, rtol=0)
        reference = await client.fwd_no_grad(_payload(forward), reference_model=True)
        torch.testing.assert_close(reference["batch"]["logprobs"], out["batch"]["logprobs"], atol=0, rtol=0)

        train = build_train_payload(with_response_logprobs(samples, old, field="old_logprobs"), spec)
        losses = []
        for _ in range(4):
            result = await client.fwd_bwd(_payload(train))
            assert set(result) == {"job_id", "metrics", "avg_loss"}
            losses.append(result["avg_loss"])
            stepped = await client.step()
            assert (
                stepped["metrics"]["last_lr"] == pytest.approx(1e-4) and stepped["metrics"]["grad_norm"] > 0
            )
        assert losses[0] == pytest.approx(-1.0, abs=1e-4)
        assert all(b < a for a, b in itertools.pairwise(losses)), losses

        synced = (
            await client.sync_weights()
        )  # wake weights -> operation -> wake kv_cache -> reset prefix cache
        assert synced["status"] == "ok" and synced["weights_version"] == 4  # the trainer's step
        after = await client.generate(PROMPTS[:2], {"max_tokens": 3, "temperature": 0.0})
        assert [r["weights_version"] for r in after] == [4, 4]

        saved = await client.save_checkpoint(step=4)
        assert saved["global_step"] == 4 and saved["path"].endswith("checkpoint-4")
        at_save = (await client.fwd_no_grad(_payload(forward)))["batch"]["logprobs"]
        await client.fwd_bwd(_payload(train))
        await client.step()
        moved = (await client.fwd_no_grad(_payload(forward)))["batch"]["logprobs"]
        assert not torch.equal(moved, at_save)
        loaded = await client.load_checkpoint(step=4)
        assert loaded["global_step"] == 4
        restored = (await client.fwd_no_grad(_payload(forward)))["batch"]["logprobs"]
        assert torch.equal(restored, at_save)

        await client.sleep_inference(level=1)
        await client.wake_inference()  # no tags: an empty octet-stream body
        await client.sleep_training("all")
        await client.wake_training()
        with pytest.raises(Exception, match="400"):  # forward with a loss is refused by the payload rules
            bad = dataclasses.replace(forward, processing={**forward.processing, "loss_fn": "verl_grpo"})
            await client.fwd_no_grad(_payload(bad))

    asyncio.run(flow())
    import requests

    status = requests.get(f"http://127.0.0.1:{server}/status", timeout=10).json()
    assert status["jobs"] == {} and status["engine"] is None
