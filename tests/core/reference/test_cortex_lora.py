"""LoRA on the Cortex emulator, driven by the REAL arctic-platform 0.1.4 `CortexTransport`: a job created
with `training.peft` (the client's `to_cortex()` puts it on the training and the sampling sub-job) trains
adapters only, a `weight_format="lora"` sync moves only them, and the create-job rules of the Cortex API
specification (LoRA on both sub-jobs, the same r / lora_alpha / target_modules) answer 400."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("tenacity")  # arctic-platform[cortex]

from arctic_platform.client import ArcticClientConfig, CortexConfig, TrainingConfig
from arctic_platform.client import requests as builders
from arctic_platform.client.transports.cortex import CortexTransport
from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME
from arctic_rl_testbed.reference.lora import is_adapter
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings
from cortex_emulator import DATABASE, PAT, SCHEMA, InProcessCortex

from .test_cortex_emulator import _cortex_body

PEFT = {
    "peft_type": "Lora",
    "r": 4,
    "lora_alpha": 8,
    "lora_dropout": 0.0,
    "bias": "none",
    "target_modules": ["q_proj", "v_proj"],
}


@pytest.fixture(scope="module")
def cortex(tmp_path_factory):
    server = InProcessCortex(
        PAT, ReferenceEngineSettings(num_threads=1, colocated=False), tmp_path_factory.mktemp("c")
    )
    yield server
    server.stop()


def _transport(url: str, peft: dict | None) -> CortexTransport:
    config = ArcticClientConfig(
        model_name=REFERENCE_MODEL_NAME,
        seed=7,
        max_seq_len=64,
        training_gpus=1,
        sampling_gpus=1,
        job_ready_timeout=60,
        request_timeout=60,
        training=TrainingConfig(
            peft=peft, ds_config={"optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
        ),
        backend=CortexConfig.model_validate({"base_url": url, "database": DATABASE, "schema": SCHEMA}),
    )
    transport = CortexTransport(config)
    transport.poll_interval = 0.05
    transport.session.headers.update(
        {
            "Authorization": f"Bearer {PAT}",
            "X-Snowflake-Authorization-Token-Type": "PROGRAMMATIC_ACCESS_TOKEN",
        }
    )
    return transport


def test_a_lora_job_trains_and_syncs_only_the_adapters(cortex):
    transport = _transport(cortex.url, PEFT)
    jobs = transport.initialize()
    try:
        job = cortex.emulator.jobs[transport.job_id]
        assert job.peft == PEFT and job.engine.trains_adapters
        start = job.engine.trainer_parameters()
        transport.call(builders.fwd_bwd_request(jobs, _cortex_body()))
        transport.call(builders.step_request(jobs))
        result = transport.call(builders.sync_weights_request(jobs, weight_format="lora"))
        assert result["weight_format"] == "lora"
        sync = job.engine.last_sync
        assert sync.weight_format == "lora" and sync.transfer.num_tensors == 8  # 2 layers x q, v x A, B
        assert result["num_bytes"] == sync.transfer.num_bytes
        trained = job.engine.trainer_parameters()
        moved = sorted(n for n in trained if not torch.equal(trained[n], start[n]))
        assert moved and all(is_adapter(n) for n in moved)  # the base did not move
        sampler = job.engine.sampler_parameters()
        assert all(torch.equal(sampler[n], trained[n]) for n in trained)
    finally:
        transport.shutdown()


def test_lora_format_on_a_dense_job_is_a_400(cortex):
    transport = _transport(cortex.url, None)
    jobs = transport.initialize()
    try:
        with pytest.raises(Exception, match="needs a job created with peft_config"):
            transport.call(builders.sync_weights_request(jobs, weight_format="lora"))
    finally:
        transport.shutdown()


@pytest.mark.parametrize(
    ("sampling_peft", "message"),
    [
        (None, "LoRA enabled on the sampling sub-job too"),
        ({**PEFT, "r": 8}, "['r'] differ between the training and the sampling sub-job"),
        ({**PEFT, "peft_type": "PREFIX_TUNING"}, "only LoRA adapters"),
    ],
)
def test_create_job_refuses_adapters_that_cannot_sync(cortex, sampling_peft, message):
    transport = _transport(cortex.url, PEFT)
    subs = transport._sub_job_configs()
    for sub in subs:
        if sub["job_type"] == "sampling":
            sub["inference_config"].pop("peft_config")
            if sampling_peft is not None:
                sub["inference_config"]["peft_config"] = sampling_peft
    resp = transport.session.post(transport._prefix, json={"sub_job_configs": subs}, timeout=30)
    assert resp.status_code == 400 and message in resp.json()["message"]
