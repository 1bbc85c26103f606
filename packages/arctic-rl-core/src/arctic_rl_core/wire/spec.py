"""`PayloadSpec`: everything about a payload that is not per-sample data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig

from arctic_rl_losses.names import LOSS_AGG_MODES, POLICY_LOSSES, SERVER_LOSS_FN

from arctic_rl_core.config.server_packing import server_packs_rows_across_attention

KL_LOSS_TYPES: tuple[str, ...] = tuple(
    name + suffix for suffix in ("", "+") for name in ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl")
)
LOGITS_OPTIMIZATIONS: tuple[str, ...] = ("none", "compute", "memory")

# Post-processors, by the server's registered names.
POST_APPLY_TEMPERATURE = "apply_temperature"
POST_ENTROPY_AND_LOGPROBS = "compute_entropy_and_logprobs"


class PayloadSpecError(ValueError):
    """A `PayloadSpec` field has a value the server cannot honour."""


@dataclass(frozen=True)
class PayloadSpec:
    """Batch shape, sampling temperature, loss and ZoRRo settings of the payloads of one run.

    Field names follow the server's `meta` / `actor_config` keys where one exists. The sequence
    length of every payload is `max_prompt_len + max_response_len`.
    """

    pad_token_id: int
    max_prompt_len: int
    max_response_len: int
    rollout_n: int
    temperature: float
    dp_size: int = 1  # data-parallel training workers (the server splits rows across them)
    grad_accum_steps: int = 1  # micro-batches per worker and payload (DeepSpeed GAS)
    calculate_entropy: bool = False
    # loss (meta.actor_config / meta.policy_loss_config; processing.loss_fn)
    loss_fn: str = "verl_grpo"
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = "token-mean"
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    entropy_coeff: float = 0.0
    loss_scale_factor: float | None = None  # seq-mean-token-sum-norm divisor; None = server default
    # arctic_rl_losses (loss_fn = SERVER_LOSS_FN): the family and its knobs (meta.policy_loss_config)
    policy_loss: str = "dual_clip"
    pg_loss_agg_mode: str | None = None
    policy_loss_params: tuple[tuple[str, float], ...] = ()
    # ZoRRo and server-side batch handling (meta)
    zorro_train_enable: bool = False
    zorro_train_max_rollouts: int | None = None  # None: rollout_n
    load_balancer: bool = False
    max_token_len_per_gpu: int | None = None  # required by the load balancer
    logits_optimization: str = "none"
    logits_optimization_peak_mem_size_in_gib: float = 4.0
    logits_compute_in_fp32: bool = False
    drop_position_ids: bool = False  # omit position_ids; the server rebuilds them from attention_mask
    # Ask the server not to pack a micro-batch's rows into one [1, T] sequence: meta.cu_seqlens = None,
    # 0.1.4's "already packed" signal (`rl/processors/pipeline.py`: run_pipeline then skips its unpad).
    # Without flash attention's varlen kernel (sdpa, eager, flex_attention) the packed rows attend to
    # each other. Sent in forward payloads, and in train payloads whose loss reads the padded layout
    # (arctic_rl_losses); the built-in verl_grpo needs the packed layout (see `train_meta`).
    rows_unpacked: bool = False
    # None: every payload is [B, max_prompt_len + max_response_len]. An integer m: each payload is
    # padded to its own longest prompt / response, rounded up to a multiple of m and capped at the
    # maxima (the response width stays max_response_len under ZoRRo: the server's patched model
    # derives the prompt width as S - the response length it was built with).
    pad_to_multiple: int | None = None

    def __post_init__(self) -> None:
        problems = list(self._problems())
        if problems:
            raise PayloadSpecError("invalid PayloadSpec:\n  - " + "\n  - ".join(problems))

    def _problems(self):
        def positive_int(name: str, minimum: int) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                problems.append(f"{name}={value!r}: must be an integer >= {minimum}")

        def number(name: str) -> bool:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                problems.append(f"{name}={value!r}: must be a number")
                return False
            return True

        problems: list[str] = []
        for name in (
            "temperature",
            "clip_ratio_low",
            "clip_ratio_high",
            "clip_ratio_c",
            "kl_loss_coef",
            "entropy_coeff",
            "logits_optimization_peak_mem_size_in_gib",
        ):
            if not number(name):
                return problems
        if self.loss_scale_factor is not None and not number("loss_scale_factor"):
            return problems
        positive_int("pad_token_id", 0)
        positive_int("max_prompt_len", 1)
        positive_int("max_response_len", 1)
        positive_int("rollout_n", 1)
        positive_int("dp_size", 1)
        positive_int("grad_accum_steps", 1)
        if self.pad_to_multiple is not None:
            positive_int("pad_to_multiple", 1)
        if not self.temperature > 0:
            problems.append(
                f"temperature={self.temperature!r}: must be > 0 (the server divides logits by it)"
            )
        if not isinstance(self.loss_fn, str) or not self.loss_fn:
            problems.append(f"loss_fn={self.loss_fn!r}: must be a registered server loss name or dotted path")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            problems.append(
                f"loss_agg_mode={self.loss_agg_mode!r}: expected one of {', '.join(LOSS_AGG_MODES)}"
            )
        if self.policy_loss not in POLICY_LOSSES:
            problems.append(f"policy_loss={self.policy_loss!r}: expected one of {', '.join(POLICY_LOSSES)}")
        if self.loss_fn != SERVER_LOSS_FN and (
            self.policy_loss != "dual_clip" or self.pg_loss_agg_mode is not None or self.policy_loss_params
        ):
            problems.append(
                f"policy_loss={self.policy_loss!r} / pg_loss_agg_mode / policy_loss_params need "
                f"loss_fn={SERVER_LOSS_FN!r} (loss_fn is {self.loss_fn!r}, whose family is dual_clip)"
            )
        if self.kl_loss_type not in KL_LOSS_TYPES:
            problems.append(f"kl_loss_type={self.kl_loss_type!r}: expected one of {', '.join(KL_LOSS_TYPES)}")
        if self.clip_ratio_low < 0 or self.clip_ratio_high < 0:
            problems.append(
                f"clip_ratio_low={self.clip_ratio_low!r}, clip_ratio_high={self.clip_ratio_high!r}: must be >= 0"
            )
        if not self.clip_ratio_c > 1:
            problems.append(f"clip_ratio_c={self.clip_ratio_c!r}: dual-clip bound must be > 1")
        if self.kl_loss_coef < 0:
            problems.append(f"kl_loss_coef={self.kl_loss_coef!r}: must be >= 0")
        if self.loss_scale_factor is not None and not self.loss_scale_factor > 0:
            problems.append(f"loss_scale_factor={self.loss_scale_factor!r}: must be > 0 or None")
        if self.entropy_coeff != 0 and not self.calculate_entropy:
            problems.append(
                f"entropy_coeff={self.entropy_coeff!r} with calculate_entropy=False: the server adds the "
                "entropy bonus only when entropy is computed; set calculate_entropy=True"
            )
        if self.zorro_train_max_rollouts is not None and (
            isinstance(self.zorro_train_max_rollouts, bool)
            or not isinstance(self.zorro_train_max_rollouts, int)
            or self.zorro_train_max_rollouts < 1
        ):
            problems.append(
                f"zorro_train_max_rollouts={self.zorro_train_max_rollouts!r}: must be >= 1 or None"
            )
        if self.load_balancer and self.max_token_len_per_gpu is None:
            problems.append(
                "load_balancer=True needs max_token_len_per_gpu (the server's per-worker token budget)"
            )
        if self.max_token_len_per_gpu is not None and self.max_token_len_per_gpu < 1:
            problems.append(f"max_token_len_per_gpu={self.max_token_len_per_gpu!r}: must be >= 1 or None")
        if self.logits_optimization not in LOGITS_OPTIMIZATIONS:
            problems.append(
                f"logits_optimization={self.logits_optimization!r}: expected one of {', '.join(LOGITS_OPTIMIZATIONS)}"
            )
        elif self.logits_optimization == "memory" and not self.zorro_train_enable:
            problems.append("logits_optimization='memory' needs zorro_train_enable=True (server rule)")
        if not self.logits_optimization_peak_mem_size_in_gib > 0:
            problems.append(
                f"logits_optimization_peak_mem_size_in_gib={self.logits_optimization_peak_mem_size_in_gib!r}: "
                "must be > 0"
            )
        return problems

    @classmethod
    def from_config(cls, cfg: ArcticRLConfig, *, pad_token_id: int) -> PayloadSpec:
        """The spec of every payload of a run: lengths and group size from `batch`, the row
        split from `cfg.shape` (DP workers x GAS steps), loss settings from `loss`, server-side
        batch handling from `zorro` and `wire`. The pad token comes from the tokenizer."""
        shape, batch, loss, zorro = cfg.shape, cfg.batch, cfg.loss, cfg.zorro
        return cls(
            pad_token_id=pad_token_id,
            max_prompt_len=batch.max_prompt_length,
            max_response_len=batch.max_response_length,
            rollout_n=batch.rollouts_per_prompt,
            temperature=loss.temperature,
            dp_size=shape.data_parallel_size,
            grad_accum_steps=shape.gradient_accumulation_steps,
            calculate_entropy=loss.entropy_coeff != 0,
            loss_fn=cfg.server_loss_fn,
            policy_loss=loss.policy_loss,
            pg_loss_agg_mode=loss.pg_loss_agg_mode,
            policy_loss_params=tuple(sorted(loss.family_params().items())),
            clip_ratio_low=loss.clip_ratio_low,
            clip_ratio_high=loss.clip_ratio_high,
            clip_ratio_c=loss.clip_ratio_c,
            loss_agg_mode=loss.loss_agg_mode,
            use_kl_loss=loss.use_kl_loss,
            kl_loss_coef=loss.kl_loss_coef,
            kl_loss_type=loss.kl_loss_type,
            entropy_coeff=loss.entropy_coeff,
            loss_scale_factor=loss.loss_scale_factor,
            zorro_train_enable=zorro.enable,
            zorro_train_max_rollouts=zorro.max_rollouts,
            load_balancer=zorro.load_balancer,
            max_token_len_per_gpu=shape.max_token_len_per_gpu if zorro.load_balancer else None,
            logits_optimization=zorro.logits_optimization,
            logits_optimization_peak_mem_size_in_gib=zorro.logits_peak_mem_gib,
            logits_compute_in_fp32=zorro.logits_compute_in_fp32,
            drop_position_ids=cfg.wire.drop_position_ids,
            pad_to_multiple=cfg.wire.pad_to_multiple,
            rows_unpacked=server_packs_rows_across_attention(cfg),
        )

    # -- derived ------------------------------------------------------------------------------
    @property
    def seq_len(self) -> int:
        return self.max_prompt_len + self.max_response_len

    @property
    def rows_multiple(self) -> int:
        """Every payload's row count must be a multiple of this (DP workers x GAS steps)."""
        return self.dp_size * self.grad_accum_steps

    def payload_widths(self, longest_prompt: int, longest_response: int) -> tuple[int, int]:
        """(P, R) of a payload whose longest prompt / response have these lengths."""
        if self.pad_to_multiple is None:
            return self.max_prompt_len, self.max_response_len
        m = self.pad_to_multiple
        P = min(self.max_prompt_len, -(-max(1, longest_prompt) // m) * m)
        if self.zorro_train_enable:
            return P, self.max_response_len
        return P, min(self.max_response_len, -(-max(1, longest_response) // m) * m)

    def base_meta(self, prompt_width: int | None = None, response_width: int | None = None) -> dict[str, Any]:
        """The `meta` keys shared by forward and train payloads (server names); `max_prompt_len` /
        `max_response_len` are the payload's own widths (the maxima by default)."""
        meta: dict[str, Any] = {
            "pad_token_id": int(self.pad_token_id),
            "max_prompt_len": int(self.max_prompt_len if prompt_width is None else prompt_width),
            "max_response_len": int(self.max_response_len if response_width is None else response_width),
            "rollout_n": int(self.rollout_n),
            "temperature": float(self.temperature),
            "calculate_entropy": bool(self.calculate_entropy),
            "zorro_train_enable": bool(self.zorro_train_enable),
            "zorro_train_max_rollouts": int(self.zorro_train_max_rollouts or self.rollout_n),
            "load_balancer": bool(self.load_balancer),
            "logits_optimization": str(self.logits_optimization),
            "logits_optimization_peak_mem_size_in_gib": float(self.logits_optimization_peak_mem_size_in_gib),
            "logits_compute_in_fp32": bool(self.logits_compute_in_fp32),
            "drop_position_ids": bool(self.drop_position_ids),
        }
        if self.max_token_len_per_gpu is not None:
            meta["max_token_len_per_gpu"] = int(self.max_token_len_per_gpu)
        if self.rows_unpacked:
            meta["cu_seqlens"] = None
        return meta

    @property
    def loss_reads_unpacked_rows(self) -> bool:
        """Whether the training loss takes the unpacked `[B, S]` layout (`arctic_rl_losses.server`
        does; 0.1.4's `verl_grpo` reads `response_lens` / `sequence_offsets` of the packed layout and
        fails without them, and a dotted-path loss is assumed to expect what the server builds)."""
        return self.loss_fn == SERVER_LOSS_FN

    def actor_config(self) -> dict[str, Any]:
        """`meta.actor_config` as the server's `verl_grpo` loss reads it."""
        config: dict[str, Any] = {
            "loss_agg_mode": self.loss_agg_mode,
            "clip_ratio_low": float(self.clip_ratio_low),
            "clip_ratio_high": float(self.clip_ratio_high),
            "clip_ratio_c": float(self.clip_ratio_c),
            "use_kl_loss": bool(self.use_kl_loss),
            "kl_loss_coef": float(self.kl_loss_coef),
            "kl_loss_type": self.kl_loss_type,
            "entropy_coeff": float(self.entropy_coeff),
        }
        if self.loss_scale_factor is not None:
            config["loss_scale_factor"] = float(self.loss_scale_factor)
        return config

    def loss_reads(self) -> frozenset[str] | None:
        """The per-token batch keys the server's loss reads, or None when unknown (a dotted-path or
        other loss: then every per-token field is sent). 0.1.4's `verl_grpo`
        (`integrations/verl/grpo_loss.py`) reads `response_mask`, `old_log_probs`, `advantages`,
        `rollout_is_weights` if present, and `ref_log_prob` only with `use_kl_loss`; not
        `loss_mask` nor `rollout_log_probs`. `arctic_rl_losses.server.policy_loss` reads the
        same (`losses.server.PER_TOKEN_INPUTS`, the reference only with `use_kl_loss`)."""
        if self.loss_fn not in ("verl_grpo", SERVER_LOSS_FN):
            return None
        keys = {"response_mask", "old_log_probs", "advantages", "rollout_is_weights"}
        if self.use_kl_loss:
            keys.add("ref_log_prob")
        return frozenset(keys)

    def policy_loss_config(self) -> dict[str, Any]:
        """`meta.policy_loss_config`: verl's loss-mode name for the built-in verl_grpo; the family,
        the policy term's aggregation (when set) and the family knobs for arctic_rl_losses."""
        if self.loss_fn != SERVER_LOSS_FN:
            return {"loss_mode": "vanilla"}
        config: dict[str, Any] = {"loss_mode": self.policy_loss}
        if self.pg_loss_agg_mode is not None:
            config["pg_loss_agg_mode"] = self.pg_loss_agg_mode
        config.update({name: float(value) for name, value in self.policy_loss_params})
        return config
