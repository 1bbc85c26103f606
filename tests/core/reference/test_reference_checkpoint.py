"""Checkpoints resume bit-identically; the same seed and inputs give the same outputs and weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.wire import build_train_payload

SETTINGS = dict(
    seed=3,
    optimizer={"lr": 5e-3, "weight_decay": 0.01},
    schedule={"kind": "cosine", "warmup_steps": 1, "total_steps": 6},
)


def _train(engine, ref, seeds):
    spec = ref.spec(engine)
    for seed in seeds:
        ref.run(engine.forward_backward(build_train_payload(ref.samples(4, seed=seed), spec)))
        ref.run(engine.step())


def _after_sync_sample(engine, ref):
    ref.run(engine.wake_inference(["weights"]))
    ref.run(engine.sync_weights())
    ref.run(engine.wake_inference(["kv_cache"]))
    ref.run(engine.reset_prefix_cache())
    out = ref.run(engine.generate(["SELECT", "The"], SamplingParams(max_tokens=6, temperature=1.0)))
    return [c.token_ids for c in out.completions]


def test_resume_is_bit_identical_to_an_uninterrupted_run(engine_factory, ref, tmp_path):
    straight = engine_factory(**SETTINGS)
    ref.run(straight.generate(["warm up the sampler rng"], SamplingParams(max_tokens=3)))
    _train(straight, ref, [0, 1, 2, 3])

    first = engine_factory(**SETTINGS)
    ref.run(first.generate(["warm up the sampler rng"], SamplingParams(max_tokens=3)))
    _train(first, ref, [0, 1])
    directory = ref.run(first.save_checkpoint(str(tmp_path), step=2))
    assert Path(directory) == tmp_path / "checkpoint-2" and (tmp_path / "latest").read_text() == "2"
    resumed = engine_factory(**SETTINGS)
    ref.run(resumed.load_checkpoint(str(tmp_path), step=2))
    assert resumed.global_step == 2
    _train(resumed, ref, [2, 3])

    a, b = straight.trainer_parameters(), resumed.trainer_parameters()
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert _after_sync_sample(straight, ref) == _after_sync_sample(resumed, ref)  # sampler RNG restored too
    assert ref.run(resumed.state()).trainer_version == 4


def test_same_seed_same_run(engine_factory, ref):
    runs = []
    for _ in range(2):
        engine = engine_factory(**SETTINGS)
        samples = _after_sync_sample(engine, ref)
        _train(engine, ref, [5, 6])
        runs.append((samples, _after_sync_sample(engine, ref), engine.trainer_parameters()))
    (s0, t0, w0), (s1, t1, w1) = runs
    assert s0 == s1 and t0 == t1
    assert all(torch.equal(w0[n], w1[n]) for n in w0)


def test_checkpoint_rules(engine_factory, ref, tmp_path):
    engine = engine_factory()
    ref.run(engine.forward_backward(build_train_payload(ref.samples(4), ref.spec(engine))))
    with pytest.raises(RuntimeError, match="gradients accumulated since the last step"):
        ref.run(engine.save_checkpoint(str(tmp_path), 1))
    ref.run(engine.step())
    ref.run(engine.save_to(tmp_path / "ckpt", export_hf=True))
    assert (tmp_path / "ckpt" / "hf" / "config.json").is_file()
    other = engine_factory(model={"hidden_size": 32})
    with pytest.raises(ValueError, match="holds a different model"):
        ref.run(other.load_from(tmp_path / "ckpt"))
    with pytest.raises(FileNotFoundError, match="not a reference checkpoint"):
        ref.run(engine.load_checkpoint(str(tmp_path), 99))
    ref.run(engine.sleep_training("all"))
    with pytest.raises(RuntimeError, match="call wake_training"):
        ref.run(engine.save_checkpoint(str(tmp_path), 2))


def test_export_hf_and_save_total_limit_as_the_server_does(engine_factory, ref, tmp_path):
    """0.1.4: `save(step, export_hf, save_total_limit)` writes checkpoint-<step>/hf and keeps the newest N."""
    from transformers import AutoModelForCausalLM

    engine = engine_factory(**SETTINGS)
    for step in (1, 2, 3):
        _train(engine, ref, [step])
        directory = ref.run(
            engine.save_checkpoint(str(tmp_path), step=step, export_hf=step == 3, save_total_limit=2)
        )
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["checkpoint-2", "checkpoint-3"]
    assert (tmp_path / "latest").read_text() == "3"
    assert not (tmp_path / "checkpoint-2" / "hf").exists()
    exported = AutoModelForCausalLM.from_pretrained(str(Path(directory) / "hf"))
    trained = engine.trainer_parameters()
    assert all(torch.equal(p, trained[n]) for n, p in exported.named_parameters())
    with pytest.raises(ValueError, match=r"save_total_limit=-1: an integer >= 0"):
        ref.run(engine.save_checkpoint(str(tmp_path), step=4, save_total_limit=-1))
