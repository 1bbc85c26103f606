"""`arctic-rl serve --reference --parity-trace PATH`: the parity trace recorded where the server
receives the payloads. Driven through `ArcticBackend` and the real arctic-platform 0.1.4 client over
HTTP (DSSST1 encode -> HTTP -> decode), with the same calls also recorded on the client side by
`RecordingBackend`: the two traces hold the same calls, tensors bit for bit, meta, processing,
losses and step results; the server's ends with the trainer weights' digest when the training job
is destroyed. This is what lets the parity suite compare two frameworks' real trainers over the
wire (tests/parity)."""

from __future__ import annotations

import math

from arctic_rl_core import dispatch
from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.weight_sync import WeightSyncPolicy, sync_after_step
from arctic_rl_core.wire import (
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    response_logprobs,
    with_response_logprobs,
)
from arctic_rl_losses import IMPORT_PROBE_FN
from arctic_rl_testbed.parity.recording import RecordingBackend
from arctic_rl_testbed.parity.trace_diff import diff_traces, format_differences
from arctic_rl_testbed.parity.trace_file import ParityTraceWriter, read_trace
from wire_server import serve_reference

PROMPTS = ["Count to three:", "Count to three:", "Name a colour:", "Name a colour:"]


def _grpo_steps(backend, cfg, steps: int = 2) -> None:
    spec = PayloadSpec.from_config(cfg, pad_token_id=0)
    for step in range(steps):
        out = dispatch.run(backend.generate(PROMPTS, SamplingParams(max_tokens=4, temperature=1.0)))
        samples = [
            RolloutSample(
                prompt_ids=[5 + i, 6, 7],
                response_ids=list(c.token_ids),
                advantages=[1.0, -1.0][(i + step) % 2],
            )
            for i, c in enumerate(out.completions)
        ]
        forward = build_forward_payload(samples, spec)
        old, _ = response_logprobs(dispatch.run(backend.forward(forward)).logprobs_B_S, forward, spec)
        ref, _ = response_logprobs(
            dispatch.run(backend.forward(forward, reference_model=True)).logprobs_B_S, forward, spec
        )
        trained = with_response_logprobs(samples, old, field="old_logprobs")
        trained = with_response_logprobs(trained, ref, field="ref_logprobs")
        dispatch.run(backend.forward_backward(build_train_payload(trained, spec)))
        dispatch.run(backend.step())
        dispatch.run(sync_after_step(backend, WeightSyncPolicy.from_config(cfg)))  # sync + cache reset


def test_the_server_records_exactly_what_the_client_sent(tmp_path):
    server_trace = tmp_path / "server.trace"
    with serve_reference(
        tmp_path / "server", args=["--parity-trace", str(server_trace)], file_root=tmp_path
    ) as server:
        cfg = server.core_config(
            f"checkpoint.path={tmp_path / 'ckpt'}",
            "batch.prompts_per_step=2",
            "batch.rollouts_per_prompt=2",
            "batch.max_prompt_length=4",
            "batch.max_response_length=4",
            "placement.log_prob_gpus=1",  # reference log-probs from the log-prob job: forward_ref
            "loss.use_kl_loss=true",
            "loss.loss_fn=arctic_rl_core",  # the adapters' default on-prem: the server imports our loss
            "zorro.enable=false",
        )
        writer = ParityTraceWriter(tmp_path / "client.trace")
        backend = RecordingBackend(ArcticBackend.from_config(cfg), writer)
        try:
            _grpo_steps(backend, cfg)
        finally:
            dispatch.run(backend.shutdown())  # destroys the jobs: the server closes its trace
            writer.close()
        assert server.jobs() == {}
    client, received = read_trace(writer.path), read_trace(server_trace)
    # the server also saw the loss-import probe `ArcticBackend.from_config` sends (loss.loss_fn=
    # arctic_rl_core), before the run, and ends with the trained weights
    probe, *calls, weights = received
    assert probe.op == "forward" and probe.record["processing"]["loss_fn"] == IMPORT_PROBE_FN
    assert weights.op == "weights" and len(weights.record["digest"]) == 64
    assert [c.op for c in calls] == ["forward", "forward_ref", "forward_backward", "step"] * 2
    diffs = diff_traces(client, calls)
    assert not diffs, "\n" + format_differences(diffs, ("client", "server"))
    steps = [c.record for c in calls if c.op == "step"]
    assert [s["step"] for s in steps] == [1, 2] and all(math.isfinite(s["grad_norm"]) for s in steps)
