"""The Arctic dispatch against the reference engine: SkyRL-shaped log-probs, training steps,
checkpoints, and clear errors for what it does not serve."""

from __future__ import annotations

import json
import math

import pytest
import torch
from adapter_skyrl.dispatch import CHECKPOINT_MARKER, ArcticWorkerDispatch
from arctic_rl_core.wire import PayloadSpec
from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors

SKYRL = [
    "trainer.placement.colocate_all=false",
    "generator.inference_engine.enable_ray_prometheus_stats=false",
    "trainer.algorithm.policy_loss_type=dual_clip",
    "trainer.arctic_rl.backend.kind=reference",
    "trainer.arctic_rl.backend.reference.num_layers=1",
    "trainer.arctic_rl.backend.reference.hidden_size=32",
    "trainer.arctic_rl.backend.reference.intermediate_size=64",
    "trainer.arctic_rl.backend.reference.num_attention_heads=2",
    "trainer.arctic_rl.backend.reference.num_key_value_heads=1",
    "trainer.train_batch_size=2",
    "trainer.policy_mini_batch_size=2",
    "generator.n_samples_per_prompt=2",
    "trainer.max_prompt_length=32",
    "generator.sampling_params.max_generate_length=6",
    "trainer.policy.optimizer_config.lr=0.01",
]


@pytest.fixture
def setup():
    from adapter_skyrl.config import parse_cli, to_arctic_config
    from arctic_rl_core.backends.protocol import SamplingParams
    from arctic_rl_core.backends.registry import create_backend
    from arctic_rl_core.dispatch import run
    from arctic_rl_core.weight_sync import WeightSyncPolicy

    cfg = parse_cli(SKYRL)
    arctic = to_arctic_config(cfg, steps_per_epoch=4)
    backend = create_backend(arctic)
    spec = PayloadSpec.from_config(arctic, pad_token_id=backend.pad_token_id)
    dispatch = ArcticWorkerDispatch(cfg, backend, spec, WeightSyncPolicy.from_config(arctic))
    prompts = [backend.tokenizer.encode(t) for t in ("count the schools", "list movies", "how many", "bikes")]
    out = run(backend.generate(prompts, SamplingParams(max_tokens=6, temperature=1.0, logprobs=True)))
    responses = [list(c.token_ids) for c in out.completions]
    seqs, attn, resp_mask, _r, loss_mask, rollout_lp, _e, _s = convert_prompts_responses_to_batch_tensors(
        backend.pad_token_id, prompts, responses, [[0.0] * len(r) for r in responses],
        [[1] * len(r) for r in responses], [list(c.logprobs) for c in out.completions],
    )  # fmt: skip
    data = TrainingInputBatch(
        {"sequences": seqs, "attention_mask": attn, "response_mask": resp_mask, "loss_mask": loss_mask,
         "rollout_logprobs": rollout_lp}
    )  # fmt: skip
    data.metadata = {"response_length": resp_mask.shape[1]}
    yield dispatch, data
    run(backend.shutdown())


def _logprobs(dispatch, model, data):
    from skyrl.backends.skyrl_train.distributed.dispatch import loss_fn_outputs_to_tensor

    return loss_fn_outputs_to_tensor(dispatch.forward(model, data).loss_fn_outputs)


def test_forward_log_probs_match_the_samplers_in_skyrls_layout(setup):
    dispatch, data = setup
    policy = _logprobs(dispatch, "policy", data)
    assert policy.shape == data["response_mask"].shape
    mask = data["loss_mask"] > 0
    # The engine's sampler served the same (initial) weights: identical up to float rounding.
    assert torch.allclose(policy[mask], data["rollout_logprobs"][mask], atol=1e-4)
    assert torch.all(policy[~mask] == 0)  # SkyRL's zero fill in front of shorter responses
    assert torch.equal(_logprobs(dispatch, "ref", data), policy)  # reference = initial weights


def test_mini_batch_step_trains_and_counts(setup):
    dispatch, data = setup
    old = _logprobs(dispatch, "policy", data)
    data["action_log_probs"] = old
    data["base_action_log_probs"] = _logprobs(dispatch, "ref", data)
    data["advantages"] = torch.where(data["loss_mask"] > 0, torch.tensor([[1.0], [-1.0], [1.0], [-1.0]]), 0.0)
    (chunk,) = dispatch.stage_data("policy", data, [(0, 4)])
    out = dispatch.forward_backward_from_staged("policy", chunk)
    grad_norm = dispatch.optim_step("policy")
    assert math.isfinite(out.metrics["policy_loss"]) and grad_norm > 0
    metrics = dispatch.pop_metrics()
    assert metrics["optimizer_steps"] == 1 and metrics["lr"] == pytest.approx(0.01)
    assert not torch.equal(_logprobs(dispatch, "policy", data), old)  # the policy moved
    assert torch.equal(
        _logprobs(dispatch, "ref", data), data["base_action_log_probs"]
    )  # the reference did not
    assert dispatch.get_timing_metrics()["arctic/forward_backward"] > 0


