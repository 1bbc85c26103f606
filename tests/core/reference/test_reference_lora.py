"""LoRA on the reference engine (the `peft` library), as Cortex trains it: only the adapter tensors
train, the base stays frozen, a LoRA-format sync sends only the adapters, and the sampler then serves
the merged effect (base + B A x alpha / r)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch
from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.wire import build_train_payload
from arctic_rl_testbed.reference.engine import ReferenceBackend
from arctic_rl_testbed.reference.lora import is_adapter, lora_config, merged_copy
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

from .conftest import _samples, _spec

PEFT = {
    "peft_type": "Lora",
    "r": 4,
    "lora_alpha": 8,
    "lora_dropout": 0.0,
    "bias": "none",
    "target_modules": ["q_proj", "v_proj"],
}
PROMPT = [[11, 12, 13, 14, 15, 16]]


def _logits(model, ids=PROMPT) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids)).logits.float()


def _train(engine: ReferenceBackend, seed: int) -> None:
    payload = build_train_payload(_samples(4, seed=seed), _spec(engine))
    asyncio.run(engine.forward_backward(payload))
    asyncio.run(engine.step())


@pytest.fixture(scope="module")
def run() -> SimpleNamespace:
    """One LoRA engine, two optimizer steps, one sync (in LoRA format, the engine's default)."""
    engine = ReferenceBackend(ReferenceEngineSettings(peft=PEFT, optimizer={"lr": 1e-2}, colocated=False))
    start = SimpleNamespace(
        trainer=engine.trainer_parameters(),
        sampler=engine.sampler_parameters(),
        sampler_logits=_logits(engine._sampler),
    )
    _train(engine, seed=1)
    _train(engine, seed=2)
    trained = engine.trainer_parameters()
    before_sync = engine.sampler_parameters()
    report = asyncio.run(engine.sync_weights_detailed())
    asyncio.run(engine.reset_prefix_cache())
    yield SimpleNamespace(
        engine=engine,
        start=start,
        trained=trained,
        before_sync=before_sync,
        after_sync=engine.sampler_parameters(),
        report=report,
    )
    asyncio.run(engine.shutdown())


def test_only_the_adapter_tensors_train(run):
    adapters = sorted(name for name in run.trained if is_adapter(name))
    # 2 layers x (q_proj, v_proj) x (lora_A, lora_B)
    assert len(adapters) == 8 and all(("lora_A" in n) or ("lora_B" in n) for n in adapters)
    changed = sorted(
        name for name in run.trained if not torch.equal(run.trained[name], run.start.trainer[name])
    )
    assert changed == adapters  # every adapter moved (B at step 1, A once B != 0), nothing else did
    trainable = [name for name, p in run.engine._trainer.named_parameters() if p.requires_grad]
    assert sorted(trainable) == adapters
    optimized = sum(len(group["params"]) for group in run.engine._optimizer.param_groups)
    assert optimized == len(adapters)


def test_lora_sync_sends_only_the_adapters(run):
    adapters = {name: p for name, p in run.trained.items() if is_adapter(name)}
    assert run.report.weight_format == "lora" and run.report.weights_version == 2
    assert run.report.transfer.num_tensors == len(adapters) == 8
    assert run.report.transfer.num_bytes == sum(p.numel() * p.element_size() for p in adapters.values())
    total = sum(p.numel() * p.element_size() for p in run.trained.values())
    assert run.report.transfer.num_bytes < total / 50  # the adapters are a small fraction of the model
    for name, tensor in run.after_sync.items():
        assert torch.equal(tensor, run.trained[name]), name  # adapters received, base identical


def test_the_sampler_serves_the_merged_effect_only_after_the_sync(run):
    base = _logits(run.engine._reference)
    # at the start B = 0: the sampler's adapters change nothing
    torch.testing.assert_close(run.start.sampler_logits, base, rtol=0, atol=1e-6)
    for name in run.before_sync:  # trained, not yet synced: the sampler still holds the start
        assert torch.equal(run.before_sync[name], run.start.sampler[name]), name
    merged = merged_copy(run.engine._trainer)
    assert not any(is_adapter(name) for name, _ in merged.named_parameters())
    sampled = _logits(run.engine._sampler)
    torch.testing.assert_close(sampled, _logits(merged), rtol=1e-5, atol=1e-5)
    assert (sampled - base).abs().max() > 1e-3  # the adapters moved the policy the sampler serves
    # and the sampler generates from it (greedy tokens from the merged model's logits)
    out = asyncio.run(run.engine.generate(PROMPT, SamplingParams(max_tokens=1, temperature=0.0)))
    assert out.weights_version == 2
    assert list(out.completions[0].token_ids) == [int(torch.argmax(_logits(merged)[0, -1]))]


def test_a_full_format_sync_of_a_lora_engine_sends_every_tensor(run):
    report = asyncio.run(run.engine.sync_weights_detailed(weight_format="vllm"))
    asyncio.run(run.engine.reset_prefix_cache())
    assert report.weight_format == "full" and report.transfer.num_tensors == len(run.trained)


def test_lora_format_on_a_dense_engine_is_refused():
    engine = ReferenceBackend(ReferenceEngineSettings(colocated=False))
    try:
        with pytest.raises(ValueError, match="trains full weights"):
            asyncio.run(engine.sync_weights(weight_format="lora"))
        with pytest.raises(ValueError, match="weight_format='safetensors'"):
            asyncio.run(engine.sync_weights(weight_format="safetensors"))
    finally:
        asyncio.run(engine.shutdown())


def test_adapter_checkpoint_round_trip(run, tmp_path):
    asyncio.run(run.engine.save_to(tmp_path / "ckpt"))
    other = ReferenceBackend(ReferenceEngineSettings(peft=PEFT, optimizer={"lr": 1e-2}, colocated=False))
    try:
        assert asyncio.run(other.load_from(tmp_path / "ckpt")) == run.engine.global_step
        mine, theirs = run.engine.trainer_parameters(), other.trainer_parameters()
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[n], theirs[n]) for n in mine)
    finally:
        asyncio.run(other.shutdown())


@pytest.mark.parametrize(
    ("peft", "match"),
    [
        ({**PEFT, "peft_type": "PREFIX_TUNING"}, "only LoRA adapters"),
        ({**PEFT, "r": 0}, "positive integer"),
        ({**PEFT, "not_a_lora_key": 1}, "not a PEFT LoraConfig"),
    ],
)
def test_a_bad_peft_config_names_the_key(peft, match):
    with pytest.raises(ValueError, match=match):
        lora_config(peft)


def test_server_defaults_fill_r_and_alpha():
    config = lora_config({"peft_type": "Lora", "target_modules": ["q_proj"]})
    assert (config.r, config.lora_alpha) == (8, 8)


def test_engine_settings_from_the_core_config_carry_peft():
    from arctic_rl_core.config import ArcticRLConfig

    cfg = ArcticRLConfig.from_dict({"peft": {"lora_rank": 4, "target_modules": ["q_proj"]}})
    settings = ReferenceEngineSettings.from_config(cfg)
    assert settings.peft == cfg.peft.peft_config() and settings.peft["r"] == 4
    assert ReferenceEngineSettings.from_config(ArcticRLConfig.from_dict({})).peft is None
