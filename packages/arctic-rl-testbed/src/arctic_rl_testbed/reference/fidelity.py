"""How the reference HTTP server answers where arctic-platform 0.1.4's server and a stricter test
double would differ: the fidelity profile, and the separate state guard.

- `ServerProfile.ARCTIC_0_1_4` (the default of `arctic-rl serve --reference`): answer as the real
  0.1.4 server (`arctic_platform/common/http_server.py`, `utils/server_models.py`,
  `deepspeed_worker.py`) does: pydantic request models that ignore unknown keys, `/step`'s
  `learning_rate` ignored, `training_config` accepted, `n > 1` returning the first output, a
  `step` without gradients stepping over zero gradients, each job's own seed, a bare
  `500 Internal Server Error` where a worker raises (no exception handler), the 0.1.4 `verl_grpo`
  clip ratios, and no `weights_version` in generate results.
- `ServerProfile.STRICT`: refuse all of those with a 4xx naming the field (what this server did
  before the profile existed; useful to find an adapter sending keys that do nothing).
- `state_guard` (on by default, in both profiles): refuse with 409 what the real server would do
  silently wrong in the current sleep/wake state (sync into a sleeping sampler, generate while
  asleep, train while offloaded). Off, the engine does what 0.1.4 does: a sync into a sleeping
  sampler is lost, generation runs on whatever the sampler holds.

The fidelity table of docs/reference-backend.md lists every difference with the test that pins it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

# What the 0.1.4 server's handlers read of each body; everything else is ignored there.
STEP_KEYS = frozenset({"learning_rate"})
SAVE_KEYS = frozenset(
    {"checkpoint_id", "checkpoint_type", "path", "step", "export_hf", "save_total_limit", "stage_info"}
)
LOAD_KEYS = frozenset({"path", "step"})
GENERATE_KEYS = frozenset({"prompts", "sampling_params", "routing_key", "strict"})
WEIGHT_SYNC_KEYS = frozenset({"source_sub_job_id", "target_sub_job_ids", "cuda_ipc", "low_memory"})
INTERNAL_ERROR_BODY = "Internal Server Error"  # FastAPI's answer to an unhandled exception


class ServerProfile(StrEnum):
    ARCTIC_0_1_4 = "arctic-0.1.4"
    STRICT = "strict"


class FidelityRefusal(Exception):
    """The strict profile refuses what 0.1.4 would ignore (status, detail)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class Fidelity:
    profile: ServerProfile = ServerProfile.ARCTIC_0_1_4
    state_guard: bool = True

    @property
    def as_0_1_4(self) -> bool:
        return self.profile is ServerProfile.ARCTIC_0_1_4

    def engine_settings(self, settings: ReferenceEngineSettings) -> ReferenceEngineSettings:
        """The engine behaviours the profile decides (the guard, a step without gradients, the
        clip ratios the loss uses)."""
        update: dict[str, Any] = {"state_guard": self.state_guard}
        if self.as_0_1_4:
            update["step_without_gradients"] = "zero_gradients"
            # DeepSpeed 0.19.8 steps over a zero gradient on every optimizer path (its BF16_Optimizer
            # no longer asserts a non-zero norm, so the 0.1.4 worker's skip never triggers)
            update["zero_norm_step"] = "apply"
            update["honour_clip_ratios"] = False
        return settings.model_copy(update=update)

    # -- request bodies ---------------------------------------------------------------------------
    def known_keys(self, route: str, body: Mapping[str, Any], allowed: frozenset[str]) -> dict[str, Any]:
        """The keys the 0.1.4 handler reads (the others are ignored there); strict: 422 on others."""
        unknown = sorted(set(body) - allowed)
        if unknown and not self.as_0_1_4:
            raise FidelityRefusal(422, f"{route} body has unknown keys {unknown}")
        return {key: value for key, value in body.items() if key in allowed}

    def step_learning_rate(self, body: Mapping[str, Any]) -> float | None:
        """0.1.4: `learning_rate` is accepted for Cortex parity and NOT applied (the DeepSpeed
        schedule decides). Strict: passed on, so the engine refuses it."""
        return None if self.as_0_1_4 else body.get("learning_rate")

    def training_config(self, body: Mapping[str, Any]) -> None:
        if body.get("training_config") is not None and not self.as_0_1_4:
            raise FidelityRefusal(
                400, "training_config is not supported by the reference server: send ds_config"
            )

    def job_seed(self, seed: int, engine_seed: int | None) -> bool:
        """Whether a job's seed may differ from the shared engine's (0.1.4: each job has its own
        seed; the reference's jobs share one engine, seeded by the first job)."""
        if engine_seed is None or seed == engine_seed:
            return True
        return self.as_0_1_4

    def sampling_n(self, n: Any) -> None:
        """0.1.4's pool returns the first output per prompt whatever `n` is."""
        if n not in (None, 1) and not self.as_0_1_4:
            raise FidelityRefusal(
                400, f"sampling_params.n={n}: the server returns one output per prompt; replicate prompts"
            )

    def unknown_sampling_key(self, key: str) -> None:
        """A key vLLM's `SamplingParams` does not take: 0.1.4 fails inside the pool (500)."""
        if self.as_0_1_4:
            raise InternalServerError(f"sampling_params.{key}: not a vLLM SamplingParams argument")
        raise FidelityRefusal(
            400, f"sampling_params.{key} is not a vLLM sampling parameter the reference sampler knows"
        )

    def generate_result(self, result: dict[str, Any], weights_version: int) -> dict[str, Any]:
        """0.1.4's results carry no weights version (the clients must know it)."""
        if not self.as_0_1_4:
            result["weights_version"] = weights_version
        return result

    # -- errors -----------------------------------------------------------------------------------
    def internal_error(self, err: BaseException) -> tuple[int, str] | None:
        """0.1.4 has no exception handler: an error inside a worker is a bare 500 with FastAPI's
        body. None: answer with this server's own 4xx and message (strict)."""
        return (500, INTERNAL_ERROR_BODY) if self.as_0_1_4 else None


class InternalServerError(Exception):
    """Where 0.1.4 fails inside a worker or pool (it answers a bare 500)."""


def deepspeed_rejects(ds_config: Mapping[str, Any]) -> str | None:
    """What DeepSpeed 0.19.8 refuses when the 0.1.4 worker builds the engine (None: accepted)."""
    zero = ds_config.get("zero_optimization")
    stage = int(zero.get("stage", 0)) if isinstance(zero, Mapping) else 0
    if stage == 0 and _bf16(ds_config) and _grad_accum_dtype(ds_config) == "fp32":
        return (
            "ds_config: bf16 with fp32 gradient accumulation (data_types.grad_accum_dtype) at ZeRO stage 0 is "
            "rejected by DeepSpeed when the engine is built: use zero_optimization.stage 1, 2 or 3, or "
            "grad_accum_dtype bf16"
        )
    return None


def _bf16(ds_config: Mapping[str, Any]) -> bool:
    bf16 = ds_config.get("bf16")
    return isinstance(bf16, Mapping) and bool(bf16.get("enabled", False))


def _grad_accum_dtype(ds_config: Mapping[str, Any]) -> str:
    data_types = ds_config.get("data_types")
    value = data_types.get("grad_accum_dtype") if isinstance(data_types, Mapping) else None
    if value is None:  # DeepSpeed accumulates in the model's dtype unless told otherwise
        return "bf16" if _bf16(ds_config) else "fp32"
    return "fp32" if value in ("fp32", "float32", "float") else str(value)
