"""The optimizer step: AdamW with clipping and the LR schedule against a float64 re-computation."""

from __future__ import annotations

import math

import pytest
import torch
from arctic_rl_core.wire import build_train_payload
from arctic_rl_testbed.reference.settings import ScheduleSettings
from arctic_rl_testbed.reference.sleep_state import BackendStateError


def test_adamw_with_clipping_and_decay_matches_float64_formula(engine_factory, ref):
    lr, betas, eps, wd, clip = 0.01, (0.8, 0.95), 0.5, 0.1, 0.05
    engine = engine_factory(
        optimizer={"lr": lr, "betas": betas, "eps": eps, "weight_decay": wd, "grad_clip": clip}
    )
    spec = ref.spec(engine)
    w = {n: p.double() for n, p in engine.trainer_parameters().items()}
    m = {n: torch.zeros_like(p) for n, p in w.items()}
    v = {n: torch.zeros_like(p) for n, p in w.items()}
    for step in (1, 2):
        ref.run(engine.forward_backward(build_train_payload(ref.samples(4, seed=step), spec)))
        grads = {n: p.grad.double() for n, p in engine._trainer.named_parameters()}
        norm = math.sqrt(sum(float((g**2).sum()) for g in grads.values()))
        out = ref.run(engine.step())
        assert out.grad_norm == pytest.approx(norm, rel=1e-5)  # reported before clipping
        assert out.step == step and out.learning_rate == lr
        scale = min(1.0, clip / (norm + 1e-6))
        for n, g in grads.items():
            g = g * scale
            w[n] = w[n] * (1 - lr * wd)
            m[n] = betas[0] * m[n] + (1 - betas[0]) * g
            v[n] = betas[1] * v[n] + (1 - betas[1]) * g * g
            m_hat = m[n] / (1 - betas[0] ** step)
            v_hat = v[n] / (1 - betas[1] ** step)
            w[n] = w[n] - lr * m_hat / (v_hat.sqrt() + eps)
    for n, p in engine.trainer_parameters().items():
        torch.testing.assert_close(p.double(), w[n], atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ({"kind": "constant", "warmup_steps": 2}, [0.0, 0.5, 1.0, 1.0, 1.0]),
        ({"kind": "linear", "warmup_steps": 1, "total_steps": 5}, [0.0, 1.0, 0.75, 0.5, 0.25]),
        (
            {"kind": "cosine", "total_steps": 4, "min_lr_ratio": 0.1},
            [
                1.0,
                0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)),
                0.55,
                0.1 + 0.9 * 0.5 * (1 + math.cos(3 * math.pi / 4)),
                0.1,
            ],
        ),
    ],
)
def test_schedule_multipliers(schedule, expected):
    settings = ScheduleSettings(**schedule)
    assert [settings.multiplier(s) for s in range(5)] == pytest.approx(expected)


def test_step_reports_the_schedule_and_applies_it(engine_factory, ref):
    engine = engine_factory(
        optimizer={"lr": 0.1}, schedule={"kind": "linear", "warmup_steps": 2, "total_steps": 4}
    )
    spec = ref.spec(engine)
    seen = []
    for seed in range(3):
        ref.run(engine.forward_backward(build_train_payload(ref.samples(4, seed=seed), spec)))
        before = engine.trainer_parameters()
        out = ref.run(engine.step())
        moved = any(not torch.equal(before[n], p) for n, p in engine.trainer_parameters().items())
        seen.append((out.metrics["lr_applied"], out.learning_rate, moved))
    # first update has LR 0 (warmup from 0, Hugging Face convention): weights do not move
    assert seen == [
        (0.0, pytest.approx(0.05), False),
        (pytest.approx(0.05), pytest.approx(0.1), True),
        (pytest.approx(0.1), pytest.approx(0.05), True),
    ]


def test_step_rules(engine_factory, ref):
    engine = engine_factory()
    spec = ref.spec(engine)
    with pytest.raises(BackendStateError, match="without forward_backward"):
        ref.run(engine.step())
    ref.run(engine.forward_backward(build_train_payload(ref.samples(4), spec)))
    with pytest.raises(ValueError, match="takes the LR from its schedule"):
        ref.run(engine.step(learning_rate=0.5))
    # all-zero advantages give an all-zero gradient: the step is skipped as DeepSpeed's bf16 optimizer does
    engine2 = engine_factory()
    zero = [
        s.__class__(prompt_ids=s.prompt_ids, response_ids=s.response_ids, old_logprobs=s.old_logprobs)
        for s in ref.samples(4)
    ]
    before = engine2.trainer_parameters()
    ref.run(engine2.forward_backward(build_train_payload(zero, ref.spec(engine2))))
    out = ref.run(engine2.step())
    assert out.metrics["skipped"] == 1.0 and out.grad_norm == 0.0 and out.step == 0
    assert all(torch.equal(before[n], p) for n, p in engine2.trainer_parameters().items())


def test_non_finite_gradients_are_refused(engine_factory, ref):
    engine = engine_factory()
    ref.run(engine.forward_backward(build_train_payload(ref.samples(4), ref.spec(engine))))
    next(engine._trainer.parameters()).grad[0, 0] = float("nan")
    before = engine.trainer_parameters()
    with pytest.raises(FloatingPointError, match="gradient norm is nan"):
        ref.run(engine.step())
    assert all(torch.equal(before[n], p) for n, p in engine.trainer_parameters().items())
    assert all(p.grad is None for p in engine._trainer.parameters())
