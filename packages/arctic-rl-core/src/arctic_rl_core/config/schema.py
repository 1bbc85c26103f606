"""The fields of an Arctic RL run's configuration: `ArcticRLSettings`, its groups and their own validators.

Every group forbids unknown keys and every field is documented (the README's configuration reference
is generated from these descriptions). This module is the bottom of the config package: it imports
none of the modules that read a configuration. `ArcticRLConfig` (`run_config`), the class users and
adapters hold, adds the cross-field rules (`validation`) and the derived views (`shape`, `plan()`,
`to_client_config()`) on top of these fields.
"""

from __future__ import annotations

from typing import Any, Literal

from arctic_rl_losses.names import SERVER_LOSS_FN
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from arctic_rl_core.config.loss_selection import server_can_import_core
from arctic_rl_core.config.reference_model import ReferenceModelConfig

BackendKind = Literal["ray", "http", "cortex", "reference"]
ARCTIC_BACKENDS: tuple[str, ...] = ("ray", "http", "cortex")
# the Arctic on-prem server's kinds: ZoRRo and Arctic Inference default on there (not on Cortex)
ONPREM_BACKENDS: tuple[str, ...] = ("ray", "http")

LossAggMode = Literal[
    "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]  # fmt: skip
# `arctic_rl_losses.names.POLICY_LOSSES` (a test keeps the two equal).
PolicyLoss = Literal[
    "ppo_clip", "dual_clip", "gspo", "sapo", "cispo", "clip_cov", "kl_cov", "gpg", "rollout_is"
]  # fmt: skip
# Server losses: the built-in verl_grpo and sft, or arctic_rl_losses imported by dotted path.
LossFn = Literal["verl_grpo", "sft", "arctic_rl_core"]
KlLossType = Literal[
    "k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl",
    "k1+", "kl+", "abs+", "k2+", "mse+", "k3+", "low_var_kl+",
]  # fmt: skip
AttnImplementation = Literal["flash_attention_2", "flash_attention_3", "sdpa", "eager", "flex_attention"]

# The clip values the Arctic server's `verl_grpo` loss hard-codes in arctic-platform 0.1.4.
ARCTIC_SERVER_CLIP_RATIOS: dict[str, float] = {
    "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.2,
    "clip_ratio_c": 3.0,
}


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSettings(_Group):
    """The policy model served and trained by the Arctic stack."""

    name: str | None = Field(
        default=None,
        description=(
            "Hugging Face model id or a path visible to the Arctic server (e.g. Qwen/Qwen3-0.6B). "
            "Required by the ray/http/cortex backends; the reference backend uses backend.reference."
        ),
    )


class CortexSettings(_Group):
    """Connection to Snowflake Cortex (backend.kind = cortex). The access token is read from the
    environment variable NAMED by `token_env` when the client is built; it is never stored here."""

    base_url: str | None = Field(
        default=None,
        description=(
            "Direct (or mock) Cortex URL, e.g. `arctic-rl serve --reference --api cortex`'s; the token is sent "
            "when the variable named by token_env is set (the emulator requires it). Alternative to host."
        ),
    )
    host: str | None = Field(
        default=None, description="Snowflake account host for programmatic-access-token (PAT) auth."
    )
    database: str | None = Field(default=None, description="Snowflake database (required with host).")
    schema_name: str | None = Field(default=None, description="Snowflake schema (required with host).")
    token_env: str = Field(
        default="ARCTIC_CORTEX_PAT",
        min_length=1,
        description="NAME of the environment variable that holds the PAT (required with host, optional with base_url).",
    )
    endpoint: str = Field(default="cortex-training", min_length=1, description="SnowAPI endpoint name.")
    max_retries: int = Field(default=10, ge=0, description="Retries of a transiently failing HTTP request.")


class BackendSettings(_Group):
    """Which engine runs the heavy work, and how to reach it."""

    kind: BackendKind = Field(
        default="reference",
        description=(
            "ray: Arctic server in-process over Ray; http: Arctic on-prem HTTP server; cortex: Snowflake "
            "Cortex; reference: the CPU reference engine (no Arctic install needed)."
        ),
    )
    host: str = Field(default="localhost", description="HTTP server host (kind = http only).")
    port: int = Field(default=8000, ge=1, le=65535, description="HTTP server port (kind = http only).")
    launch_local_server: bool = Field(
        default=False, description="Start a local Arctic HTTP server before connecting (kind = http only)."
    )
    startup_timeout_s: float = Field(
        default=600.0, gt=0, description="Seconds to wait for a launched local server (kind = http only)."
    )
    job_ready_timeout_s: float = Field(
        default=1800.0,
        gt=0,
        description="Seconds to wait for a created job to reach RUNNING (Arctic backends).",
    )
    request_timeout_s: float = Field(
        default=1800.0,
        gt=0,
        description=(
            "Timeout of every call to the Arctic server on every transport (0.1.4's Ray transport has none of "
            "its own); job creation is bounded by job_ready_timeout_s per job (Arctic backends)."
        ),
    )
    worker_env: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Environment variables for the Arctic server's GPU workers (DeepSpeed, vLLM). 0.1.4 gives its Ray "
            "workers no runtime environment: they inherit the environment Ray was started with, so these (plus "
            "ARCTIC_INFERENCE_ENABLED=1 when Arctic Inference is on) are set in this process before a server or "
            "Ray it starts, and must be exported before `ray start` on every node otherwise "
            "(recipes/worker-env.sh). Arctic backends only."
        ),
    )
    server_has_arctic_rl_core: bool = Field(
        default=True,
        description=(
            "The HTTP server's environment has arctic-rl-core installed, so it can import "
            "loss.loss_fn=arctic_rl_core (kind = http only; checked by one probe call at startup). "
            "false: only the built-in verl_grpo loss."
        ),
    )
    cortex: CortexSettings = Field(
        default_factory=CortexSettings, description="Cortex connection (kind = cortex only)."
    )

    @field_validator("worker_env", mode="before")
    @classmethod
    def _env_values_as_text(cls, value: Any) -> Any:
        """`X=1` on the command line or in YAML is the number 1: environment values are its text.
        A boolean is refused (is it 1, true or True?)."""
        if not isinstance(value, dict):
            return value
        out = {}
        for name, item in value.items():
            if isinstance(item, bool):
                raise ValueError(f"{name}={item!r}: give the exact text the variable should hold, e.g. '1'")
            out[name] = str(item) if isinstance(item, int | float) else item
        return out

    reference: ReferenceModelConfig = Field(
        default_factory=ReferenceModelConfig,
        description="The reference engine's tiny model or local model directory (kind = reference only).",
    )


