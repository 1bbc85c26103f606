"""Payload rules: each broken payload is refused with a message naming the field and the fix."""

from __future__ import annotations

import copy

import pytest
import torch
from arctic_rl_core.backends.protocol import WirePayload
from arctic_rl_core.wire import build_forward_payload, build_train_payload
from arctic_rl_testbed.reference.validation import PayloadError


def _clone(payload: WirePayload) -> WirePayload:
    batch = {k: v.clone() for k, v in payload.batch.items()}
    return WirePayload(
        batch=batch, meta=copy.deepcopy(payload.meta), processing=copy.deepcopy(payload.processing)
    )


def _set(section, key, value):
    def mutate(p):
        getattr(p, section)[key] = value

    return mutate


def _drop(section, key):
    def mutate(p):
        getattr(p, section).pop(key)

    return mutate


def _shift_per_token_left(p):
    for key in ("response_mask", "loss_mask", "advantages", "old_log_probs"):
        p.batch[key] = torch.roll(p.batch[key], shifts=-1, dims=1)


def _actor(key, value):
    def mutate(p):
        p.meta["actor_config"][key] = value

    return mutate


TRAIN_CASES = [
    ("missing loss_fn", _drop("processing", "loss_fn"), r"processing.loss_fn is missing.*'ap_grpo'"),
    (
        "unknown loss",
        _set("processing", "loss_fn", "ppo_custom"),
        r"loss_fn='ppo_custom'.*verl_grpo, sft, sft_ce",
    ),
    (
        "no logprob post",
        _set("processing", "post", ["apply_temperature"]),
        r"add 'compute_entropy_and_logprobs'",
    ),
    ("unknown post", _set("processing", "post", ["compute_logprobs"]), r"contains 'compute_logprobs'"),
    ("unknown processing key", _set("processing", "posts", []), r"unknown keys \['posts'\]"),
    ("config for grpo", _set("processing", "config", {"x": 1}), r"processing.config has keys \['x'\]"),
    ("missing pad id", _drop("meta", "pad_token_id"), r"meta.pad_token_id is missing"),
    ("missing temperature", _drop("meta", "temperature"), r"meta.temperature is missing"),
    (
        "zero temperature",
        _set("meta", "temperature", 0.0),
        r"meta.temperature=0.0: must be a finite number > 0",
    ),
    ("missing batch_num_tokens", _drop("meta", "batch_num_tokens"), r"meta.batch_num_tokens is missing"),
    ("missing global_batch_size", _drop("meta", "global_batch_size"), r"meta.global_batch_size is missing"),
    ("dp size sent", _set("meta", "dp_size", 4), r"meta.dp_size=4 .*do not send it"),
    (
        "memory without zorro",
        _set("meta", "logits_optimization", "memory"),
        r"requires meta.zorro_train_enable",
    ),
    ("bad agg mode", _actor("loss_agg_mode", "sum"), r"loss_agg_mode='sum'"),
    (
        "entropy never computed",
        _actor("entropy_coeff", 0.1),
        r"entropy_coeff=0.1 but meta.calculate_entropy is false",
    ),
    ("kl without ref", _actor("use_kl_loss", True), r"ref_log_prob is missing but .*use_kl_loss=True"),
    (
        "max_prompt_len mismatch",
        _set("meta", "max_prompt_len", 9),
        r"meta.max_prompt_len=9 but batch.prompts is 6 wide",
    ),
    ("missing advantages", _drop("batch", "advantages"), r"batch.advantages is missing"),
    ("missing prompts", _drop("batch", "prompts"), r"batch.prompts is missing"),
    (
        "missing position ids",
        _drop("batch", "position_ids"),
        r"position_ids is missing and meta.drop_position_ids",
    ),
    (
        "per-token tensors shifted",
        _shift_per_token_left,
        r"response_mask\[\d+, 5\] is set at a prompt position",
    ),
    ("loss mask differs", lambda p: p.batch["loss_mask"].zero_(), r"loss_mask differs from response_mask"),
    (
        "nan advantage",
        lambda p: p.batch["advantages"].fill_(float("nan")),
        r"advantages\[0, 6\]=nan is not finite",
    ),
    (
        "numpy tensor",
        lambda p: p.batch.update(advantages=p.batch["advantages"].numpy()),
        r"is a ndarray: send torch",
    ),
    (
        "rows not divisible",
        lambda p: [p.batch.update({k: v[:3]}) for k, v in list(p.batch.items())],
        r"3 rows, not divisible by dp_size x grad_accum_steps = 2 x 1",
    ),
    (
        "short per-token tensor",
        lambda p: p.batch.update(advantages=p.batch["advantages"][:, :-1]),
        r"advantages has shape \(4, 10\).*\[B, S\]",
    ),
    (
        "right-padded prompt",
        lambda p: p.batch["attention_mask"][:, :6].copy_(torch.tensor([1, 1, 1, 1, 1, 0])),
        r"prompts must be LEFT-padded",
    ),
    (
        "wrong position ids",
        lambda p: p.batch["position_ids"].add_(1),
        r"position_ids\[0, \d+\]=\d+ but the token is",
    ),
    (
        "token out of vocab",
        lambda p: p.batch["input_ids"].__setitem__((0, 7), 5000),
        r"outside the model vocabulary",
    ),
    (
        "float input ids",
        lambda p: p.batch.update(input_ids=p.batch["input_ids"].float()),
        r"input_ids .*send \[B, S\] int64",
    ),
]


