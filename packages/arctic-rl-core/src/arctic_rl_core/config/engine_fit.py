"""Fit the Arctic engine's own defaults and constraints to a framework's settings (its batch shape, its
offload), instead of failing a config the framework itself would run.

A framework config carries the shapes (rollouts per prompt, lengths, the per-GPU token budget, the
micro-batch); the core adds the seed integration's defaults (ZoRRo on the on-prem backends, its load
balancer) and DeepSpeed's rule of equal micro-batches. Where those would turn the framework's valid
config into a refusal, `fit_engine_defaults` changes only what the user did not set themselves, and says so:

- ZoRRo (`zorro.enable` unset): kept on with groups of `m` rollouts, `m` the largest divisor of the
  group size whose prompt + m responses fit the token budget and that divides the micro-batch and the
  rows each GPU trains; off (with the reason) when no `m >= 2` fits, when the model is not of the
  Qwen3 family arctic-platform 0.1.4's ZoRRo patch supports, or without flash attention;
- the load balancer (`zorro.load_balancer` unset): groups split to fit the token budget, or off when
  not even one prompt + response fits it;
- the micro-batch: from the token budget when the framework sizes micro-batches by tokens (verl's
  `use_dynamic_bsz`), and cut to a divisor of the rows each GPU trains in a mini-batch where the
  framework would run a smaller last micro-batch (DeepSpeed needs equal ones);
- the ZeRO stage (`deepspeed.zero_stage` unset): 3 when parameters are offloaded (DeepSpeed offloads
  parameters on ZeRO-3 only; the optimizer state offloads on ZeRO-2, the default, too).

Every change comes with a notice naming the knob that overrides it (`knob`: how the framework spells
a core knob, e.g. verl's `+remote_backend.core.zorro.enable`) and the framework field that caused it
(`field`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from arctic_rl_core.config.run_config import ArcticRLConfig
from arctic_rl_core.config.schema import ONPREM_BACKENDS

# arctic-platform 0.1.4's ZoRRo train patch (rl/zorro_train/qwen_model_patcher.py): model_type values
# it patches (with its aliases); any other model fails when the training job loads it.
ZORRO_MODEL_TYPES: frozenset[str] = frozenset(
    {"qwen3", "qwen3_moe", "qwen3_5", "qwen3_5_moe", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}
)


@dataclass
class ShapeFit:
    """Core values to set (dotted core path -> value) and one notice per change."""

    values: dict[str, Any] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)


def _get(data: Mapping[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _has(data: Mapping[str, Any], path: str) -> bool:
    group, _, key = path.rpartition(".")
    node = _get(data, group) if group else data
    return isinstance(node, Mapping) and key in node


def _default(path: str) -> Any:
    group, _, key = path.partition(".")
    group_class = ArcticRLConfig.model_fields[group].annotation
    return group_class.model_fields[key].default


def _value(data: Mapping[str, Any], path: str) -> Any:
    return _get(data, path) if _has(data, path) else _default(path)


def _divisors(n: int) -> list[int]:
    """Divisors of n, largest first."""
    return [d for d in range(n, 0, -1) if n % d == 0]


def _largest_divisor_at_most(n: int, limit: int, multiple_of: int = 1) -> int | None:
    for d in _divisors(n):
        if d <= limit and d % multiple_of == 0:
            return d
    return None


def fit_engine_defaults(
    data: Mapping[str, Any],
    *,
    model_type: str | None,
    micro_from_token_budget: bool = False,
    knob: Callable[[str], str] = lambda path: path,
    field_name: Callable[[str], str] = lambda path: path,
) -> ShapeFit:
    """What to change in the core `data` (plain nested dict, as `ArcticRLConfig.from_dict` takes it)
    so that the engine's defaults fit its shapes. `model_type`: the policy model's HF `model_type`
    (None: unknown). `micro_from_token_budget`: the framework sizes micro-batches by the token budget
    (the micro-batch in `data`, if any, is then not the framework's)."""
    fit = ShapeFit()
    n = int(_value(data, "batch.rollouts_per_prompt"))
    prompt = int(_value(data, "batch.max_prompt_length"))
    response = int(_value(data, "batch.max_response_length"))
    budget = _get(data, "batch.max_token_len_per_gpu")
    micro = None if micro_from_token_budget else _get(data, "batch.micro_batch_size_per_gpu")
    rows_per_gpu = _rows_per_gpu(data, n)

    def tokens(group: int) -> int:
        return prompt + group * response

    def fits_budget(group: int) -> bool:
        return budget is None or tokens(group) <= budget

    zorro_default_on = _value(data, "backend.kind") in ONPREM_BACKENDS
    zorro_on = _get(data, "zorro.enable") if _has(data, "zorro.enable") else zorro_default_on
    group = _get(data, "zorro.max_rollouts") or n
    if not _has(data, "zorro.enable") and zorro_default_on:
        zorro_on, group = _fit_zorro(data, fit, model_type, n, micro, rows_per_gpu, fits_budget, tokens, knob,
                                     field_name)  # fmt: skip
    if (
        not _has(data, "zorro.load_balancer")
        and _value(data, "zorro.load_balancer")
        and not fits_budget(group)
    ):
        fitting = [m for m in _divisors(n) if fits_budget(m)]
        if fitting and not zorro_on and not _has(data, "zorro.max_rollouts"):
            group = fitting[0]
            fit.values["zorro.max_rollouts"] = group
            fit.notices.append(
                f"the load balancer groups at most {group} of each prompt's {n} rollouts: prompt + {group} "
                f"responses = {tokens(group)} tokens fit {field_name('batch.max_token_len_per_gpu')}={budget} "
                f"(set {knob('zorro.max_rollouts')} to choose)"
            )
        elif not fitting:
            fit.values["zorro.load_balancer"] = False
            fit.notices.append(
                f"the load balancer is off: one prompt + response ({tokens(1)} tokens) exceeds "
                f"{field_name('batch.max_token_len_per_gpu')}={budget}, the budget it packs each GPU to "
                f"(set {knob('zorro.load_balancer')}=true after raising it)"
            )
    if _value(data, "deepspeed.offload_param") and not _has(data, "deepspeed.zero_stage"):
        fit.values["deepspeed.zero_stage"] = 3
        fit.notices.append(
            f"ZeRO stage 3: {field_name('deepspeed.offload_param')}=true offloads the parameters, which DeepSpeed "
            f"does on ZeRO-3 only (set {knob('deepspeed.zero_stage')} to choose)"
        )
    multiple = group if zorro_on else 1
    if micro_from_token_budget:
        _micro_from_budget(data, fit, budget, rows_per_gpu, multiple, tokens, field_name)
    elif micro is not None and rows_per_gpu is not None and rows_per_gpu % micro:
        fitted = _largest_divisor_at_most(rows_per_gpu, micro, multiple)
        if fitted is not None:
            fit.values["batch.micro_batch_size_per_gpu"] = fitted
            fit.notices.append(
                f"{field_name('batch.micro_batch_size_per_gpu')}={micro} -> {fitted}: each GPU trains "
                f"{rows_per_gpu} rows of a mini-batch; the framework would run a smaller last micro-batch, "
                "DeepSpeed needs equal ones"
            )
    return fit


def _rows_per_gpu(data: Mapping[str, Any], n: int) -> int | None:
    """Rows of one mini-batch each data-parallel rank trains (None: not a whole number)."""
    prompts = int(_value(data, "batch.prompts_per_step"))
    mini = _get(data, "batch.mini_batch_prompts") or prompts
    gpus = int(_value(data, "placement.training_gpus"))
    sp = int(_value(data, "placement.ulysses_sequence_parallel_size"))
    if gpus % sp:
        return None
    dp = gpus // sp
    rows = int(mini) * n
    return rows // dp if rows % dp == 0 else None


def _fit_zorro(data, fit, model_type, n, micro, rows_per_gpu, fits_budget, tokens, knob, field_name):
    """ZoRRo's default (on) fitted: (on, group size)."""
    enable = knob("zorro.enable")
    if model_type is not None and model_type not in ZORRO_MODEL_TYPES:
        return _zorro_off(
            fit, n, f"arctic-platform 0.1.4's ZoRRo patch supports Qwen3-family models only, and "
            f"{_get(data, 'model.name') or 'the model'} is {model_type!r}", enable,
        )  # fmt: skip
    attn = _value(data, "kernels.attn_implementation")
    if not str(attn).startswith("flash_attention"):
        return _zorro_off(fit, n, f"it packs sequences and needs flash attention, not {attn}", enable)
    fixed = _get(data, "zorro.max_rollouts")
    candidates = [fixed] if fixed else [m for m in _divisors(n) if m >= 2]
    reasons: list[str] = []
    for m in candidates:
        if not fits_budget(m):
            reasons.append(
                f"prompt + {m} responses = {tokens(m)} tokens exceed "
                f"{field_name('batch.max_token_len_per_gpu')}={_get(data, 'batch.max_token_len_per_gpu')}"
            )
            continue
        if micro is not None and micro % m:
            reasons.append(f"a micro-batch of {micro} rows cannot hold whole groups of {m}")
            continue
        if rows_per_gpu is not None and rows_per_gpu % m:
            reasons.append(
                f"the {rows_per_gpu} rows each GPU trains per mini-batch are not whole groups of {m}"
            )
            continue
        if m < n and not fixed:
            fit.values["zorro.max_rollouts"] = m
            fit.notices.append(
                f"ZoRRo packs groups of {m} of each prompt's {n} rollouts (with all {n}: {reasons[0]}; set "
                f"{knob('zorro.max_rollouts')} to choose)"
            )
        return True, m
    why = reasons[-1] if reasons else f"a group of {n} rollouts has no whole sub-group of 2 or more"
    return _zorro_off(fit, n, why, enable)


def _zorro_off(fit: ShapeFit, n: int, why: str, enable: str) -> tuple[bool, int]:
    fit.values["zorro.enable"] = False
    fit.notices.append(f"ZoRRo (prompt de-duplication in training) is off: {why} ({enable}=true to insist)")
    return False, n


def _micro_from_budget(data, fit, budget, rows_per_gpu, multiple, tokens, field_name) -> None:
    """Micro-batches sized by the token budget: as many rows (whole groups of `multiple` with ZoRRo,
    each group one prompt and its responses) as the budget holds at the longest lengths."""
    if budget is None:
        return
    per_unit = tokens(multiple)
    rows = max(1, int(budget) // per_unit) * multiple
    if rows_per_gpu is not None:
        rows = _largest_divisor_at_most(rows_per_gpu, min(rows, rows_per_gpu), multiple) or multiple
    fit.values["batch.micro_batch_size_per_gpu"] = rows
    unit = (
        f"groups of {multiple} (prompt + {multiple} responses" if multiple > 1 else "rows (prompt + response"
    )
    fit.notices.append(
        f"micro-batches of {rows} rows from the token budget {field_name('batch.max_token_len_per_gpu')}={budget}: "
        f"{unit} = {per_unit} tokens at the longest lengths)"
        + (f", a divisor of the {rows_per_gpu} rows each GPU trains per mini-batch" if rows_per_gpu else "")
    )


def set_values(data: dict[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with the dotted `values` set (a new nested dict; `data` is not changed)."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for path, value in values.items():
        node = out
        *groups, key = path.split(".")
        for part in groups:
            node[part] = dict(node.get(part) or {})
            node = node[part]
        node[key] = value
    return out