class PlacementSettings(_Group):
    """GPUs of each job and how they are shared."""

    training_gpus: int = Field(
        default=1,
        ge=1,
        description="GPUs of the DeepSpeed training job (the reference backend simulates them).",
    )
    sampling_gpus: int = Field(
        default=1, ge=0, description="GPUs of the vLLM sampling job (all engines together)."
    )
    log_prob_gpus: int = Field(
        default=0,
        ge=0,
        description="GPUs of the DeepSpeed reference-model job that serves KL reference log-probs (0 = none).",
    )
    colocate: bool = Field(
        default=False, description="Training, sampling and log-prob jobs share the same GPUs (sleep/wake)."
    )
    sampling_tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        description="Tensor-parallel size of one vLLM engine; engines = sampling_gpus / this.",
    )
    ulysses_sequence_parallel_size: int = Field(
        default=1,
        ge=1,
        description="Ulysses sequence-parallel degree of training (DeepSpeed sequence_parallel_size; 1 = off).",
    )

    @property
    def data_parallel_size(self) -> int:
        """Data-parallel size of training: training GPUs / Ulysses SP."""
        return self.training_gpus // self.ulysses_sequence_parallel_size

    @property
    def num_sampling_engines(self) -> int:
        return self.sampling_gpus // self.sampling_tensor_parallel_size


