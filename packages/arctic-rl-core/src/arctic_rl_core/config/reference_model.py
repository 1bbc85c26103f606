"""Settings of the reference engine's model: a tiny causal LM built from a config, or a local
directory. Light module (pydantic only): the config schema embeds it as `backend.reference`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ReferenceModelConfig(BaseModel):
    """The reference backend's model. Nothing is ever downloaded: either a tiny model is built
    from these numbers and initialised from the seed, or `model_path` names a local directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_path: str | None = Field(
        default=None,
        description="Local Hugging Face-format model directory to load instead of building a tiny model.",
    )
    architecture: Literal["qwen3", "llama"] = Field(
        default="qwen3", description="Architecture of the tiny model built from a config."
    )
    num_layers: int = Field(default=2, ge=1, description="Transformer layers of the tiny model.")
    hidden_size: int = Field(default=64, ge=8, description="Hidden size of the tiny model.")
    num_attention_heads: int = Field(default=4, ge=1, description="Attention heads.")
    num_key_value_heads: int = Field(
        default=2, ge=1, description="Key/value heads (grouped-query attention)."
    )
    intermediate_size: int = Field(default=128, ge=8, description="MLP width.")
    max_position_embeddings: int = Field(
        default=4096, ge=64, description="Longest sequence the model accepts."
    )
    tokenizer_path: str | None = Field(
        default=None,
        description="Local tokenizer directory; None uses the tokenizer bundled with the package.",
    )
    weight_sync_bucket_mb: float = Field(
        default=1.0,
        gt=0,
        description="Bucket size of the flat buffers used to copy trainer weights to the sampler.",
    )
    device: Literal["cpu", "cuda"] = Field(default="cpu", description="Device the engine runs on.")
    dtype: Literal["float32", "bfloat16"] = Field(default="float32", description="Parameter dtype.")

    @model_validator(mode="after")
    def _check_heads(self) -> ReferenceModelConfig:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"backend.reference.hidden_size={self.hidden_size} is not divisible by "
                f"num_attention_heads={self.num_attention_heads}: pick sizes that divide"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"backend.reference.num_attention_heads={self.num_attention_heads} is not divisible by "
                f"num_key_value_heads={self.num_key_value_heads}: pick sizes that divide"
            )
        return self