def test_checkpoint_round_trip_restores_the_policy(setup, tmp_path):
    dispatch, data = setup
    data["action_log_probs"] = _logprobs(dispatch, "policy", data)
    data["base_action_log_probs"] = _logprobs(dispatch, "ref", data)
    data["advantages"] = torch.where(data["loss_mask"] > 0, torch.tensor([[1.0], [-1.0], [1.0], [-1.0]]), 0.0)
    dispatch.forward_backward("policy", data)
    dispatch.optim_step("policy")
    policy = tmp_path / "ckpt" / "global_step_1" / "policy"  # SkyRL's layout
    dispatch.save_checkpoint("policy", str(policy))
    saved = _logprobs(dispatch, "policy", data)
    marker = json.loads((policy / CHECKPOINT_MARKER).read_text())
    # relative to the marker's folder: a run folder moved elsewhere still resumes
    assert marker["step"] == 1 and marker["backend_path"] == "../../arctic_backend"
    assert (policy / marker["backend_path"]).resolve() == (tmp_path / "ckpt" / "arctic_backend").resolve()
    assert (tmp_path / "ckpt" / "arctic_backend" / "checkpoint-1").is_dir()
    dispatch.forward_backward("policy", data)
    dispatch.optim_step("policy")
    assert not torch.equal(_logprobs(dispatch, "policy", data), saved)
    dispatch.load_checkpoint("policy", str(policy))
    assert torch.equal(_logprobs(dispatch, "policy", data), saved) and dispatch.optimizer_steps == 1
    with pytest.raises(ValueError, match="load_optimizer_states=False"):
        dispatch.load_checkpoint("policy", str(policy), load_optimizer_states=False)
    with pytest.raises(ValueError, match="global_step_<n>"):  # not SkyRL's layout: no step to name
        dispatch.save_checkpoint("policy", str(tmp_path / "elsewhere"))


def test_checkpoints_kept_are_the_servers_save_total_limit(setup, tmp_path):
    """checkpoint.save_total_limit (SkyRL's trainer.max_ckpts_to_keep) and export_hf go with every
    backend save; the run's backend checkpoints share one folder, so the server keeps the newest N."""
    from arctic_rl_core.config.schema import CheckpointSettings

    dispatch, data = setup
    dispatch.checkpoint = CheckpointSettings(export_hf=True, save_total_limit=2)
    data["action_log_probs"] = _logprobs(dispatch, "policy", data)
    data["base_action_log_probs"] = _logprobs(dispatch, "ref", data)
    data["advantages"] = torch.where(data["loss_mask"] > 0, 1.0, 0.0)
    for step in (1, 2, 3):
        dispatch.forward_backward("policy", data)
        dispatch.optim_step("policy")
        dispatch.save_checkpoint("policy", str(tmp_path / f"global_step_{step}" / "policy"))
    backend_dir = tmp_path / "arctic_backend"
    assert sorted(p.name for p in backend_dir.iterdir() if p.is_dir()) == ["checkpoint-2", "checkpoint-3"]
    assert (backend_dir / "checkpoint-3" / "hf" / "config.json").is_file()
    dispatch.load_checkpoint("policy", str(tmp_path / "global_step_2" / "policy"))
    assert dispatch.optimizer_steps == 2
    with pytest.raises(FileNotFoundError, match="checkpoint-1"):  # pruned by the server
        dispatch.load_checkpoint("policy", str(tmp_path / "global_step_1" / "policy"))


def test_hf_export_is_a_checkpoint_with_its_hf_copy(setup, tmp_path):
    """SkyRL's `hf_save_interval` export (`save_hf_model` into export_path/global_step_<n>/policy): the
    server writes Hugging Face weights with a checkpoint (export_hf), of the current step, in that
    folder; the marker names the weights, which load as the trained policy (not the initial one)."""
    import json

    from adapter_skyrl.dispatch import HF_EXPORT_MARKER
    from safetensors.torch import load_file

    dispatch, data = setup
    data["action_log_probs"] = _logprobs(dispatch, "policy", data)
    data["base_action_log_probs"] = _logprobs(dispatch, "ref", data)
    data["advantages"] = torch.where(data["loss_mask"] > 0, 1.0, 0.0)
    dispatch.save_hf_model("policy", str(tmp_path / "global_step_0" / "policy"), None)
    dispatch.forward_backward("policy", data)
    dispatch.optim_step("policy")
    export = tmp_path / "global_step_1" / "policy"
    dispatch.save_hf_model("policy", str(export), None)
    marker = json.loads((export / HF_EXPORT_MARKER).read_text())
    assert marker == {"hf_dir": str(export / "checkpoint-1" / "hf"), "step": 1}
    before = load_file(tmp_path / "global_step_0" / "policy" / "checkpoint-0" / "hf" / "model.safetensors")
    after = load_file(export / "checkpoint-1" / "hf" / "model.safetensors")
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)