class BatchSettings(_Group):
    """Batch shape of one training step (one rollout batch)."""

    prompts_per_step: int = Field(default=4, ge=1, description="Prompts sampled per training step.")
    rollouts_per_prompt: int = Field(
        default=4, ge=1, description="Responses generated per prompt (GRPO group)."
    )
    mini_batch_prompts: int | None = Field(
        default=None,
        ge=1,
        description="Prompts per optimizer step (PPO mini-batch); null = prompts_per_step (one step per epoch).",
    )
    micro_batch_size_per_gpu: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Rows (responses) per GPU per forward/backward micro-step; null = whole prompt groups "
            "(zorro.max_rollouts or rollouts_per_prompt) with ZoRRo, else 1."
        ),
    )
    epochs: int = Field(default=1, ge=1, description="Passes over each rollout batch (PPO epochs).")
    max_prompt_length: int = Field(default=256, ge=1, description="Longest prompt, in tokens.")
    max_response_length: int = Field(default=256, ge=1, description="Longest response, in tokens.")
    max_token_len_per_gpu: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Token budget per GPU for ZoRRo packing and the load balancer; "
            "null = max_prompt_length + max_rollouts x max_response_length."
        ),
    )


class OptimizerSettings(_Group):
    """AdamW and its learning-rate schedule."""

    lr: float = Field(default=1e-6, gt=0, description="Peak learning rate.")
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="AdamW betas.")
    eps: float = Field(default=1e-8, gt=0, description="AdamW epsilon.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW decoupled weight decay.")
    grad_clip: float | None = Field(
        default=1.0, gt=0, description="Clip the global gradient norm to this value; null = no clipping."
    )
    scheduler: Literal["constant", "cosine"] = Field(
        default="constant", description="Learning-rate schedule after the linear warmup."
    )
    warmup_ratio: float = Field(
        default=0.0, ge=0, lt=1, description="Fraction of the optimizer-step horizon spent in linear warmup."
    )
    warmup_steps: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Linear warmup in optimizer steps (a framework that counts warmup in steps: SkyRL's "
            "num_warmup_steps); needs no training horizon; null = warmup_ratio decides. Not with warmup_ratio."
        ),
    )
    min_lr_ratio: float = Field(
        default=0.0, ge=0, le=1, description="Cosine schedule's final learning rate as a fraction of lr."
    )
    total_training_steps: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Training steps of the run; the schedule's horizon is this x epochs x mini-batches per step. "
            "Required by a cosine schedule or a warmup."
        ),
    )
    torch_adam: bool | None = Field(
        default=None,
        description=(
            "DeepSpeed steps torch.optim.AdamW (optimizer.params.torch_adam) instead of its FusedAdam, whose CUDA "
            "op is JIT-compiled on the node with nvcc matching torch's CUDA (13.0 for torch 2.11); null = true "
            "with the ray/http backends unless deepspeed.offload_optimizer (then DeepSpeedCPUAdam, a host C++ "
            "build, no nvcc)."
        ),
    )


