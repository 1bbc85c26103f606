"""LoRA adapters on the reference engine, with the `peft` library, as Cortex trains them.

The adapter config is arctic-platform 0.1.4's `training.peft` (a PEFT `LoraConfig` as a dict, sent as
`peft_config` to Cortex's training and sampling sub-jobs). The trainer and the sampler each wrap their
copy of the base model with the same adapter shape (Cortex's sampler enables vLLM's LoRA manager from
the same config); only the adapter tensors train, and a LoRA-format sync sends only those.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# Cortex's server defaults (DSS-Server-API-Specification, "For LoRA training": r and lora_alpha 8).
SERVER_DEFAULTS: dict[str, Any] = {"r": 8, "lora_alpha": 8}
ADAPTER_MARKER = "lora_"  # PEFT's adapter parameters: ...lora_A.<name>.weight, ...lora_B.<name>.weight


def lora_config(peft: dict[str, Any]) -> Any:
    """The `peft.LoraConfig` of a 0.1.4 `training.peft` dict; ValueError naming the key otherwise."""
    from peft import LoraConfig

    data = dict(peft)
    kind = str(data.pop("peft_type", "")).lower()
    if kind != "lora":
        raise ValueError(
            f"peft_config.peft_type={peft.get('peft_type')!r}: only LoRA adapters are trained (peft_type 'Lora')"
        )
    data = {**SERVER_DEFAULTS, **data}
    if not isinstance(data["r"], int) or isinstance(data["r"], bool) or data["r"] < 1:
        raise ValueError(f"peft_config.r={data['r']!r}: the adapter rank is a positive integer")
    try:
        return LoraConfig(task_type="CAUSAL_LM", **data)
    except (TypeError, ValueError) as error:
        raise ValueError(f"peft_config {peft}: not a PEFT LoraConfig ({error})") from error


def with_adapters(model: Any, peft: dict[str, Any]) -> Any:
    """`model` wrapped with fresh LoRA adapters (base weights frozen, adapters trainable)."""
    from peft import get_peft_model

    return get_peft_model(model, lora_config(peft))


def is_adapter(name: str) -> bool:
    return ADAPTER_MARKER in name


def adapter_parameters(model: Any) -> dict[str, torch.Tensor]:
    """Detached copies of the adapter tensors only (what a LoRA-format sync sends)."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if is_adapter(name)}


def base_parameters(model: Any) -> dict[str, torch.Tensor]:
    """Detached copies of every non-adapter tensor (the frozen base)."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if not is_adapter(name)}


def merged_copy(model: Any) -> Any:
    """A plain model with the adapters folded into the base weights (W + B A x alpha / r); `model`
    itself is left as is."""

    return copy.deepcopy(model).merge_and_unload()
