"""The Hugging Face `model_type` (and whether it takes images) of a policy model, found without a
download: a dry run checks settings on a machine that may have neither the model nor a network.

In order: `config.json` of a local model directory; the same file in the local Hugging Face hub cache
(`$HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`); the model's name (a hub id such as
`Qwen/Qwen3-8B` or a folder named after it), read by the families' naming patterns. None when
nothing tells."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

# Name patterns (lower case, after the org) -> model_type; the first match wins. Only families the
# launchers of the supported frameworks train; an unknown name gives None.
_NAME_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"qwen3[._-]?5.*(a\d+b|moe)", "qwen3_5_moe"),
    (r"qwen3[._-]?5", "qwen3_5"),
    (r"qwen3[._-]?next", "qwen3_next"),
    (r"qwen3[._-]?vl", "qwen3_vl"),
    (r"qwen3.*a\d+b", "qwen3_moe"),
    (r"qwen3", "qwen3"),
    (r"qwen2[._-]?5[._-]?vl", "qwen2_5_vl"),
    (r"qwen2[._-]?vl", "qwen2_vl"),
    (r"qwen2|qwen1[._-]?5", "qwen2"),
    (r"llama", "llama"),
    (r"mistral|mixtral", "mistral"),
    (r"deepseek", "deepseek"),
    (r"gpt[._-]?oss", "gpt_oss"),
    (r"gemma", "gemma"),
    (r"glm[._-]?4[._-]?\dv|glm.*v-", "glm4v"),
    (r"glm", "glm"),
    (r"minicpm[._-]?[ov]", "minicpmo"),
    (r"internvl", "internvl"),
    (r"kimi[._-]?vl", "kimi_vl"),
    (r"mimo", "mimo"),
    (r"moonlight", "deepseek_v3"),
    (r"seed[._-]?oss", "seed_oss"),
    (r"nemotron", "nemotron"),
)

# model_type values of vision-language models: the model is trained on images (or video) by design.
# (Qwen3.5's configs carry a vision tower too, but its text-only launchers train it on text: only the
# data settings tell whether a run feeds it images.)
VISION_MODEL_TYPES: frozenset[str] = frozenset(
    {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm4v_moe", "minicpmo", "minicpmv",
     "internvl", "internvl_chat", "kimi_vl", "llava", "mllama"}
)  # fmt: skip


@dataclass(frozen=True)
class ModelType:
    model_type: str
    source: str  # "config.json at ...", "the hub cache", "the name"
    has_vision: bool


def _config_files(name: str) -> list[Path]:
    local = Path(os.path.expanduser(name))
    files = [local / "config.json"]
    if "/" in name and not name.startswith(("/", ".", "~")):
        cache = os.environ.get("HF_HUB_CACHE") or os.path.join(
            os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub"
        )
        snapshots = Path(cache) / f"models--{name.replace('/', '--')}" / "snapshots"
        if snapshots.is_dir():
            files.extend(sorted(snapshots.glob("*/config.json")))
    return files


def model_type_of(name: str | None) -> ModelType | None:
    """The `model_type` of the model `name` (a local folder or a hub id), or None."""
    if not name:
        return None
    for path in _config_files(name):
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and isinstance(config.get("model_type"), str):
            model_type = config["model_type"]
            return ModelType(model_type, f"config.json at {path.parent}", model_type in VISION_MODEL_TYPES)
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    for pattern, model_type in _NAME_PATTERNS:
        if re.search(pattern, base):
            return ModelType(model_type, "the name", model_type in VISION_MODEL_TYPES)
    return None