class LossSettings(_Group):
    """The policy loss and the sampling temperature it assumes."""

    loss_fn: LossFn = Field(
        default="verl_grpo",
        description=(
            "Server loss: verl_grpo (the server's built-in dual-clip PPO), sft (supervised cross-entropy), or "
            "arctic_rl_core (loss.policy_loss computed by arctic_rl_losses, which the server imports by "
            "dotted path: ray, reference, or an http server with arctic-rl-core installed)."
        ),
    )
    policy_loss: PolicyLoss = Field(
        default="dual_clip",
        description=(
            "Loss family (loss_fn = arctic_rl_core; verl_grpo is dual_clip): ppo_clip (SkyRL regular), dual_clip "
            "(SkyRL dual_clip, verl vanilla), gspo, sapo, cispo, clip_cov, kl_cov, gpg, rollout_is (SkyRL rollout_is: "
            "the IS weight against the rollout log-probs, zeroed outside the clip range)."
        ),
    )
    clip_ratio_low: float = Field(
        default=0.2,
        ge=0,
        description="PPO clip: ratio >= 1 - clip_ratio_low (cispo: the IS-weight clip). verl_grpo on an Arctic server accepts only 0.2.",
    )
    clip_ratio_high: float = Field(
        default=0.2,
        ge=0,
        description="PPO clip: ratio <= 1 + clip_ratio_high (cispo: the IS-weight clip). verl_grpo on an Arctic server accepts only 0.2.",
    )
    clip_ratio_c: float = Field(
        default=3.0,
        gt=1,
        description="Dual-clip bound for negative advantages (loss <= c x abs(A)). verl_grpo on an Arctic server accepts only 3.0.",
    )
    loss_agg_mode: LossAggMode = Field(
        default="token-mean",
        description="How token losses become one scalar (token-sum: arctic_rl_core only).",
    )
    pg_loss_agg_mode: LossAggMode | None = Field(
        default=None,
        description="Aggregation of the policy term when it differs from loss_agg_mode (verl's sapo: seq-mean-token-mean); null = loss_agg_mode. arctic_rl_core only.",
    )
    loss_scale_factor: float | None = Field(
        default=None,
        gt=0,
        description="seq-mean-token-sum-norm divisor; null = the micro-batch's longest response (not with verl_grpo on an Arctic server).",
    )
    tau_pos: float | None = Field(
        default=None, gt=0, description="sapo: gate temperature for positive advantages; null = 1.0."
    )
    tau_neg: float | None = Field(
        default=None, gt=0, description="sapo: gate temperature for other advantages; null = 1.05."
    )
    clip_cov_ratio: float | None = Field(
        default=None,
        gt=0,
        description="clip_cov: fraction of tokens whose gradient is masked; null = 0.0002.",
    )
    clip_cov_lb: float | None = Field(
        default=None, description="clip_cov: lower covariance bound of the masked tokens; null = 1.0."
    )
    clip_cov_ub: float | None = Field(
        default=None, description="clip_cov: upper covariance bound of the masked tokens; null = 5.0."
    )
    kl_cov_ratio: float | None = Field(
        default=None,
        gt=0,
        description="kl_cov: fraction of tokens given the |log-ratio| penalty; null = 0.0002.",
    )
    ppo_kl_coef: float | None = Field(
        default=None, ge=0, description="kl_cov: weight of the |log-ratio| penalty; null = 0.1."
    )
    use_kl_loss: bool = Field(default=False, description="Add a KL penalty against the reference model.")
    kl_loss_coef: float = Field(default=0.001, ge=0, description="Weight of the KL penalty.")
    kl_loss_type: KlLossType = Field(
        default="low_var_kl", description="KL estimator; a '+' suffix uses the straight-through gradient."
    )
    entropy_coeff: float = Field(
        default=0.0, description="Weight of the entropy bonus (subtracted from the loss)."
    )
    temperature: float = Field(
        default=1.0, gt=0, description="Sampling temperature; the training forward divides logits by it."
    )
    use_kl_in_reward: bool = Field(
        default=False,
        description=(
            "The framework subtracts a KL penalty from the rewards (beside loss.use_kl_loss when both are set); the reference "
            "log-probs come from the log-prob job (Arctic backends: placement.log_prob_gpus >= 1)."
        ),
    )

    def family_params(self) -> dict[str, float]:
        """The family knobs that are set (meta.policy_loss_config keys)."""
        return {
            name: float(getattr(self, name))
            for name in FAMILY_KNOB_FAMILIES
            if getattr(self, name) is not None
        }


# The family knobs of `LossSettings` and the loss family that reads each.
FAMILY_KNOB_FAMILIES: dict[str, str] = {
    "tau_pos": "sapo",
    "tau_neg": "sapo",
    "clip_cov_ratio": "clip_cov",
    "clip_cov_lb": "clip_cov",
    "clip_cov_ub": "clip_cov",
    "kl_cov_ratio": "kl_cov",
    "ppo_kl_coef": "kl_cov",
}


