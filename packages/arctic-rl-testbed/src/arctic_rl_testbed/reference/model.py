"""The reference backend's causal LM: a tiny Qwen3 or Llama built from `ReferenceModelConfig` and
initialised from a seed, or a local Hugging Face directory. Nothing is ever downloaded."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from arctic_rl_core.config.reference_model import ReferenceModelConfig

from arctic_rl_testbed.reference.tokenizer import build_tokenizer

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

ATTENTION_IMPLEMENTATION = "sdpa"


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def resolve_device(model_cfg: ReferenceModelConfig) -> torch.device:
    import torch

    if model_cfg.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "backend.reference.device='cuda' but torch sees no CUDA device: use device='cpu' on this machine"
        )
    return torch.device(model_cfg.device)


def load_tokenizer(model_cfg: ReferenceModelConfig) -> PreTrainedTokenizerBase:
    """`tokenizer_path`, else the `model_path` directory when it holds a tokenizer, else the bundled one."""

    if model_cfg.tokenizer_path is not None:
        return build_tokenizer(model_cfg.tokenizer_path)
    if model_cfg.model_path is not None:
        directory = Path(model_cfg.model_path)
        if (directory / "tokenizer.json").is_file() or (directory / "tokenizer_config.json").is_file():
            return build_tokenizer(directory)
    return build_tokenizer(None)


def build_model(
    model_cfg: ReferenceModelConfig, seed: int, tokenizer: PreTrainedTokenizerBase | None = None
) -> PreTrainedModel:
    """The model in train mode on `model_cfg.device` with `model_cfg.dtype`.

    Built from the config and initialised from `seed` (the caller's global RNG is left untouched),
    or loaded from `model_cfg.model_path`. The vocabulary comes from `tokenizer` (default: the
    tokenizer `load_tokenizer` picks)."""
    import torch

    tok = tokenizer if tokenizer is not None else load_tokenizer(model_cfg)
    dtype = torch_dtype(model_cfg.dtype)
    device = resolve_device(model_cfg)
    if model_cfg.model_path is not None:
        model = _load_local(model_cfg.model_path, dtype, len(tok))
    else:
        config = _tiny_config(model_cfg, tok)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _model_class(model_cfg.architecture)(config)
        model = model.to(dtype=dtype)
    model.to(device)
    model.train()
    return model


def _tiny_config(model_cfg: ReferenceModelConfig, tokenizer: PreTrainedTokenizerBase):
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=model_cfg.hidden_size,
        intermediate_size=model_cfg.intermediate_size,
        num_hidden_layers=model_cfg.num_layers,
        num_attention_heads=model_cfg.num_attention_heads,
        num_key_value_heads=model_cfg.num_key_value_heads,
        head_dim=model_cfg.hidden_size // model_cfg.num_attention_heads,
        max_position_embeddings=model_cfg.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=int(tokenizer.pad_token_id),
        eos_token_id=int(tokenizer.eos_token_id),
        bos_token_id=None,
        attention_dropout=0.0,
    )
    if model_cfg.architecture == "qwen3":
        from transformers import Qwen3Config

        config = Qwen3Config(**common)
    else:
        from transformers import LlamaConfig

        config = LlamaConfig(**common)
    config._attn_implementation = ATTENTION_IMPLEMENTATION
    return config


def _model_class(architecture: str):
    if architecture == "qwen3":
        from transformers import Qwen3ForCausalLM

        return Qwen3ForCausalLM
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM


def _load_local(model_path: str, dtype: torch.dtype, tokenizer_size: int) -> PreTrainedModel:
    from transformers import AutoModelForCausalLM

    directory = Path(model_path)
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(
            f"backend.reference.model_path={model_path!r} has no config.json: give a local Hugging Face "
            "model directory (nothing is downloaded), or None to build the tiny model"
        )
    model = AutoModelForCausalLM.from_pretrained(
        str(directory), local_files_only=True, dtype=dtype, attn_implementation=ATTENTION_IMPLEMENTATION
    )
    vocab = model.get_input_embeddings().weight.shape[0]
    if vocab < tokenizer_size:
        raise ValueError(
            f"model at {model_path!r} has {vocab} embeddings but its tokenizer has {tokenizer_size} tokens: "
            "set backend.reference.tokenizer_path to the model's own tokenizer"
        )
    return model


def save_model_dir(directory: str | Path, model_cfg: ReferenceModelConfig, seed: int) -> Path:
    """Write the tiny model (initialised from `seed`) and its tokenizer as a local Hugging Face
    directory, for frameworks that want a model path (e.g. verl's `actor_rollout_ref.model.path`)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(model_cfg)
    model = build_model(model_cfg, seed, tokenizer)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
