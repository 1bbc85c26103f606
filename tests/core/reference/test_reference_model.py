"""The tiny model: built from a config, initialised from a seed, or loaded from a local directory."""

from __future__ import annotations

import pytest
import torch
from arctic_rl_core.config.reference_model import ReferenceModelConfig
from arctic_rl_testbed.reference.model import build_model, load_tokenizer, save_model_dir


def _weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_same_seed_same_weights_and_caller_rng_untouched():
    cfg = ReferenceModelConfig()
    torch.manual_seed(123)
    expected_draw = torch.rand(3)
    torch.manual_seed(123)
    first = _weights(build_model(cfg, seed=7))
    draw_after = torch.rand(3)
    second = _weights(build_model(cfg, seed=7))
    other = _weights(build_model(cfg, seed=8))
    assert torch.equal(draw_after, expected_draw)  # building a model does not consume the caller's RNG
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not torch.equal(first["model.embed_tokens.weight"], other["model.embed_tokens.weight"])


@pytest.mark.parametrize("architecture", ["qwen3", "llama"])
def test_shapes_follow_the_config(architecture):
    cfg = ReferenceModelConfig(
        architecture=architecture,
        num_layers=1,
        hidden_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=48,
    )
    model = build_model(cfg, seed=0)
    tokenizer = load_tokenizer(cfg)
    assert model.config.model_type == architecture
    assert model.config.num_hidden_layers == 1 and model.config.hidden_size == 32
    assert model.get_input_embeddings().weight.shape == (len(tokenizer), 32)
    assert model.training
    logits = model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, len(tokenizer)) and torch.isfinite(logits).all()


def test_bfloat16_dtype():
    model = build_model(ReferenceModelConfig(dtype="bfloat16"), seed=0)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_local_directory_round_trip(tmp_path):
    cfg = ReferenceModelConfig()
    save_model_dir(tmp_path / "tiny", cfg, seed=3)
    built = build_model(cfg, seed=3)
    loaded_cfg = ReferenceModelConfig(model_path=str(tmp_path / "tiny"))
    loaded = build_model(loaded_cfg, seed=999)  # the seed does not matter for a loaded model
    assert len(load_tokenizer(loaded_cfg)) == len(load_tokenizer(cfg))
    ids = torch.tensor([[5, 6, 7, 8]])
    assert torch.equal(built(input_ids=ids).logits, loaded(input_ids=ids).logits)


def test_missing_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"model_path=.*no config\.json"):
        build_model(ReferenceModelConfig(model_path=str(tmp_path)), seed=0)