class DeepSpeedSettings(_Group):
    """DeepSpeed engine of the training (and reference log-prob) job."""

    zero_stage: Literal[0, 1, 2, 3] = Field(default=2, description="ZeRO stage.")
    offload_optimizer: bool = Field(default=False, description="Offload optimizer state to CPU (ZeRO >= 2).")
    offload_param: bool = Field(default=False, description="Offload parameters to CPU (ZeRO 3).")
    bf16: bool = Field(default=True, description="Train in bf16 (DeepSpeed bf16.enabled); false = fp32.")
    grad_accum_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32", description="Gradient-accumulation dtype (DeepSpeed data_types.grad_accum_dtype)."
    )
    communication_data_type: Literal["fp32", "bf16"] = Field(
        default="fp32", description="Dtype of gradient all-reduce (DeepSpeed communication_data_type)."
    )
    autocast: bool = Field(default=False, description="DeepSpeed torch_autocast of the forward.")
    autocast_dtype: Literal["bfloat16", "float16"] = Field(
        default="bfloat16", description="Autocast dtype (with autocast = true)."
    )
    config_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Extra DeepSpeed config keys deep-merged into the generated config (e.g. zero_optimization "
            "bucket sizes); keys owned by typed knobs are rejected."
        ),
    )


class KernelSettings(_Group):
    """Model kernels of the training engine."""

    attn_implementation: AttnImplementation = Field(
        default="flash_attention_2",
        description="Hugging Face attention implementation of the training model.",
    )
    use_liger: bool | None = Field(
        default=None,
        description=(
            "Liger fused kernels (RMSNorm, MLP, ...) in training; null = on with the Arctic backends "
            "(the legacy integrations' default), off on the reference backend (no CPU meaning)."
        ),
    )
    gradient_checkpointing: bool = Field(default=True, description="Activation checkpointing in training.")


class ZorroSettings(_Group):
    """ZoRRo: prompt de-duplication in training, its load balancer and logits strategy."""

    enable: bool | None = Field(
        default=None,
        description=(
            "Compute each prompt once per group in training (ZoRRo); null = on with the ray/http backends "
            "(the legacy integrations' default), off on cortex (its forward-backward body has no ZoRRo switch) and "
            "the reference backend (no CPU meaning)."
        ),
    )
    max_rollouts: int | None = Field(
        default=None,
        ge=1,
        description="Largest group packed together; null = rollouts_per_prompt. Smaller splits groups.",
    )
    load_balancer: bool = Field(
        default=True, description="Server reorganizes the global batch across workers by token count."
    )
    logits_optimization: Literal["none", "compute", "memory"] | None = Field(
        default=None,
        description=(
            "none: one fused call (~2x peak logits memory); compute: materialize once, chunk softmax; "
            "memory: never materialize full logits (needs ZoRRo); null = memory when ZoRRo is on, else none."
        ),
    )
    logits_peak_mem_gib: float = Field(
        default=4.0, gt=0, description="Per-chunk memory budget (GiB) of the compute/memory strategies."
    )
    logits_compute_in_fp32: bool | None = Field(
        default=None,
        description=(
            "Upcast logits to fp32 before log-prob/entropy/loss math; null = true with the ray/http backends unless "
            "kernels.attn_implementation=flash_attention_2 (flash-attn's fused cross-entropy computes in fp32; "
            "without it bf16 log-probs are up to 0.07 nats off)."
        ),
    )
    logits_compute_from_fp32_inputs: bool = Field(
        default=False, description="Run the LM head in fp32 (ZoRRo path only)."
    )


class ArcticInferenceSettings(_Group):
    """Arctic Inference (vLLM plugin) on the sampling engines."""

    enable: bool | None = Field(
        default=None,
        description=(
            "Load the plugin on sampling workers (ARCTIC_INFERENCE_ENABLED=1); null = on with the ray/http "
            "backends (the legacy integrations' default), off on cortex (0.1.4's create-job body carries no Arctic "
            "Inference config) and the reference backend (no CPU meaning)."
        ),
    )
    fca: bool | None = Field(
        default=None,
        description="Forest Cascade Attention (shared-prefix attention); null = on when Arctic Inference is on.",
    )
    speculative_model: str | None = Field(
        default=None, description="Arctic speculative-decoding draft model (id or path); null = off."
    )
    num_speculative_tokens: int = Field(default=3, ge=1, description="Draft tokens proposed per step.")
    suffix_decoding: bool = Field(default=False, description="Suffix decoding (model-free speculation).")