def test_what_the_dispatch_does_not_serve_is_an_error_naming_the_fix(setup):
    dispatch, data = setup
    with pytest.raises(ValueError, match=r"trainer\.critic\.model\.path"):
        dispatch.forward("critic", data)
    with pytest.raises(NotImplementedError, match="loss_fn"):
        dispatch.forward_backward("policy", data, loss_fn="cross_entropy")
    with pytest.raises(ValueError, match="do not split"):
        ArcticWorkerDispatch.stage_data(_with_rows_multiple(dispatch, 3), "policy", data, [(0, 4)])


def _with_rows_multiple(dispatch, rows: int):
    import dataclasses

    dispatch.spec = dataclasses.replace(dispatch.spec, grad_accum_steps=rows)
    return dispatch


def test_rollout_correction_weights_reach_the_wire_and_change_the_loss(setup):
    """SkyRL's token TIS (`off_policy_correction.tis_ratio_type=token`): the adapter sends SkyRL's own
    capped pi_old / pi_rollout as `rollout_is_weights`, and the server's loss multiplies by them."""
    dispatch, data = setup
    backend = dispatch.backend
    sent = []
    original = backend.forward_backward

    async def spy(payload):
        sent.append(payload)
        return await original(payload)

    backend.forward_backward = spy
    data["action_log_probs"] = _logprobs(dispatch, "policy", data)
    data["base_action_log_probs"] = _logprobs(dispatch, "ref", data)
    data["advantages"] = torch.where(data["loss_mask"] > 0, torch.tensor([[1.0], [-1.0], [1.0], [-1.0]]), 0.0)
    # the sampler's log-probs lower by 0.5 on the first two rows: pi_old / pi_rollout = e^0.5 = 1.65 -> capped
    shifted = data["rollout_logprobs"].clone()
    shifted[:2] -= 0.5
    data["rollout_logprobs"] = shifted
    plain = dispatch.forward_backward("policy", data).metrics["policy_loss"]
    algo = dispatch.cfg.trainer.algorithm
    algo.off_policy_correction.tis_ratio_type = "token"
    algo.off_policy_correction.token_tis_ratio_clip_high = 1.2
    try:
        weighted = dispatch.forward_backward("policy", data).metrics["policy_loss"]
    finally:
        algo.off_policy_correction.tis_ratio_type = None
    assert "rollout_is_weights" not in sent[0].batch
    weights = torch.as_tensor(sent[1].batch["rollout_is_weights"])
    mask = torch.as_tensor(sent[1].batch["response_mask"]) > 0
    first_two = torch.arange(4)[:, None] < 2
    capped = weights[mask & first_two]
    assert capped.numel() > 0 and torch.allclose(capped, torch.full_like(capped, 1.2))
    rest = weights[mask & ~first_two]
    assert torch.allclose(rest, torch.ones_like(rest), atol=1e-3)  # same weights sampled: ratio 1
    assert weighted != pytest.approx(plain, rel=1e-6)


def _without_forward(target):
    """`target` as a backend without forward (Cortex): the policy's old log-probs must not call it."""
    from arctic_rl_core.backends.forwarding import ForwardingBackend

    class NoForward(ForwardingBackend):
        serves_forward = False

        async def forward(self, payload, *, reference_model=False):
            raise AssertionError("forward() called on a backend without forward")

    return NoForward(target)


def test_without_a_server_forward_the_old_log_probs_are_the_samplers(setup):
    """Cortex: SkyRL's old-log-prob pass returns the rollout log-probs (right-aligned, zeros in front)
    with no backend call; a batch without them is a clear error."""
    dispatch, data = setup
    dispatch.backend = _without_forward(dispatch.backend)
    policy = _logprobs(dispatch, "policy", data)
    mask = data["response_mask"] > 0
    assert torch.equal(policy[mask], data["rollout_logprobs"][mask].float())
    assert torch.all(policy[~mask] == 0)
    without = TrainingInputBatch(
        {key: data[key] for key in ("sequences", "attention_mask", "response_mask", "loss_mask")}
    )
    without.metadata = dict(data.metadata)
    with pytest.raises(RuntimeError, match="no rollout_logprobs: on a backend without forward"):
        dispatch.forward("policy", without)
