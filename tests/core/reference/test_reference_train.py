"""Forward and forward-backward with the server's semantics: alignment, temperature, entropy, the
reference model, the verl_grpo and SFT losses, global normalisation across simulated ranks and
micro-batches, and ZoRRo's token-aligned layout."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from arctic_rl_core.backends.protocol import WirePayload
from arctic_rl_core.wire import (
    build_forward_payload,
    build_train_payload,
    response_logprobs,
    with_response_logprobs,
)
from arctic_rl_testbed.reference.loss import GlobalBatchInfo, GRPOLossConfig, grpo_loss


def _direct_logits(model, batch, temperature=1.0):
    with torch.no_grad():
        return (
            model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"],
            ).logits
            / temperature
        )


def test_forward_is_shifted_with_pad_value_padding_and_tempered(engine_factory, ref):
    engine = engine_factory()
    spec = ref.spec(engine, temperature=0.7, calculate_entropy=True)
    payload = build_forward_payload(ref.samples(4), spec)
    out = ref.run(engine.forward(payload))
    batch = payload.batch
    logp = torch.log_softmax(_direct_logits(engine._trainer, batch, 0.7), dim=-1)
    attention = batch["attention_mask"].bool()
    for b in range(4):
        real = attention[b].nonzero().flatten().tolist()
        for i in real[:-1]:  # the last real position is meaningless
            expected = logp[b, i, batch["input_ids"][b, i + 1]]
            assert out.logprobs_B_S[b, i].item() == pytest.approx(expected.item(), abs=1e-5)
            entropy = -(logp[b, i].exp() * logp[b, i]).sum()
            assert out.entropy_B_S[b, i].item() == pytest.approx(entropy.item(), abs=1e-5)
    pad = float(engine.pad_token_id)
    assert (out.logprobs_B_S[~attention] == pad).all() and (out.entropy_B_S[~attention] == pad).all()
    no_entropy = ref.run(engine.forward(build_forward_payload(ref.samples(4), ref.spec(engine))))
    assert no_entropy.entropy_B_S is None and out.metrics == {}


def test_reference_model_keeps_the_initial_weights(engine_factory, ref):
    engine = engine_factory(optimizer={"lr": 1e-2})
    spec = ref.spec(engine)
    payload = build_forward_payload(ref.samples(4), spec)
    before = ref.run(engine.forward(payload)).logprobs_B_S
    ref.run(engine.forward_backward(build_train_payload(ref.samples(4), spec)))
    ref.run(engine.step())
    after = ref.run(engine.forward(payload)).logprobs_B_S
    reference = ref.run(engine.forward(payload, reference_model=True)).logprobs_B_S
    assert torch.equal(reference, before)
    assert not torch.allclose(after, before)


def test_train_loss_matches_a_direct_recomputation(engine_factory, ref):
    engine = engine_factory()
    spec = ref.spec(engine, temperature=0.9, calculate_entropy=True, entropy_coeff=0.01, clip_ratio_high=0.28)
    samples = ref.samples(4, seed=3)
    payload = build_train_payload(samples, spec)
    result = ref.run(engine.forward_backward(payload))
    batch = payload.batch
    logp_all = torch.log_softmax(_direct_logits(engine._trainer, batch, 0.9), dim=-1)
    own = torch.zeros(batch["input_ids"].shape)
    for b, sample in enumerate(samples):  # response token j sits at P + j: its log-prob comes from P + j - 1
        for j, token in enumerate(sample.response_ids):
            own[b, ref.P + j] = logp_all[b, ref.P + j - 1, token]
    entropy = -(logp_all.exp() * logp_all).sum(-1)  # server convention: entropy unshifted
    config = GRPOLossConfig.from_meta(payload.meta["actor_config"], payload.meta["policy_loss_config"])
    info = GlobalBatchInfo(1, payload.meta["batch_num_tokens"], payload.meta["global_batch_size"])
    _expected, metrics = grpo_loss(
        own,
        batch["old_log_probs"],
        batch["advantages"],
        batch["response_mask"] != 0,
        config,
        info,
        entropy_B_T=entropy,
    )
    assert result.loss == pytest.approx(metrics["loss.sum"] / metrics["loss.tokens"], rel=1e-5)
    assert result.metrics["actor/pg_loss"] == pytest.approx(
        metrics["actor/pg_loss.sum"] / metrics["loss.tokens"], rel=1e-5
    )
    assert set(result.metrics) == {
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "actor/pg_clipfrac_lower",
        "actor/pg_loss",
        "actor/entropy_loss",
        "loss",
    }
    # the gradient is that of the aggregated loss
    grads = {n: p.grad.clone() for n, p in engine._trainer.named_parameters()}
    engine._trainer.zero_grad()
    logits = (
        engine._trainer(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits
        / 0.9
    )
    lp = torch.log_softmax(logits, -1)
    own_g = torch.zeros(batch["input_ids"].shape)
    for b, sample in enumerate(samples):
        for j, token in enumerate(sample.response_ids):
            own_g[b, ref.P + j] = lp[b, ref.P + j - 1, token]
    ent_g = -(lp.exp() * lp).sum(-1)
    loss, _ = grpo_loss(
        own_g,
        batch["old_log_probs"],
        batch["advantages"],
        batch["response_mask"] != 0,
        config,
        info,
        entropy_B_T=ent_g,
    )
    loss.backward()
    for name, param in engine._trainer.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_global_normalisation_makes_ranks_and_micro_batches_invisible(engine_factory, ref, mode):
    samples = ref.samples(8, seed=7)
    results = {}
    for dp, gas in ((1, 1), (2, 1), (2, 2), (1, 4)):
        engine = engine_factory(dp_size=dp, grad_accum_steps=gas)
        payload = build_train_payload(samples, ref.spec(engine, loss_agg_mode=mode))
        out = ref.run(engine.forward_backward(payload))
        grads = {n: p.grad.clone() for n, p in engine._trainer.named_parameters()}
        results[(dp, gas)] = (out.loss, ref.run(engine.step()).grad_norm, grads)
    loss0, norm0, grads0 = results[(1, 1)]
    assert norm0 > 0
    for key, (loss, norm, grads) in results.items():
        assert loss == pytest.approx(loss0, rel=1e-5), key
        assert norm == pytest.approx(norm0, rel=1e-5), key
        for name in grads0:
            torch.testing.assert_close(grads[name], grads0[name], atol=1e-7, rtol=1e-4)


def test_micro_batch_list_equals_the_dict_payload(engine_factory, ref):
    samples = ref.samples(8, seed=9)
    a = engine_factory(dp_size=2, grad_accum_steps=2)
    b = engine_factory(dp_size=2, grad_accum_steps=2)
    payload = build_train_payload(samples, ref.spec(a))
    rows = payload.batch["input_ids"].shape[0]
    # the server splits rows across ranks first, then micro-batches: rank r micro m holds rows r*4 + m*2 ..
    order = [0, 1, 4, 5, 2, 3, 6, 7]
    micro = [{k: v[order[i * 4 : (i + 1) * 4]] for k, v in payload.batch.items()} for i in range(2)]
    listed = WirePayload(batch=micro, meta=dict(payload.meta), processing=dict(payload.processing))
    assert rows == 8
    out_a = ref.run(a.forward_backward(payload))
    out_b = ref.run(b.forward_backward(listed))
    assert out_a.loss == pytest.approx(out_b.loss, rel=1e-6)
    ref.run(a.step())
    ref.run(b.step())
    wa, wb = a.trainer_parameters(), b.trainer_parameters()
    assert all(torch.allclose(wa[n], wb[n], atol=1e-7, rtol=0) for n in wa)


def test_loss_goes_down_on_a_fixed_batch(engine_factory, ref):
    engine = engine_factory(optimizer={"lr": 1e-4})
    spec = ref.spec(engine)
    samples = ref.samples(8, seed=1, with_old=False)
    payload = build_forward_payload(samples, spec)
    old, _ = response_logprobs(ref.run(engine.forward(payload)).logprobs_B_S, payload, spec)
    samples = [
        dataclasses.replace(s, advantages=1.0)
        for s in with_response_logprobs(samples, old, field="old_logprobs")
    ]
    train = build_train_payload(samples, spec)
    losses = []
    for _ in range(5):
        losses.append(ref.run(engine.forward_backward(train)).loss)
        ref.run(engine.step())
    assert losses[0] == pytest.approx(-1.0, abs=1e-5)  # ratio 1, advantage 1
    assert all(later < earlier for earlier, later in itertools.pairwise(losses))
    assert losses[-1] >= -1.2 - 1e-6  # the clip (1 + 0.2) bounds the objective


def test_a_grpo_step_moves_each_response_the_way_its_advantage_says(engine_factory, ref):
    """The whole chain (wire payload -> verl_grpo loss -> AdamW step) points the right way: after one
    step, responses with a positive advantage are more likely and those with a negative one less."""
    engine = engine_factory(optimizer={"lr": 1e-4})
    spec = ref.spec(engine)
    samples = ref.samples(8, seed=3, with_old=False)
    forward = build_forward_payload(samples, spec)
    before, mask = response_logprobs(ref.run(engine.forward(forward)).logprobs_B_S, forward, spec)
    advantages = [1.0, -1.0, 1.0, -1.0, -1.0, 1.0, -1.0, 1.0]
    train = build_train_payload(
        [
            dataclasses.replace(s, advantages=a)
            for s, a in zip(
                with_response_logprobs(samples, before, field="old_logprobs"), advantages, strict=True
            )
        ],
        spec,
    )
    ref.run(engine.forward_backward(train))
    ref.run(engine.step())
    after, _ = response_logprobs(ref.run(engine.forward(forward)).logprobs_B_S, forward, spec)
    change = ((after - before) * mask).sum(dim=1)
    assert [bool(c > 0) for c in change] == [a > 0 for a in advantages], change.tolist()


def test_kl_against_the_reference_model_starts_at_zero(engine_factory, ref):
    engine = engine_factory()
    spec = ref.spec(engine, use_kl_loss=True, kl_loss_coef=0.5, kl_loss_type="k3")
    samples = ref.samples(4, seed=2, with_old=False)
    payload = build_forward_payload(samples, spec)
    old, _ = response_logprobs(ref.run(engine.forward(payload)).logprobs_B_S, payload, spec)
    refp, _ = response_logprobs(
        ref.run(engine.forward(payload, reference_model=True)).logprobs_B_S, payload, spec
    )
    samples = with_response_logprobs(
        with_response_logprobs(samples, old, field="old_logprobs"), refp, field="ref_logprobs"
    )
    out = ref.run(engine.forward_backward(build_train_payload(samples, spec)))
    assert out.metrics["kl_loss"] == pytest.approx(0.0, abs=1e-6)
    assert out.metrics["kl_coef"] == 0.5
    assert out.metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)


def test_return_fwd_batch_gives_the_training_log_probs(engine_factory, ref):
    engine = engine_factory()
    spec = ref.spec(engine)
    samples = ref.samples(4, seed=4)
    forward = ref.run(engine.forward(build_forward_payload(samples, spec))).logprobs_B_S
    payload = build_train_payload(samples, spec)
    payload.meta["return_fwd_batch"] = True
    result = ref.run(engine.train(payload))
    torch.testing.assert_close(result.logprobs_B_S, forward, atol=1e-6, rtol=0)


def test_zorro_layout_is_token_aligned(engine_factory, ref):
    engine = engine_factory()
    samples = ref.samples(4, seed=5)
    plain_spec = ref.spec(engine, temperature=0.8)
    zorro_spec = ref.spec(engine, temperature=0.8, zorro_train_enable=True)
    plain = build_forward_payload(samples, plain_spec)
    zorro = build_forward_payload(samples, zorro_spec)
    zorro.processing["post"] = ["compute_entropy_and_logprobs"]  # ZoRRo applies meta.temperature in the model
    plain_out = ref.run(engine.forward(plain)).logprobs_B_S
    zorro_out = ref.run(engine.forward(zorro)).logprobs_B_S
    values_plain, _mask = response_logprobs(plain_out, plain, plain_spec)
    values_zorro, _ = response_logprobs(zorro_out, zorro, zorro_spec)
    torch.testing.assert_close(values_zorro, values_plain, atol=1e-6, rtol=0)
    window = zorro.batch["attention_mask"].bool().clone()
    window[:, : ref.P] = False
    assert (zorro_out[~window] == 0).all()
    loss_plain = ref.run(engine.forward_backward(build_train_payload(samples, plain_spec))).loss
    loss_zorro = ref.run(engine.forward_backward(build_train_payload(samples, zorro_spec))).loss
    assert loss_zorro == pytest.approx(loss_plain, rel=1e-6)


def _sft_payload(engine, ref, samples, loss_fn):
    spec = ref.spec(engine, loss_fn=loss_fn)
    payload = build_train_payload(samples, spec)
    batch = dict(payload.batch)
    labels = torch.where(
        batch["response_mask"] != 0, batch["input_ids"], torch.full_like(batch["input_ids"], -100)
    )
    batch["labels"] = labels
    return WirePayload(batch=batch, meta=payload.meta, processing={"post": [], "loss_fn": loss_fn})


def test_sft_losses_train_the_responses(engine_factory, ref):
    samples = ref.samples(4, seed=6)
    engine = engine_factory(optimizer={"lr": 3e-3}, grad_accum_steps=2)
    payload = _sft_payload(engine, ref, samples, "sft")
    losses = []
    for _ in range(4):
        losses.append(ref.run(engine.forward_backward(payload)).loss)
        ref.run(engine.step())
    assert all(later < earlier for earlier, later in itertools.pairwise(losses))
    # the reported loss is the token-mean cross-entropy of the response tokens
    fresh = engine_factory()
    out = ref.run(fresh.forward_backward(_sft_payload(fresh, ref, samples, "sft_ce")))
    batch = payload.batch
    logp = torch.log_softmax(_direct_logits(fresh._trainer, batch), -1)
    ce = [
        -logp[b, ref.P + j - 1, t].item() for b, s in enumerate(samples) for j, t in enumerate(s.response_ids)
    ]
    assert out.loss == pytest.approx(sum(ce) / len(ce), rel=1e-5)