class VllmSettings(_Group):
    """vLLM engine arguments of the sampling engines."""

    gpu_memory_utilization: float = Field(
        default=0.8, gt=0, le=1, description="Fraction of GPU memory vLLM may use."
    )
    max_num_seqs: int = Field(default=256, ge=1, description="Most sequences scheduled at once.")
    enforce_eager: bool = Field(default=False, description="Disable CUDA graphs.")
    enable_chunked_prefill: bool = Field(default=True, description="Chunked prefill.")
    enable_prefix_caching: bool = Field(default=True, description="Prefix caching (shared GRPO prompts).")
    max_model_len: int | None = Field(
        default=None, ge=1, description="Context length; null = max_prompt_length + max_response_length."
    )
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, description="Tokens per scheduler step; null = vLLM's default."
    )
    logprobs_mode: Literal["processed_logprobs", "raw_logprobs"] | None = Field(
        default=None,
        description=(
            "What the sampler's log-probs are (vLLM's logprobs_mode): processed = log-softmax of the "
            "temperature-scaled logits after top-k/top-p, raw = of the unscaled model logits (vLLM's own "
            "default). null = the trainer's distribution, so importance weights are 1 at the same weights: "
            "processed where the training forward applies the temperature (apply_temperature: ray, http, "
            "reference), raw on Cortex (its training body has no temperature). A mode that differs from the "
            "trainer's biases every IS weight at temperature != 1."
        ),
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Free-form vLLM engine arguments deep-merged last (user wins per leaf); "
            "keys owned by the typed knobs above are rejected."
        ),
    )


class WeightSyncSettings(_Group):
    """How trained weights reach the sampling engines."""

    cuda_ipc: bool = Field(default=False, description="Zero-copy CUDA IPC weight sync (needs colocate).")
    low_memory: bool = Field(
        default=False, description="With CUDA IPC, send one parameter at a time (bounded extra memory)."
    )
    inference_sleep_level: Literal[1, 2] | None = Field(
        default=None,
        description=(
            "Colocated: the vLLM sleep level while training runs. 1 copies the weights to pinned host memory "
            "and back on wake (only for the sync to overwrite them; out of memory at 32B with the legacy integration), 2 "
            "discards them; null = 2. Not colocated: the sampler never sleeps (leave null)."
        ),
    )


class DeterminismSettings(_Group):
    """Seeds and deterministic kernels."""

    seed: int = Field(default=42, description="Seed of every job (and of the reference engine).")
    full: bool = Field(
        default=False, description="Deterministic cuBLAS/cuDNN/NCCL/flash-attention in training (slower)."
    )


class CheckpointSettings(_Group):
    """Where checkpoints go."""

    path: str | None = Field(
        default=None,
        description="Checkpoint directory of the training job; required by the Arctic backends (server 400s).",
    )
    export_hf: bool = Field(
        default=False,
        description=(
            "With every checkpoint also write a Hugging Face copy (save_pretrained) into its hf/ directory "
            "(the server exports from the DeepSpeed checkpoint on rank 0)."
        ),
    )
    save_total_limit: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Keep only the newest this many backend checkpoints (checkpoint-<step> directories, pruned by "
            "the server after each save); null keeps all."
        ),
    )


# arctic-platform 0.1.4's `training.peft` carries these PEFT `LoraConfig` keys (its field description).
LoraBias = Literal["none", "all", "lora_only"]
PEFT_TYPE = "Lora"  # the Cortex spec's spelling of the adapter type (DSS-Server-API-Specification 13.5)


