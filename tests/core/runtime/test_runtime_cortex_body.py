"""The Cortex forward-backward body lowered from the canonical train payload: rows left-aligned,
per-token context shifted onto the prediction of each token, the grpo loss settings, and what it
refuses. Cortex's step result (no metrics) read back."""

from __future__ import annotations

import pytest
import torch
from arctic_rl_core.backends.cortex_body import CortexBodyError, forward_backward_body, step_result
from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload

PAD = 7
PROMPTS = [[11, 12, 13], [21], [31, 32]]
RESPONSES = [[14, 15], [22, 23, 24, 25], [33]]
OLD = [[-0.5, -0.25], [-1.0, -2.0, -3.0, -4.0], [-0.125]]
ADV = [1.5, -0.5, 2.0]


def _payload(**spec_fields) -> tuple:
    spec = PayloadSpec(
        pad_token_id=PAD, max_prompt_len=4, max_response_len=5, rollout_n=1, temperature=0.6, **spec_fields
    )
    samples = [
        RolloutSample(prompt_ids=p, response_ids=r, advantages=a, old_logprobs=o)
        for p, r, a, o in zip(PROMPTS, RESPONSES, ADV, OLD, strict=True)
    ]
    return build_train_payload(samples, spec), samples


def test_rows_are_left_aligned_and_the_context_is_shifted() -> None:
    payload, samples = _payload(clip_ratio_low=0.1, clip_ratio_high=0.28, clip_ratio_c=4.0)
    body = forward_backward_body(payload)
    assert set(body) == {"args", "kwargs", "context", "processing"} and body["args"] == ()
    ids, attn = body["kwargs"]["input_ids"], body["kwargs"]["attention_mask"]
    width = max(len(p) + len(r) for p, r in zip(PROMPTS, RESPONSES, strict=True))
    assert ids.shape == (3, width)
    assert torch.equal(body["context"]["input_ids"], ids)
    assert torch.equal(body["kwargs"]["position_ids"][0], torch.arange(width))
    for b, sample in enumerate(samples):
        tokens = sample.prompt_ids + sample.response_ids
        n, p, r = len(tokens), len(sample.prompt_ids), len(sample.response_ids)
        assert ids[b, :n].tolist() == tokens and ids[b, n:].tolist() == [PAD] * (width - n)
        assert attn[b].tolist() == [1] * n + [0] * (width - n)
        # index i is about the prediction of token i + 1: response token j sits at p - 1 + j
        mask = body["context"]["loss_mask"][b]
        assert mask.tolist() == [0.0] * (p - 1) + [1.0] * r + [0.0] * (width - p - r + 1)
        window = slice(p - 1, p - 1 + r)
        assert body["context"]["old_log_probs_shifted"][b, window].tolist() == OLD[b]
        assert body["context"]["advantages"][b, window].tolist() == [ADV[b]] * r
        assert float(body["context"]["advantages"][b].abs().sum()) == pytest.approx(abs(ADV[b]) * r)
    processing = body["processing"]
    assert processing["loss_fn"] == "grpo" and processing["post"] == ["compute_logprobs"]
    assert processing["config"] == {
        "eps_clip": 0.1,
        "eps_clip_higher": 0.28,
        "c_clip": 4.0,
        "loss_agg_mode": "token-mean",
        "entropy_coeff": 0.0,
        "global_batch_size": 3,
        "batch_num_tokens": sum(map(len, RESPONSES)),
    }


def test_identity_rollout_weights_are_left_out_and_others_refused() -> None:
    payload, _ = _payload()
    ones = payload.batch["response_mask"].to(torch.float32)
    payload.batch["rollout_is_weights"] = ones
    assert "rollout_is_weights" not in forward_backward_body(payload)["context"]
    payload.batch["rollout_is_weights"] = ones * 0.5
    with pytest.raises(CortexBodyError, match="rollout_is_weights differ from 1"):
        forward_backward_body(payload)


def test_other_losses_and_kl_are_refused() -> None:
    payload, _ = _payload()
    payload.processing["loss_fn"] = "arctic_rl_losses.server.policy_loss"
    with pytest.raises(CortexBodyError, match="only its built-in 'grpo'"):
        forward_backward_body(payload)
    payload, _ = _payload()
    payload.meta["actor_config"]["use_kl_loss"] = True
    with pytest.raises(CortexBodyError, match="no reference log-probs"):
        forward_backward_body(payload)


def test_step_result_has_no_metrics_and_no_gradient_norm() -> None:
    assert step_result({"global_steps": 3, "last_lr": [2e-5, 2e-5]}) == (2e-5, 3, {})
    lr, steps, extras = step_result({"global_steps": 1, "last_lr": 1e-6, "peak_memory": {"gpu_peak": 5}})
    assert (lr, steps, extras) == (1e-6, 1, {"peak_memory/gpu_peak": 5.0})
    with pytest.raises(RuntimeError, match="no numeric last_lr"):
        step_result({"global_steps": 1, "metrics": {"grad_norm": 1.0}})