@pytest.fixture
def train_payload(engine_factory, ref):
    engine = engine_factory(dp_size=2)
    payload = build_train_payload(ref.samples(4, seed=1), ref.spec(engine))
    payload.batch["response_mask"][:, 6:] = payload.batch["attention_mask"][
        :, 6:
    ]  # every response token counts
    payload.batch["loss_mask"] = payload.batch["response_mask"].clone()
    return engine, payload


@pytest.mark.parametrize(("case", "mutate", "match"), TRAIN_CASES, ids=[c[0] for c in TRAIN_CASES])
def test_train_payload_rules(train_payload, ref, case, mutate, match):
    engine, payload = train_payload
    ref.run(engine.forward_backward(_clone(payload)))  # the unmodified payload is fine
    broken = _clone(payload)
    mutate(broken)
    with pytest.raises(PayloadError, match=match):
        ref.run(engine.forward_backward(broken))


def test_forward_rules(engine_factory, ref):
    engine = engine_factory(grad_accum_steps=2)
    payload = build_forward_payload(ref.samples(4), ref.spec(engine))
    ref.run(engine.forward(payload))
    with_loss = _clone(payload)
    with_loss.processing["loss_fn"] = "verl_grpo"
    with pytest.raises(PayloadError, match="forward without grad must send loss_fn: None"):
        ref.run(engine.forward(with_loss))
    implicit = _clone(payload)
    implicit.processing.pop("loss_fn")
    with pytest.raises(PayloadError, match="must send loss_fn: None explicitly"):
        ref.run(engine.forward(implicit))
    as_dict = {"batch": payload.batch, "meta": payload.meta}
    with pytest.raises(PayloadError, match=r"missing \['processing'\]"):
        ref.run(engine.forward(as_dict))
    three = WirePayload(batch=[payload.batch] * 3, meta=payload.meta, processing=payload.processing)
    with pytest.raises(PayloadError, match="list of 3 micro-batches but the engine runs 2"):
        ref.run(engine.forward(three))


def test_drop_position_ids_rebuilds_them(engine_factory, ref):
    engine = engine_factory()
    spec = ref.spec(engine)
    samples = ref.samples(4, seed=2)
    full = build_forward_payload(samples, spec)
    dropped = build_forward_payload(samples, ref.spec(engine, drop_position_ids=True))
    assert "position_ids" not in dropped.batch
    assert torch.equal(
        ref.run(engine.forward(full)).logprobs_B_S, ref.run(engine.forward(dropped)).logprobs_B_S
    )


def test_sft_needs_labels_and_no_temperature(engine_factory, ref):
    engine = engine_factory()
    payload = build_train_payload(ref.samples(4), ref.spec(engine, loss_fn="sft", temperature=0.5))
    with pytest.raises(PayloadError, match="labels is missing: the 'sft' loss needs labels"):
        ref.run(engine.forward_backward(payload))
    payload.batch["labels"] = torch.where(
        payload.batch["response_mask"] != 0, payload.batch["input_ids"], -100
    )
    with pytest.raises(PayloadError, match=r"SFT pipeline .* runs no post-processors"):
        ref.run(engine.forward_backward(payload))
    payload.processing["post"] = []
    assert ref.run(engine.forward_backward(payload)).loss > 0