class PeftSettings(_Group):
    """LoRA adapters (PEFT) instead of full-weight training. arctic-platform 0.1.4 trains them only on
    Cortex (`training.peft`, sent to the training and the sampling sub-job, weights synced in LoRA
    format); its on-prem server trains dense only. The reference backend trains them with the `peft`
    library and syncs only the adapter tensors, as Cortex does."""

    lora_rank: int = Field(
        default=0,
        ge=0,
        description=(
            "Rank r of the LoRA adapters; 0 = full-weight training (no adapters). > 0 needs backend.kind "
            "cortex or reference."
        ),
    )
    lora_alpha: float = Field(
        default=16.0,
        gt=0,
        description="LoRA scaling numerator: the adapter's update is scaled by lora_alpha / lora_rank.",
    )
    lora_dropout: float = Field(
        default=0.0, ge=0, lt=1, description="Dropout on the adapter's input during training."
    )
    target_modules: list[str] | Literal["all-linear"] = Field(
        default="all-linear",
        description=(
            "Modules that get adapters: a list of module names (e.g. [q_proj, v_proj]) or all-linear "
            "(every linear layer except the LM head)."
        ),
    )
    exclude_modules: list[str] | None = Field(
        default=None, description="Module names never given an adapter (with all-linear); null = none."
    )
    bias: LoraBias = Field(
        default="none", description="Which biases train with the adapters: none, all or lora_only."
    )

    @field_validator("target_modules")
    @classmethod
    def _named_modules(cls, value: Any) -> Any:
        if isinstance(value, list) and (not value or not all(str(name).strip() for name in value)):
            raise ValueError("give at least one module name (no empty names), or all-linear")
        return value

    @property
    def enabled(self) -> bool:
        return self.lora_rank > 0

    def peft_config(self) -> dict[str, Any] | None:
        """arctic-platform 0.1.4's `TrainingConfig.peft` (a PEFT `LoraConfig`); None = dense."""
        if not self.enabled:
            return None
        alpha = self.lora_alpha
        config: dict[str, Any] = {
            "peft_type": PEFT_TYPE,
            "r": self.lora_rank,
            "lora_alpha": int(alpha) if float(alpha).is_integer() else alpha,  # PEFT types it int
            "lora_dropout": self.lora_dropout,
            "bias": self.bias,
            "target_modules": self.target_modules,
        }
        if self.exclude_modules:
            config["exclude_modules"] = list(self.exclude_modules)
        return config


class WireSettings(_Group):
    """Per-request payload options."""

    drop_position_ids: bool = Field(
        default=True,
        description=(
            "Omit position_ids; the 0.1.4 server rebuilds exactly these from attention_mask before it splits "
            "the batch, on every transport (false for mrope / 3D rope models)."
        ),
    )
    pad_to_multiple: int | None = Field(
        default=64,
        ge=1,
        description=(
            "Pad each payload to its own longest prompt and response rounded up to this multiple (capped at "
            "the batch maxima; under ZoRRo the response width stays max_response_length, as the server's "
            "patched model requires); null = always pad to max_prompt_length + max_response_length."
        ),
    )


class AsyncSettings(_Group):
    """Asynchronous GRPO with bounded staleness: generation of the next batches (with the weights the
    sampler serves) overlaps training of the current one. A rollout sampled with weights version v is
    trained at trainer step s only if s - v <= max_staleness. The config key is `async` (in Python:
    `cfg.async_settings`, as `async` is a keyword)."""

    max_staleness: int = Field(
        default=0,
        ge=0,
        description=(
            "k: how many optimizer steps older than the trainer a trained rollout's weights may be. 0 = the "
            "synchronous path (generate, then train, then sync; bit-identical to a run without this group); "
            "k > 0 needs a non-colocated backend (placement.colocate=false)."
        ),
    )
    stale_policy: Literal["drop", "regenerate"] = Field(
        default="drop",
        description=(
            "What happens to a rollout group older than max_staleness when it reaches the trainer: drop it "
            "(the step trains on the rest), or regenerate its prompt with the current weights. Counted in "
            "the metrics (async/dropped_groups, async/regenerated_groups). k > 0 only."
        ),
    )
    is_weight_cap: float = Field(
        default=2.0,
        ge=1,
        description=(
            "Truncated importance-sampling weights min(exp(old_log_prob - rollout_log_prob), cap) per response "
            "token, sent as rollout_is_weights (the server losses multiply each token's policy loss by them); "
            "the statistics are logged per step (async/is_weight_*). k > 0 only."
        ),
    )


