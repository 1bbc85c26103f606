"""The wire-run fixture: `arctic-rl serve --reference` in its own process, driven through
`ArcticBackend` and the real arctic-platform 0.1.4 client over HTTP."""

from __future__ import annotations

import math

import pytest
from arctic_rl_core import dispatch
from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.wire import (
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    response_logprobs,
    with_response_logprobs,
)
from wire_server import REFERENCE_MODEL_NAME, WireServerError, serve_reference


def test_arctic_backend_trains_and_samples_through_the_subprocess_server(wire, tmp_path):
    cfg = wire.core_config(
        f"checkpoint.path={tmp_path}", "batch.prompts_per_step=1", "batch.rollouts_per_prompt=1"
    )
    assert (cfg.backend.kind, cfg.backend.port, cfg.model.name) == ("http", wire.port, REFERENCE_MODEL_NAME)
    backend = ArcticBackend.from_config(cfg)
    try:
        jobs = wire.jobs()
        assert sorted(info["job_type"] for info in jobs.values()) == ["sampling", "training"]
        assert wire.process.poll() is None  # its own process, running

        out = dispatch.run(backend.generate(["a text prompt"], SamplingParams(max_tokens=3, temperature=1.0)))
        completion = out.completions[0]
        assert len(completion.token_ids) == completion.generation_len == 3
        assert completion.prompt_token_ids is None  # the on-prem server returns no prompt ids
        assert out.weights_version == 0

        spec = PayloadSpec(pad_token_id=0, max_prompt_len=4, max_response_len=3, rollout_n=1, temperature=1.0)
        samples = [RolloutSample([11, 12], list(completion.token_ids), advantages=1.0)]
        forward = build_forward_payload(samples, spec)
        old, _ = response_logprobs(dispatch.run(backend.forward(forward)).logprobs_B_S, forward, spec)
        samples = with_response_logprobs(samples, old, field="old_logprobs")
        trained = dispatch.run(backend.forward_backward(build_train_payload(samples, spec)))
        assert math.isfinite(trained.loss)
        step = dispatch.run(backend.step())
        assert step.grad_norm > 0
        assert dispatch.run(backend.sync_weights()) == 1
        dispatch.run(backend.reset_prefix_cache())
        again = dispatch.run(
            backend.generate(["a text prompt"], SamplingParams(max_tokens=3, temperature=1.0))
        )
        assert again.weights_version == 1
    finally:
        dispatch.run(backend.shutdown())
    assert wire.jobs() == {}


def test_a_server_that_cannot_start_fails_with_its_log(tmp_path):
    starting = serve_reference(tmp_path, args=["not-a-key=1"], startup_timeout_s=60)
    with pytest.raises(WireServerError, match=r"exited with code 2[\s\S]*arctic-rl serve"), starting:
        pass
