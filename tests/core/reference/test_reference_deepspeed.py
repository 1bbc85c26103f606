"""The reference engine's `deepspeed` trainer: arctic-platform 0.1.4's own server code (its HTTP routes'
functions) driving its own `DeepSpeedWorker`s on the CPU, each rank in its own process, compared with
the torch trainer on the same payloads from the same bf16 starting weights.

One scenario for the module (starting a job's workers costs 10-20 s on 2 cores): a training job on
ZeRO-2 with per-row micro-batches (4 rows, gradient accumulation 4), a log-prob job on ZeRO-3, one GRPO
step with the KL and entropy terms, a weight sync, a checkpoint with HF export, a second step, a reload,
then every server-side loss family of `arctic_rl_losses` (imported by the worker by its dotted
path, as on a cluster) and the supervised `sft` loss, each one forward-backward on both engines.
Then the engine is shut down and the tests read what it recorded.

"bf16 noise": the worker computes in bf16 (it always loads the model in bf16); the torch trainer in
fp32 from the same bf16-rounded weights. On this tiny model its log-probs differ by up to ~0.03 nats.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.wire import (
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_sft_payload,
    build_train_payload,
    response_logprobs,
    with_response_logprobs,
)
from arctic_rl_losses.names import POLICY_LOSSES, SERVER_LOSS_FN
from arctic_rl_testbed.reference.deepspeed_backend import (
    DeepSpeedReferenceBackend,
    create_reference_backend,
)
from arctic_rl_testbed.reference.deepspeed_worker_process import RUNTIME_PROBE
from arctic_rl_testbed.reference.engine import ReferenceBackend
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

P, R, ROWS = 6, 5, 4
SETTINGS = dict(
    seed=3,
    grad_accum_steps=ROWS,  # one row per micro-batch: no packing of rows (see the xfail below)
    optimizer={"lr": 1e-3, "grad_clip": 1.0},
    deepspeed={"zero_stage": 2, "log_prob_zero_stage": 3},
)
BF16_LOGPROB_NOISE = 0.06  # nats, per token


def _samples() -> list[RolloutSample]:
    g = torch.Generator().manual_seed(0)
    samples = []
    for i in range(ROWS):
        prompt = torch.randint(10, 900, (3 + i % 3,), generator=g).tolist()
        response = torch.randint(10, 900, (2 + i,), generator=g).tolist()
        advantage = 0.8 if i % 2 else -0.8
        samples.append(
            RolloutSample(prompt_ids=prompt, response_ids=response, advantages=[advantage] * len(response))
        )
    return samples


def _spec(engine: ReferenceBackend) -> PayloadSpec:
    return PayloadSpec(
        pad_token_id=engine.pad_token_id,
        max_prompt_len=P,
        max_response_len=R,
        rollout_n=2,
        temperature=0.9,
        grad_accum_steps=ROWS,
        use_kl_loss=True,
        kl_loss_coef=0.1,
        entropy_coeff=0.01,
        calculate_entropy=True,
        # sdpa without ZoRRo: what PayloadSpec.from_config sends on ray/http (meta.cu_seqlens: rows unpacked)
        rows_unpacked=True,
    )


def _int32_ids(payload):
    """The payload with its `input_ids` sent as int32 (4 bytes a position instead of 8)."""

    def narrow(batch: dict) -> dict:
        return {**batch, "input_ids": batch["input_ids"].to(torch.int32)}

    batch = [narrow(mb) for mb in payload.batch] if isinstance(payload.batch, list) else narrow(payload.batch)
    return dataclasses.replace(payload, batch=batch)


def _bf16_start(engine: ReferenceBackend) -> None:
    """The torch engine from the same weights the worker loads (bf16-rounded)."""
    with torch.no_grad():
        for model in (engine._trainer, engine._sampler, engine._reference):
            for param in model.parameters():
                param.copy_(param.to(torch.bfloat16).to(param.dtype))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> SimpleNamespace:
    run = asyncio.run
    out = SimpleNamespace()
    ds = create_reference_backend(ReferenceEngineSettings(trainer="deepspeed", **SETTINGS))
    ref = ReferenceBackend(ReferenceEngineSettings(**SETTINGS))
    try:
        assert isinstance(ds, DeepSpeedReferenceBackend)
        _bf16_start(ref)
        samples, spec = _samples(), _spec(ds)
        fwd = build_forward_payload(samples, spec)
        out.spec, out.fwd = spec, fwd
        out.ds_before, out.ref_before = run(ds.forward(fwd)), run(ref.forward(fwd))
        out.ds_before_int32 = run(ds.forward(_int32_ids(fwd)))  # a narrower wire (testbed README)
        out.ds_reference = run(ds.forward(fwd, reference_model=True))
        out.row_spec = dataclasses.replace(spec, grad_accum_steps=1)
        out.ds_reference_rows = [
            run(ds.forward(build_forward_payload([s], out.row_spec), reference_model=True)) for s in samples
        ]
        old, _ = response_logprobs(out.ref_before.logprobs_B_S, fwd, spec)
        train_samples = with_response_logprobs(samples, old, field="old_logprobs")
        train_samples = with_response_logprobs(train_samples, old, field="ref_logprobs")
        train = build_train_payload(train_samples, spec)
        out.ds_train, out.ref_train = run(ds.forward_backward(train)), run(ref.forward_backward(train))
        out.ds_step, out.ref_step = run(ds.step()), run(ref.step())
        out.ds_after, out.ref_after = run(ds.forward(fwd)), run(ref.forward(fwd))
        out.runtime = [p.call(RUNTIME_PROBE) for p in ds.server_jobs.processes]
        out.pids = list(ds.worker_pids())
        out.version = run(ds.sync_weights())
        out.sync = ds.last_sync
        run(ds.reset_prefix_cache())
        out.workers_weights, out.sampler_weights = ds.trainer_parameters(), ds.sampler_parameters()
        out.generated = run(ds.generate(["a b c"], SamplingParams(max_tokens=4, temperature=1.0)))
        out.checkpoints = tmp_path_factory.mktemp("deepspeed-checkpoints")
        out.saved = run(ds.save_checkpoint(str(out.checkpoints), 1, export_hf=True))
        run(ds.forward_backward(train))
        out.second_step = run(ds.step())
        out.ds_step2 = run(ds.forward(fwd))
        run(ds.load_checkpoint(str(out.checkpoints), 1))
        out.ds_reloaded = run(ds.forward(fwd))
        out.step_after_reload = ds.global_step
        # loss families, each a forward-backward and a step on both engines (a second forward-backward
        # before a step would make DeepSpeed apply the optimizer inside it: see the test below)
        out.families = {}
        for family in POLICY_LOSSES:
            family_spec = dataclasses.replace(spec, loss_fn=SERVER_LOSS_FN, policy_loss=family)
            payload = build_train_payload(train_samples, family_spec)
            out.families[family] = (run(ds.forward_backward(payload)), run(ref.forward_backward(payload)))
            run(ds.step())
            run(ref.step())
        sft_spec = dataclasses.replace(spec, loss_fn="sft", use_kl_loss=False)
        sft = build_sft_payload(samples, sft_spec)
        out.sft = (run(ds.forward_backward(sft)), run(ref.forward_backward(sft)))
        # a second forward-backward with no step between (the sft one is pending)
        out.pending = (run(ds.forward(fwd)), run(ref.forward(fwd)))
        run(ds.forward_backward(train))
        run(ref.forward_backward(train))
        out.after_second = (run(ds.forward(fwd)), run(ref.forward(fwd)))
        texts = ["hello world foo", "a b"]
        out.ds_route, out.ref_route = (
            run(ds.reference_token_logprobs(texts)),
            run(ref.reference_token_logprobs(texts)),
        )
        out.route_lengths = [len(ds.tokenizer.encode(t)) for t in texts]
    finally:
        run(ds.shutdown())
        run(ref.shutdown())
    return out


def _response(out, forward) -> tuple[torch.Tensor, torch.Tensor]:
    values, mask = response_logprobs(forward.logprobs_B_S, out.fwd, out.spec)
    return values.float(), mask


def test_workers_run_on_the_cpu_over_gloo_without_the_shared_memory_kernel(scenario):
    assert len(scenario.runtime) == 2  # the training job's rank and the log-prob job's rank
    for runtime in scenario.runtime:
        assert runtime["accelerator"] == "cpu" and runtime["process_group_backend"] == "gloo"
        assert runtime["shm_comm_op_loaded"] is False and runtime["cuda_device_count"] == 0
    assert len({r["pid"] for r in scenario.runtime} | {os.getpid()}) == 3  # each rank in its own process


def test_shutdown_stops_every_worker_process(scenario):
    for pid in scenario.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_forward_matches_the_torch_trainer_within_bf16_noise(scenario):
    ds, mask = _response(scenario, scenario.ds_before)
    ref, _ = _response(scenario, scenario.ref_before)
    assert scenario.ds_before.logprobs_B_S.dtype == torch.bfloat16  # what the 0.1.4 server returns
    assert (ds - ref)[mask].abs().max() < BF16_LOGPROB_NOISE
    # the entropy the server's post-processor computes, per token, in nats
    entropy_ds, entropy_ref = scenario.ds_before.entropy_B_S, scenario.ref_before.entropy_B_S
    attention = scenario.fwd.batch["attention_mask"].bool()
    assert (entropy_ds.float() - entropy_ref)[attention].abs().max() < 0.05


def test_int32_ids_give_the_real_worker_the_same_log_probs(scenario):
    # 0.1.4's CPU path (sdpa, torch gather) reads int32 ids as int64 ones; its GPU path (flash-attn's
    # cross-entropy) is unverified, so the wire keeps int64
    assert torch.equal(scenario.ds_before_int32.logprobs_B_S, scenario.ds_before.logprobs_B_S)


def test_grpo_loss_with_kl_and_entropy_and_its_grad_norm_match_the_torch_trainer(scenario):
    ds, ref = scenario.ds_train, scenario.ref_train
    keys = {"loss", "actor/pg_loss", "actor/entropy_loss", "kl_loss", "actor/ppo_kl", "actor/pg_clipfrac"}
    assert keys <= set(ds.metrics) and keys <= set(ref.metrics)
    assert ds.metrics["kl_coef"] == ref.metrics["kl_coef"] == 0.1
    # the ratio is exp(bf16 log-prob - fp32 old log-prob): |A| = 0.8 times the log-prob noise
    assert ds.metrics["actor/pg_loss"] == pytest.approx(
        ref.metrics["actor/pg_loss"], abs=0.8 * BF16_LOGPROB_NOISE
    )
    assert ds.metrics["actor/entropy_loss"] == pytest.approx(ref.metrics["actor/entropy_loss"], rel=0.01)
    assert abs(ds.metrics["kl_loss"]) < 0.01 and ref.metrics["kl_loss"] == 0.0  # ref log-probs = old ones
    assert ds.loss == pytest.approx(ref.loss, abs=0.8 * BF16_LOGPROB_NOISE)
    assert scenario.ds_step.grad_norm == pytest.approx(scenario.ref_step.grad_norm, rel=0.02)
    assert scenario.ds_step.grad_norm > 1.0  # clipped to 1.0 in both
    assert scenario.ds_step.learning_rate == scenario.ref_step.learning_rate == 1e-3
    assert scenario.ds_step.step == scenario.ref_step.step == 1


def test_one_step_moves_the_log_probs_as_the_torch_step_does(scenario):
    ds_before, mask = _response(scenario, scenario.ds_before)
    ds_after, _ = _response(scenario, scenario.ds_after)
    ref_before, _ = _response(scenario, scenario.ref_before)
    ref_after, _ = _response(scenario, scenario.ref_after)
    moved = (ref_after - ref_before)[mask]
    assert moved.abs().max() > 0.3  # lr 1e-3 on a tiny model: a visible step
    assert (ds_after - ref_after)[mask].abs().max() < BF16_LOGPROB_NOISE
    assert torch.corrcoef(torch.stack([(ds_after - ds_before)[mask], moved]))[0, 1] > 0.99


def test_weight_sync_sends_the_workers_weights_to_the_sampler(scenario):
    assert scenario.version == 1 and scenario.sync.transfer.num_tensors == len(scenario.workers_weights)
    for name, weight in scenario.workers_weights.items():
        assert weight.dtype == torch.bfloat16
        assert torch.equal(scenario.sampler_weights[name].to(torch.bfloat16), weight), name
    assert scenario.generated.weights_version == 1 and len(scenario.generated.completions[0].token_ids) >= 1


def test_checkpoint_is_the_servers_layout_with_an_hf_export_and_reloads_exactly(scenario):
    root = Path(scenario.checkpoints)
    assert scenario.saved == str(root / "checkpoint-1")
    assert (root / "latest").read_text() == "1"  # the 0.1.4 server's pointer
    folder = root / "checkpoint-1"
    assert (folder / "global_step1").is_dir() and (
        folder / "latest"
    ).read_text() == "global_step1"  # DeepSpeed's
    assert (folder / "hf" / "config.json").is_file() and (folder / "hf" / "model.safetensors").is_file()
    assert scenario.second_step.step == 2
    assert not torch.equal(scenario.ds_step2.logprobs_B_S, scenario.ds_after.logprobs_B_S)
    assert torch.equal(scenario.ds_reloaded.logprobs_B_S, scenario.ds_after.logprobs_B_S)
    assert scenario.step_after_reload == 1


def test_hf_export_holds_the_trained_weights(scenario):
    from safetensors.torch import load_file

    exported = load_file(Path(scenario.checkpoints) / "checkpoint-1" / "hf" / "model.safetensors")
    for name, weight in scenario.workers_weights.items():  # gathered after step 1, before step 2
        assert torch.allclose(exported[name].float(), weight.float(), atol=1e-2, rtol=1e-2), name


def test_log_probs_route_of_the_log_prob_job_matches_the_torch_reference(scenario):
    ds, ref = scenario.ds_route, scenario.ref_route
    assert ds.shape == ref.shape
    for row, length in enumerate(
        scenario.route_lengths
    ):  # right-padded: positions past a row are meaningless
        assert (ds[row, : length - 1].float() - ref[row, : length - 1]).abs().max() < BF16_LOGPROB_NOISE


def test_reference_job_forward_of_one_row_matches_the_training_job(scenario):
    before, _ = _response(scenario, scenario.ds_before)
    for row, forward in enumerate(scenario.ds_reference_rows):
        payload = build_forward_payload([_samples()[row]], scenario.row_spec)
        values, mask = response_logprobs(forward.logprobs_B_S, payload, scenario.row_spec)
        assert (values[0].float() - before[row])[mask[0]].abs().max() < BF16_LOGPROB_NOISE


def test_reference_job_rows_of_one_forward_do_not_see_each_other(scenario):
    """The log-prob job has no gradient accumulation: every row of a forward shares one micro-batch, which
    0.1.4's pipeline packs into one [1, T] sequence that sdpa attends across (0.16-0.38 nats off, issue 28)
    unless the payload says the rows are already laid out (meta.cu_seqlens, `PayloadSpec.rows_unpacked`)."""
    assert "cu_seqlens" in scenario.fwd.meta
    batched, mask = _response(scenario, scenario.ds_reference)
    per_row = torch.stack(
        [
            response_logprobs(
                f.logprobs_B_S, build_forward_payload([s], scenario.row_spec), scenario.row_spec
            )[0][0]
            for f, s in zip(scenario.ds_reference_rows, _samples(), strict=True)
        ]
    )
    assert (batched - per_row.float())[mask].abs().max() < BF16_LOGPROB_NOISE


@pytest.mark.parametrize("family", POLICY_LOSSES)
def test_each_server_side_loss_family_matches_the_torch_trainer(scenario, family):
    """The worker calls `arctic_rl_losses.server.policy_loss` with its own layout (unpadded rows,
    `response_lens`, `sequence_offsets`); the torch engine with its own: the same loss and metrics."""
    ds, ref = scenario.families[family]
    assert set(ref.metrics) <= set(ds.metrics)
    tolerance = 0.8 * BF16_LOGPROB_NOISE + 0.02 * abs(ref.loss)
    assert ds.loss == pytest.approx(ref.loss, abs=tolerance), (family, ds.metrics, ref.metrics)
    assert ds.metrics["actor/pg_loss"] == pytest.approx(ref.metrics["actor/pg_loss"], abs=tolerance)


def test_the_supervised_loss_matches_the_torch_trainer(scenario):
    ds, ref = scenario.sft
    assert ref.loss > 5.0  # cross-entropy of an untrained tiny model over a 1,024-token vocabulary
    assert ds.loss == pytest.approx(ref.loss, rel=0.01)


def test_a_second_forward_backward_before_a_step_steps_inside_deepspeed(scenario):
    """A documented difference: the torch engine accumulates gradients over forward-backward calls
    until `step()`; the 0.1.4 worker calls DeepSpeed's `engine.step()` after every micro-batch but the
    last, so a call that starts at a gradient-accumulation boundary (the previous call left one
    pending) applies the optimizer inside it, and the next `/step` then falls off the boundary. Clients
    send one forward-backward per optimizer step (arctic_rl_core.wire)."""
    ds_pending, ref_pending = scenario.pending
    ds_after, ref_after = scenario.after_second
    assert torch.equal(ref_after.logprobs_B_S, ref_pending.logprobs_B_S)  # torch: nothing applied yet
    assert not torch.equal(ds_after.logprobs_B_S, ds_pending.logprobs_B_S)  # DeepSpeed: a step happened