# The legacy integrations' optimisations: on by default with the Arctic backends, off on the reference
# backend, where they have no CPU meaning (`plan()` lists them there).
LEGACY_OPTIMISATIONS: tuple[str, ...] = (
    "zorro.enable",
    "zorro.logits_optimization",
    "kernels.use_liger",
    "arctic_inference.enable",
    "arctic_inference.fca",
)


class _ArcticRLSettingsGroups(BaseModel):
    """The fields of one Arctic RL run, each group checked on its own (the cross-field rules are
    `ArcticRLConfig`'s)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelSettings = Field(
        default_factory=ModelSettings, description="The policy model (Arctic backends)."
    )
    backend: BackendSettings = Field(
        default_factory=BackendSettings, description="Which engine runs the run, and its connection."
    )
    placement: PlacementSettings = Field(
        default_factory=PlacementSettings, description="GPUs of each job and how they are shared."
    )
    batch: BatchSettings = Field(
        default_factory=BatchSettings, description="Batch shape of one training step."
    )
    optimizer: OptimizerSettings = Field(
        default_factory=OptimizerSettings, description="AdamW and its learning-rate schedule."
    )
    loss: LossSettings = Field(
        default_factory=LossSettings, description="Policy loss and sampling temperature."
    )
    deepspeed: DeepSpeedSettings = Field(
        default_factory=DeepSpeedSettings, description="DeepSpeed engine of the training and log-prob jobs."
    )
    kernels: KernelSettings = Field(
        default_factory=KernelSettings, description="Kernels of the training model."
    )
    zorro: ZorroSettings = Field(
        default_factory=ZorroSettings,
        description="ZoRRo prompt de-duplication, load balancer, logits strategy.",
    )
    arctic_inference: ArcticInferenceSettings = Field(
        default_factory=ArcticInferenceSettings, description="Arctic Inference on the sampling engines."
    )
    vllm: VllmSettings = Field(default_factory=VllmSettings, description="vLLM engine arguments of sampling.")
    weight_sync: WeightSyncSettings = Field(
        default_factory=WeightSyncSettings, description="How trained weights reach the sampling engines."
    )
    determinism: DeterminismSettings = Field(
        default_factory=DeterminismSettings, description="Seed and deterministic kernels."
    )
    checkpoint: CheckpointSettings = Field(
        default_factory=CheckpointSettings, description="Checkpoint directory of the training job."
    )
    wire: WireSettings = Field(default_factory=WireSettings, description="Per-request payload options.")
    peft: PeftSettings = Field(
        default_factory=PeftSettings,
        description="LoRA adapters instead of full-weight training (cortex and reference backends).",
    )

    @property
    def async_settings(self) -> AsyncSettings:
        """The `async` group (`async` is a Python keyword, so it is no attribute name)."""
        return getattr(self, "async")

    @property
    def is_arctic(self) -> bool:
        """True for the Arctic backends (ray, http, cortex)."""
        return self.backend.kind in ARCTIC_BACKENDS

    @property
    def server_imports_core(self) -> bool:
        """Whether the training server can import arctic_rl_core (loss.loss_fn=arctic_rl_core): the
        reference engine and the Ray backend (same locked environment) always, an HTTP server when
        `backend.server_has_arctic_rl_core`, Cortex never."""
        return server_can_import_core(self.backend.model_dump())

    @property
    def server_loss_fn(self) -> str:
        """`processing.loss_fn` of the training payloads: a registered server name, or the dotted path
        of `arctic_rl_losses` for loss_fn=arctic_rl_core."""
        return SERVER_LOSS_FN if self.loss.loss_fn == "arctic_rl_core" else self.loss.loss_fn


# `async` is a Python keyword: the group is added by name, so the key in files, overrides, errors,
# `model_dump()` and the README reference is `async` like every other group's.
ArcticRLSettings = create_model(
    "ArcticRLSettings",
    __base__=_ArcticRLSettingsGroups,
    __module__=__name__,
    __doc__=_ArcticRLSettingsGroups.__doc__,
    **{
        "async": (
            AsyncSettings,
            Field(
                default_factory=AsyncSettings,
                description="Asynchronous GRPO: generation overlapping training, bounded staleness.",
            ),
        )
    },
)
