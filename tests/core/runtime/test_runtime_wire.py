"""The canonical payload: exact layout, an independent per-row oracle, errors, inverse, digest."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from arctic_rl_core.backends.protocol import WirePayload
from arctic_rl_core.wire import (
    PayloadError,
    PayloadSpec,
    PayloadSpecError,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    payload_digest,
    payload_to_trace_record,
    response_logprobs,
    validate_payload,
    with_response_logprobs,
)


def _spec(**overrides) -> PayloadSpec:
    settings = dict(pad_token_id=0, max_prompt_len=4, max_response_len=3, rollout_n=2, temperature=0.7)
    return PayloadSpec(**(settings | overrides))


def _two_samples() -> list[RolloutSample]:
    return [
        RolloutSample([5, 6], [7, 8, 9], advantages=1.0, old_logprobs=[-0.5, -0.25, -2.0]),
        RolloutSample([1, 2, 3, 4], [9], response_mask=[1], advantages=[-0.5], old_logprobs=[-1.0]),
    ]


def test_train_payload_exact_layout():
    payload = build_train_payload(_two_samples(), _spec())
    b = {k: v.tolist() for k, v in payload.batch.items()}
    assert b["input_ids"] == [[0, 0, 5, 6, 7, 8, 9], [1, 2, 3, 4, 9, 0, 0]]
    assert b["attention_mask"] == [[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]
    # the server reads only the width of prompts: [B, P, 0], no bytes
    assert tuple(payload.batch["prompts"].shape) == (2, 4, 0) and payload.batch["prompts"].nbytes == 0
    assert b["position_ids"] == [[0, 0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 0, 0]]
    assert b["response_mask"] == [[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 0, 0]]
    # verl_grpo reads response_mask, never loss_mask: not sent
    assert "loss_mask" not in b
    assert b["advantages"] == [[0, 0, 0, 0, 1.0, 1.0, 1.0], [0, 0, 0, 0, -0.5, 0, 0]]
    # token-aligned: response token j of a row at column P + j
    assert b["old_log_probs"] == [[0, 0, 0, 0, -0.5, -0.25, -2.0], [0, 0, 0, 0, -1.0, 0, 0]]
    dtypes = {k: str(v.dtype) for k, v in payload.batch.items()}
    assert dtypes == {
        "input_ids": "torch.int64",
        "attention_mask": "torch.bool",
        "prompts": "torch.bool",
        "position_ids": "torch.int64",
        "response_mask": "torch.bool",
        "advantages": "torch.float32",
        "old_log_probs": "torch.float32",
    }
    assert payload.processing == {
        "post": ["apply_temperature", "compute_entropy_and_logprobs"],
        "loss_fn": "verl_grpo",
    }
    assert payload.meta == {
        "pad_token_id": 0,
        "max_prompt_len": 4,
        "max_response_len": 3,
        "rollout_n": 2,
        "temperature": 0.7,
        "calculate_entropy": False,
        "zorro_train_enable": False,
        "zorro_train_max_rollouts": 2,
        "load_balancer": False,
        "logits_optimization": "none",
        "logits_optimization_peak_mem_size_in_gib": 4.0,
        "logits_compute_in_fp32": False,
        "drop_position_ids": False,
        "batch_num_tokens": 4,
        "global_batch_size": 2,
        "actor_config": {
            "loss_agg_mode": "token-mean",
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.2,
            "clip_ratio_c": 3.0,
            "use_kl_loss": False,
            "kl_loss_coef": 0.001,
            "kl_loss_type": "low_var_kl",
            "entropy_coeff": 0.0,
        },
        "policy_loss_config": {"loss_mode": "vanilla"},
    }
    validate_payload(payload)


def test_forward_payload_has_model_inputs_temperature_and_no_loss():
    payload = build_forward_payload(_two_samples(), _spec(calculate_entropy=True))
    assert set(payload.batch) == {"input_ids", "attention_mask", "prompts", "position_ids"}
    assert payload.processing == {
        "post": ["apply_temperature", "compute_entropy_and_logprobs"],
        "loss_fn": None,
    }
    assert payload.meta["temperature"] == 0.7 and payload.meta["calculate_entropy"] is True
    assert "actor_config" not in payload.meta and "batch_num_tokens" not in payload.meta
    train = build_train_payload(_two_samples(), _spec(calculate_entropy=True))
    for key in payload.batch:  # the forward sees exactly the inputs the train step will see
        assert torch.equal(payload.batch[key], train.batch[key])
    validate_payload(payload)


def test_optional_fields_and_knobs_reach_the_payload():
    samples = [
        dataclasses.replace(
            s, ref_logprobs=[-0.1] * len(s.response_ids), rollout_logprobs=[-0.2] * len(s.response_ids)
        )
        for s in _two_samples()
    ]
    spec = _spec(
        use_kl_loss=True,
        kl_loss_type="k3+",
        entropy_coeff=0.01,
        calculate_entropy=True,
        loss_scale_factor=64.0,
        loss_fn="my_pkg.losses.custom",
        drop_position_ids=True,
        zorro_train_enable=True,
        zorro_train_max_rollouts=1,
        load_balancer=True,
        max_token_len_per_gpu=4096,
        logits_optimization="memory",
    )
    payload = build_train_payload(samples, spec)
    assert "position_ids" not in payload.batch
    assert payload.batch["ref_log_prob"][0].tolist() == pytest.approx([0, 0, 0, 0, -0.1, -0.1, -0.1])
    assert payload.batch["rollout_log_probs"][1].tolist() == pytest.approx([0, 0, 0, 0, -0.2, 0, 0])
    assert payload.processing["loss_fn"] == "my_pkg.losses.custom"
    meta = payload.meta
    assert meta["actor_config"]["use_kl_loss"] is True and meta["actor_config"]["kl_loss_type"] == "k3+"
    assert meta["actor_config"]["entropy_coeff"] == 0.01 and meta["actor_config"]["loss_scale_factor"] == 64.0
    assert (meta["zorro_train_enable"], meta["zorro_train_max_rollouts"]) == (True, 1)
    assert (meta["load_balancer"], meta["max_token_len_per_gpu"], meta["logits_optimization"]) == (
        True,
        4096,
        "memory",
    )
    assert meta["drop_position_ids"] is True and meta["calculate_entropy"] is True
    validate_payload(payload)


def _oracle(samples: list[RolloutSample], spec: PayloadSpec) -> dict[str, list[list[float]]]:
    """Row-by-row construction with explicit Python loops: independent of the vectorised code."""
    P, R = spec.max_prompt_len, spec.max_response_len
    out: dict[str, list[list[float]]] = {
        k: []
        for k in (
            "input_ids",
            "attention_mask",
            "position_ids",
            "response_mask",
            "advantages",
            "old_log_probs",
        )
    }
    for s in samples:
        prompt, response = [int(x) for x in s.prompt_ids], [int(x) for x in s.response_ids]
        n = len(response)
        mask = [1] * n if s.response_mask is None else [int(x) for x in s.response_mask]
        adv = (
            [float(s.advantages)] * n
            if isinstance(s.advantages, (int, float))
            else [float(x) for x in s.advantages]
        )
        old = [float(x) for x in s.old_logprobs]
        left, right = P - len(prompt), R - n
        out["input_ids"].append([spec.pad_token_id] * left + prompt + response + [spec.pad_token_id] * right)
        out["attention_mask"].append([0] * left + [1] * (len(prompt) + n) + [0] * right)
        out["position_ids"].append([0] * left + list(range(len(prompt) + n)) + [0] * right)
        out["response_mask"].append([0] * P + mask + [0] * right)
        out["advantages"].append([0.0] * P + adv + [0.0] * right)
        out["old_log_probs"].append([0.0] * P + old + [0.0] * right)
    return out


def _random_samples(seed: int, B: int, P: int, R: int) -> list[RolloutSample]:
    rng = np.random.default_rng(seed)
    kinds = ["list", "tuple", "numpy", "torch"]
    samples = []
    for i in range(B):
        lp, lr = int(rng.integers(1, P + 1)), int(rng.integers(0, R + 1))
        if i == 0:
            lp, lr = P, R  # full rows
        if i == 1:
            lr = 0  # an empty response
        prompt, response = rng.integers(1, 1000, lp), rng.integers(1, 1000, lr)
        mask = rng.integers(0, 2, lr) if i % 3 == 0 else None
        adv = float(rng.normal()) if i % 2 else rng.normal(size=lr).astype(np.float32)
        old = -rng.random(lr).astype(np.float32)
        kind = kinds[i % 4]

        def conv(a, kind=kind):
            return {"list": a.tolist(), "tuple": tuple(a.tolist()), "numpy": a, "torch": torch.from_numpy(a)}[
                kind
            ]

        samples.append(
            RolloutSample(
                conv(prompt),
                conv(response),
                response_mask=None if mask is None else conv(mask),
                advantages=adv if isinstance(adv, float) else conv(adv),
                old_logprobs=conv(old),
            )
        )
    return samples


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_build_matches_row_by_row_oracle(seed: int):
    spec = _spec(max_prompt_len=9, max_response_len=7, dp_size=2, grad_accum_steps=2)
    samples = _random_samples(seed, B=12, P=9, R=7)
    payload = build_train_payload(samples, spec)
    expected = _oracle(samples, spec)
    for key, rows in expected.items():
        got = payload.batch[key]
        assert torch.equal(got, torch.tensor(rows, dtype=got.dtype)), key
    assert tuple(payload.batch["prompts"].shape) == (12, spec.max_prompt_len, 0)
    assert payload.meta["batch_num_tokens"] == sum(sum(r) for r in expected["response_mask"])
    assert payload.meta["global_batch_size"] == 12
    validate_payload(payload, dp_size=2, grad_accum_steps=2)


def test_response_logprobs_inverts_the_shift_and_masks():
    spec = _spec()
    samples = _two_samples()
    forward = build_forward_payload(samples, spec)
    P = spec.max_prompt_len
    # the server's shifted output: column t holds log p(token t+1); padding holds pad's value
    shifted = torch.full((2, 7), float(spec.pad_token_id))
    shifted[0, P - 1 : P + 2] = torch.tensor([-0.5, -0.25, -2.0])
    shifted[0, 2] = -9.0  # a prompt-token log-prob, not part of the response
    shifted[1, P - 1] = -1.0
    values, mask = response_logprobs(shifted, forward, spec)
    assert values.tolist() == [[-0.5, -0.25, -2.0], [-1.0, 0.0, 0.0]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]
    assert mask.dtype == torch.bool and values.dtype == torch.float32
    # numpy and lists are accepted; with a batch dict the spec decides the (non-ZoRRo) layout
    assert torch.equal(response_logprobs(shifted.numpy(), forward.batch, spec)[0], values)
    assert torch.equal(response_logprobs(shifted.tolist(), forward, spec)[0], values)

    # round trip into a train payload puts the same numbers at columns P + j
    train = build_train_payload(with_response_logprobs(samples, values, field="old_logprobs"), spec)
    assert torch.equal(
        train.batch["old_log_probs"], build_train_payload(samples, spec).batch["old_log_probs"]
    )


def test_response_logprobs_zorro_is_token_aligned():
    spec = _spec(zorro_train_enable=True)
    forward = build_forward_payload(_two_samples(), spec)
    aligned = torch.zeros(2, 7)
    aligned[0, 4:7] = torch.tensor([-0.5, -0.25, -2.0])
    aligned[1, 4] = -1.0
    values, _ = response_logprobs(aligned, forward, spec)
    assert values.tolist() == [[-0.5, -0.25, -2.0], [-1.0, 0.0, 0.0]]


def test_response_logprobs_rejects_mismatches():
    spec = _spec()
    forward = build_forward_payload(_two_samples(), spec)
    with pytest.raises(PayloadError, match=r"shape \(2, 6\)"):
        response_logprobs(torch.zeros(2, 6), forward, spec)
    wider = build_forward_payload(_two_samples(), _spec(max_response_len=4))
    with pytest.raises(PayloadError, match=r"max_response_len is 4 > spec\.max_response_len=3"):
        response_logprobs(torch.zeros(2, 8), wider, spec)
    tampered = WirePayload(batch=forward.batch, meta=dict(forward.meta, max_prompt_len=3), processing={})
    with pytest.raises(PayloadError, match=r"meta\.max_prompt_len=3 but the payload is 4 wide"):
        response_logprobs(torch.zeros(2, 7), tampered, spec)


@pytest.mark.parametrize(
    ("samples", "spec_overrides", "message"),
    [
        ([RolloutSample([1] * 5, [2])] * 2, {}, r"samples\[0\]\.prompt_ids has 5 tokens > max_prompt_len=4"),
        ([RolloutSample([], [2])] * 2, {}, r"samples\[0\]\.prompt_ids has 0 tokens: needs at least 1"),
        ([RolloutSample([1], [2, 2, 2, 2])] * 2, {}, r"response_ids has 4 tokens > max_response_len=3"),
        ([RolloutSample([1], [2])] * 3, {"dp_size": 2}, r"3 rollouts does not split evenly across dp_size=2"),
        (
            [RolloutSample([1], [2])] * 2,
            {"zorro_train_enable": True, "rollout_n": 4},
            "whole groups of rollout_n=4",
        ),
        ([RolloutSample([1], [2])] * 2, {}, r"old_logprobs is None for samples \[0, 1\]"),
        (
            [RolloutSample([1], [2, 3], old_logprobs=[-1.0])] * 2,
            {},
            r"samples\[0\]\.old_logprobs has 1 entries but response_ids has 2",
        ),
        ([RolloutSample([1], [2], old_logprobs=[0.5])] * 2, {}, "log-probs are <= 0"),
        ([RolloutSample([1], [2], old_logprobs=[float("nan")])] * 2, {}, "old_logprobs holds NaN"),
        (
            [RolloutSample([1], [2], advantages=float("inf"), old_logprobs=[-1.0])] * 2,
            {},
            "advantages holds NaN",
        ),
        ([RolloutSample([1], [2], response_mask=[2], old_logprobs=[-1.0])] * 2, {}, "values other than 0/1"),
        # masks travel as bool: 256 must not wrap to 0 on the way
        (
            [RolloutSample([1], [2], response_mask=[256], old_logprobs=[-1.0])] * 2,
            {},
            r"other than 0/1 \(e\.g\. 256\)",
        ),
        (
            [RolloutSample([1], [2], response_mask=np.array([256]), old_logprobs=[-1.0])] * 2,
            {},
            r"other than 0/1 \(e\.g\. 256\)",
        ),
        ([RolloutSample([1], [-2], old_logprobs=[-1.0])] * 2, {}, "negative token id"),
        (
            [RolloutSample(np.array([1.5]), [2], old_logprobs=[-1.0])] * 2,
            {},
            "token ids must be integers",
        ),
        ([RolloutSample(np.ones((1, 2), dtype=np.int64), [2])] * 2, {}, r"shape \(1, 2\): expected a 1-D"),
        (
            [RolloutSample([1], [2.5], old_logprobs=[-1.0])] * 2,
            {},
            r"samples\[0\]\.response_ids: entries must be integers",
        ),
        ([RolloutSample([1], ["a"], old_logprobs=[-1.0])] * 2, {}, "entries must be integers"),
        ([RolloutSample([1], [2], old_logprobs=["x"])] * 2, {}, r"old_logprobs: entries must be float32"),
        (
            [RolloutSample([1], [2], old_logprobs=[-1.0])] * 2,
            {"use_kl_loss": True},
            "use_kl_loss=True but ref_logprobs",
        ),
        (
            [
                RolloutSample([1], [2], old_logprobs=[-1.0], ref_logprobs=[-1.0]),
                RolloutSample([1], [2], old_logprobs=[-1.0]),
            ],
            {},
            r"ref_logprobs is set on some samples but None on samples \[1\]",
        ),
        ([], {}, "samples is empty"),
    ],
)
def test_bad_samples_get_errors_naming_field_value_and_remedy(samples, spec_overrides, message):
    with pytest.raises(PayloadError, match=message):
        build_train_payload(samples, _spec(**spec_overrides))


def test_response_mask_none_means_ones_per_sample():
    samples = [
        RolloutSample([1], [2, 3], old_logprobs=[-1.0, -1.0]),
        RolloutSample([1], [2, 3], response_mask=[0, 1], old_logprobs=[-1.0, -1.0]),
    ]
    payload = build_train_payload(samples, _spec())
    assert payload.batch["response_mask"][:, 4:].tolist() == [[1, 1, 0], [0, 1, 0]]
    assert payload.meta["batch_num_tokens"] == 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"temperature": 0.0}, r"temperature=0\.0: must be > 0"),
        ({"max_prompt_len": 0}, r"max_prompt_len=0: must be an integer >= 1"),
        ({"entropy_coeff": 0.01}, "set calculate_entropy=True"),
        ({"logits_optimization": "memory"}, "needs zorro_train_enable=True"),
        ({"load_balancer": True}, "needs max_token_len_per_gpu"),
        ({"loss_agg_mode": "mean"}, "loss_agg_mode='mean': expected one of token-mean"),
        ({"kl_loss_type": "k4"}, "kl_loss_type='k4'"),
        ({"clip_ratio_c": 1.0}, r"clip_ratio_c=1\.0: dual-clip bound must be > 1"),
        ({"temperature": "hot"}, "temperature='hot': must be a number"),
    ],
)
def test_spec_rejects_values_the_server_cannot_honour(overrides, message):
    with pytest.raises(PayloadSpecError, match=message):
        _spec(**overrides)


def test_spec_lists_every_problem_at_once():
    with pytest.raises(PayloadSpecError) as caught:
        _spec(dp_size=0, rollout_n=0, loss_agg_mode="x")
    text = str(caught.value)
    assert "dp_size=0" in text and "rollout_n=0" in text and "loss_agg_mode='x'" in text


# ----------------------------------------------------------------------------------------------
# validate_payload on payloads not built here
# ----------------------------------------------------------------------------------------------


def _mutated(payload: WirePayload, **changes) -> WirePayload:
    batch = {k: v.clone() for k, v in payload.batch.items()}
    meta, processing = dict(payload.meta), dict(payload.processing)
    for key, value in changes.items():
        section, _, name = key.partition("__")
        target = {"batch": batch, "meta": meta, "processing": processing}[section]
        if value is None:
            target.pop(name)
        else:
            target[name] = value(target[name]) if callable(value) else value
    return WirePayload(batch=batch, meta=meta, processing=processing)


def _hole_in_response(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t[0, 5] = 0  # row 0: response tokens at columns 4 and 6, a gap at 5
    return t


def _right_padded_prompts(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t[0, :4] = torch.tensor([1, 1, 0, 0])
    return t


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"batch__attention_mask": _right_padded_prompts},
            "must be a LEFT-padded prompt followed by a RIGHT-padded",
        ),
        (
            {"batch__attention_mask": _hole_in_response},
            "must be a LEFT-padded prompt followed by a RIGHT-padded",
        ),
        ({"batch__attention_mask": lambda t: t * 2}, "attention_mask holds values other than 0/1"),
        (
            {"batch__attention_mask": lambda t: t.index_fill_(1, torch.arange(4), 0)},
            "at least one prompt token",
        ),
        (
            {"batch__advantages": lambda t: t.index_fill_(1, torch.tensor([5]), float("nan"))},
            "advantages holds NaN",
        ),
        (
            {
                "batch__input_ids": lambda t: t.index_put_(
                    (torch.tensor([1]), torch.tensor([6])), torch.tensor(5)
                )
            },
            "non-pad",
        ),
        (
            {"batch__response_mask": lambda t: t.index_fill_(1, torch.tensor([1]), 1)},
            "set outside the real response",
        ),
        ({"batch__old_log_probs": lambda t: t.double()}, "old_log_probs has dtype torch.float64"),
        ({"batch__position_ids": lambda t: t + 1}, "position_ids are not 0..n-1"),
        ({"batch__labels": torch.zeros(2, 7)}, r"unknown keys \['labels'\]"),
        ({"batch__old_log_probs": None}, r"missing \['old_log_probs'\]"),
        ({"processing__loss_fn": None}, "processing.loss_fn is missing"),
        ({"processing__post": ["compute_entropy_and_logprobs"]}, "lacks 'apply_temperature'"),
        ({"meta__batch_num_tokens": torch.tensor(4)}, "not plain JSON data"),
        ({"meta__pad_token_id": None}, "meta.pad_token_id=None: required"),
        ({"batch__prompts": lambda t: t[:, 1:]}, r"prompts has shape \(2, 3, 0\)"),
        ({"batch__prompts": torch.zeros(2, 4, 1, dtype=torch.bool)}, r"prompts has shape \(2, 4, 1\)"),
    ],
)
def test_validate_payload_catches_contract_violations(changes, message):
    payload = build_train_payload(_two_samples(), _spec())
    with pytest.raises(PayloadError, match=message):
        validate_payload(_mutated(payload, **changes))


def test_validate_payload_accepts_micro_batch_lists_and_checks_the_split():
    payload = build_train_payload(_two_samples(), _spec())
    split = WirePayload(
        batch=[{k: v[i : i + 1] for k, v in payload.batch.items()} for i in range(2)],
        meta=payload.meta,
        processing=payload.processing,
    )
    validate_payload(split, grad_accum_steps=2)
    with pytest.raises(PayloadError, match="2 rows do not split evenly"):
        validate_payload(payload, dp_size=4)


# ----------------------------------------------------------------------------------------------
# Digest and trace
# ----------------------------------------------------------------------------------------------


def test_digest_is_stable_and_sensitive():
    spec = _spec()
    base = build_train_payload(_two_samples(), spec)
    digest = payload_digest(base)
    assert len(digest) == 64 and digest == payload_digest(build_train_payload(_two_samples(), spec))
    # meta key order and numpy scalars do not matter
    reordered = WirePayload(
        batch=dict(reversed(list(base.batch.items()))),
        meta={k: (np.float64(v) if k == "temperature" else v) for k, v in reversed(list(base.meta.items()))},
        processing=base.processing,
    )
    assert payload_digest(reordered) == digest
    # any change of a value, dtype, setting or shape changes it
    changed = [
        _mutated(
            base,
            batch__advantages=lambda t: t.index_put_(
                (torch.tensor([0]), torch.tensor([4])), torch.tensor(1.5)
            ),
        ),
        _mutated(base, batch__response_mask=lambda t: t.to(torch.int32)),
        _mutated(base, meta__temperature=0.70001),
        _mutated(base, processing__loss_fn="sft"),
        build_train_payload(_two_samples(), _spec(max_response_len=4)),
    ]
    assert len({payload_digest(p) for p in changed} | {digest}) == len(changed) + 1
    # a micro-batch list is a different payload from the same rows in one dict
    as_list = WirePayload(batch=[base.batch], meta=base.meta, processing=base.processing)
    assert payload_digest(as_list) != digest


def test_digest_matches_across_processes_and_is_pinned():
    script = textwrap.dedent(
        """
        from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload, payload_digest
        spec = PayloadSpec(pad_token_id=0, max_prompt_len=4, max_response_len=3, rollout_n=2, temperature=0.7)
        samples = [
            RolloutSample([5, 6], [7, 8, 9], advantages=1.0, old_logprobs=[-0.5, -0.25, -2.0]),
            RolloutSample([1, 2, 3, 4], [9], response_mask=[1], advantages=[-0.5], old_logprobs=[-1.0]),
        ]
        print(payload_digest(build_train_payload(samples, spec)))
        """
    )
    other = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    here = payload_digest(build_train_payload(_two_samples(), _spec()))
    assert other.stdout.strip() == here
    # Pinned: the canonical encoding is a format; changing it must be deliberate (bump DIGEST_VERSION).
    assert here == PINNED_DIGEST


PINNED_DIGEST = "bb09b888b200148812f175b4860ca76fed8fff3204d8e9efad59d6d06125f357"


def test_digest_follows_the_documented_encoding():
    """Re-derive the digest from the encoding described in wire/digest.py, independently."""
    import hashlib
    import struct

    payload = build_train_payload(_two_samples(), _spec())
    parts = [b"arctic-rl-wire-digest-v1", b"|batch:dict:1", f"|mb:{len(payload.batch)}".encode()]
    for name in sorted(payload.batch):
        t = payload.batch[name]
        dtype = str(t.dtype).removeprefix("torch.")
        parts.append(f"|t:{name}:{dtype}:{list(t.shape)}:".encode())
        values = t.reshape(-1).tolist()
        parts.append(struct.pack(f"<{len(values)}{ {'int64': 'q', 'bool': '?'}.get(dtype, 'f') }", *values))
    for section in ("meta", "processing"):
        text = json.dumps(getattr(payload, section), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        parts.append(f"|{section}:{text}".encode())
    assert payload_digest(payload) == hashlib.sha256(b"".join(parts)).hexdigest()


def test_trace_record_is_json_and_summarises_each_tensor():
    payload = build_train_payload(_two_samples(), _spec())
    record = payload_to_trace_record("forward_backward", payload)
    json.dumps(record)
    assert record["op"] == "forward_backward" and record["digest"] == payload_digest(payload)
    assert record["batch"]["old_log_probs"]["sum"] == pytest.approx(-3.75)
    assert record["batch"]["input_ids"] == {
        "dtype": "int64",
        "shape": [2, 7],
        "sum": float(payload.batch["input_ids"].sum()),
        "digest": record["batch"]["input_ids"]["digest"],
    }
    assert record["meta"]["batch_num_tokens"] == 4 and record["processing"]["loss_fn"] == "verl_grpo"
    with pytest.raises(TypeError, match="is not JSON data"):
        payload_digest(_mutated(payload, meta__global_batch_size=torch.tensor(2)))


def test_importing_wire_stays_light():
    script = (
        "import sys, arctic_rl_core.wire; print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


def test_spec_from_config_maps_every_payload_setting():
    from arctic_rl_core.config import load_config

    cfg = load_config(
        None,
        [
            "batch.max_prompt_length=32",
            "batch.max_response_length=16",
            "batch.rollouts_per_prompt=2",
            "batch.prompts_per_step=4",
            "batch.micro_batch_size_per_gpu=2",
            "loss.temperature=0.7",
            "loss.entropy_coeff=0.01",
            "loss.use_kl_loss=true",
            "loss.kl_loss_type=k3",
            "loss.kl_loss_coef=0.05",
            "loss.loss_agg_mode=seq-mean-token-sum-norm",
            "loss.loss_scale_factor=16",
            "zorro.enable=true",
            "zorro.load_balancer=true",
            "zorro.logits_optimization=memory",
            "zorro.logits_peak_mem_gib=2.5",
            "zorro.logits_compute_in_fp32=true",
            "wire.drop_position_ids=false",
            "wire.pad_to_multiple=8",
        ],
    )
    spec = PayloadSpec.from_config(cfg, pad_token_id=151643)
    shape = cfg.shape
    assert (spec.pad_token_id, spec.max_prompt_len, spec.max_response_len, spec.rollout_n) == (
        151643,
        32,
        16,
        2,
    )
    assert (spec.dp_size, spec.grad_accum_steps) == (
        shape.data_parallel_size,
        shape.gradient_accumulation_steps,
    )
    assert (spec.temperature, spec.entropy_coeff, spec.calculate_entropy) == (0.7, 0.01, True)
    assert (spec.use_kl_loss, spec.kl_loss_type, spec.kl_loss_coef) == (True, "k3", 0.05)
    assert (spec.loss_agg_mode, spec.loss_scale_factor, spec.loss_fn) == (
        "seq-mean-token-sum-norm",
        16.0,
        "verl_grpo",
    )
    assert (spec.zorro_train_enable, spec.load_balancer, spec.max_token_len_per_gpu) == (
        True,
        True,
        shape.max_token_len_per_gpu,
    )
    assert (spec.logits_optimization, spec.logits_optimization_peak_mem_size_in_gib) == ("memory", 2.5)
    assert spec.logits_compute_in_fp32 is True and spec.drop_position_ids is False
    assert spec.pad_to_multiple == 8
    # the train payload of one mini-batch fits the spec's row split
    samples = [
        RolloutSample([3, 4], [5, 6], old_logprobs=[-1.0, -1.0], ref_logprobs=[-1.0, -1.0], advantages=1.0)
    ] * shape.train_batch_size
    payload = build_train_payload(samples, spec)
    validate_payload(payload, dp_size=spec.dp_size, grad_accum_steps=spec.grad_accum_steps)
    assert payload.meta["logits_compute_in_fp32"] is True and "position_ids" in payload.batch
    # 2-token prompts pad to 8; ZoRRo keeps the response at max_response_length
    assert (payload.meta["max_prompt_len"], payload.meta["max_response_len"]) == (8, 16)
    # the defaults: position_ids dropped (the server rebuilds them), payloads padded to multiples of 64
    default = PayloadSpec.from_config(load_config(None, []), pad_token_id=0)
    assert default.drop_position_ids is True and default.pad_to_multiple == 64


def test_sft_payload_labels_every_response_token_and_nothing_else():
    from arctic_rl_core.wire import IGNORE_INDEX, PayloadError, build_sft_payload

    spec = PayloadSpec(
        pad_token_id=0, max_prompt_len=3, max_response_len=3, rollout_n=1, temperature=1.0, loss_fn="sft"
    )
    samples = [
        RolloutSample(prompt_ids=[5, 6], response_ids=[7]),
        RolloutSample(prompt_ids=[8, 9, 4], response_ids=[3, 2, 1]),
    ]
    payload = build_sft_payload(samples, spec)
    assert payload.batch["input_ids"].tolist() == [[0, 5, 6, 7, 0, 0], [8, 9, 4, 3, 2, 1]]
    n = IGNORE_INDEX
    assert payload.batch["labels"].tolist() == [[n, n, n, 7, n, n], [n, n, n, 3, 2, 1]]
    assert payload.processing == {"post": [], "loss_fn": "sft"}
    assert (payload.meta["batch_num_tokens"], payload.meta["global_batch_size"]) == (4, 2)
    with pytest.raises(PayloadError, match="loss_fn='verl_grpo'"):
        build_sft_payload(
            samples,
            PayloadSpec(pad_token_id=0, max_prompt_len=3, max_response_len=3, rollout_n=1, temperature=1.0),
        )
