"""The demo's settings: one pydantic model, written to the run directory as `config.yaml`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

FRAMEWORKS: tuple[str, ...] = ("skyrl", "verl")
TASKS: tuple[str, ...] = ("bird", "gsm8k")
CONFIG_FILE = "config.yaml"


def server_address(url: str) -> tuple[str, int]:
    """(host, port) of an `http://HOST:PORT` URL; a clear error for anything else."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/"):
        raise ValueError(
            f"server={url!r}: expected http://HOST:PORT, the address `arctic-rl serve --reference` "
            "(or the Arctic on-prem server) prints, e.g. http://127.0.0.1:8000"
        )
    return parts.hostname, port


class DemoModel(BaseModel):
    """The tiny policy trained from scratch (the reference backend builds it; nothing is downloaded)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_layers: int = Field(default=2, ge=1)
    hidden_size: int = Field(default=128, ge=8)
    num_attention_heads: int = Field(default=4, ge=1)
    num_key_value_heads: int = Field(default=2, ge=1)
    intermediate_size: int = Field(default=256, ge=8)


class DemoOptions(BaseModel):
    """Everything a demo run does. Defaults finish in a few minutes on a 2-core CPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    framework: Literal["skyrl", "verl"] = Field(default="skyrl", description="RL framework running GRPO.")
    task: Literal["bird", "gsm8k"] = Field(default="bird", description="Bundled sample to train on.")
    steps: int = Field(default=24, ge=1, description="GRPO steps.")
    out: str = Field(description="Run directory (metrics, plot, checkpoints, config).")
    seed: int = Field(default=42, description="Seeds the model, sampling and data order.")
    model: DemoModel = Field(default_factory=DemoModel)
    # Supervised warm start (cross-entropy on the training split's reference answers).
    warm_start_steps: int = Field(default=80, ge=0, description="Supervised optimizer steps; 0 = none.")
    warm_start_batch: int = Field(default=8, ge=1, description="Examples per supervised step.")
    warm_start_lr: float = Field(default=3e-3, gt=0, description="Supervised learning rate.")
    # GRPO.
    prompts_per_step: int = Field(default=4, ge=1, description="Prompts per GRPO step.")
    rollouts_per_prompt: int = Field(default=8, ge=2, description="Responses per prompt (GRPO group).")
    lr: float = Field(default=1e-4, gt=0, description="GRPO learning rate.")
    # 0.6 (Qwen3's recommended sampling temperature): at 1.0 the tiny model's samples are mostly
    # wrong (~14% correct), most groups tie at 0 and GRPO gets no signal; at 0.6 ~77% are correct
    temperature: float = Field(default=0.6, gt=0, description="Rollout sampling temperature.")
    max_prompt_length: int = Field(default=640, ge=16, description="Longest prompt, in tokens.")
    max_response_length: int = Field(default=192, ge=8, description="Longest response, in tokens.")
    kl_loss_coef: float = Field(default=0.0, ge=0, description="KL penalty to the warm-started model.")
    entropy_loss_coef: float = Field(
        default=0.0, ge=0, description="Entropy bonus; > 0 gives a gradient even when every reward ties."
    )
    eval_samples: int = Field(
        default=8,
        ge=0,
        description="Answers sampled per prompt at the rollout temperature for the sampled accuracy; 0 = none.",
    )
    num_threads: int | None = Field(default=None, ge=1, description="torch threads; None = torch's own.")
    # Where GRPO runs: the in-process reference engine, or an Arctic on-prem HTTP API.
    server: str | None = Field(
        default=None,
        description=(
            "URL of an Arctic on-prem HTTP API (e.g. `arctic-rl serve --reference`'s) that GRPO drives "
            "through the real arctic-platform client; None = the in-process reference engine."
        ),
    )
    backend: Literal["http", "cortex"] = Field(
        default="http",
        description=(
            "The API at `server`: the Arctic on-prem HTTP API (`http`), or Snowflake Cortex's REST API "
            "(`cortex`, e.g. `arctic-rl serve --reference --api cortex`'s; the token is read from "
            "ARCTIC_CORTEX_PAT). Only with `server`."
        ),
    )
    colocate: bool = Field(
        default=False, description="Training and sampling share the devices (sleep/wake around each phase)."
    )
    trainer: Literal["torch", "deepspeed"] = Field(
        default="torch",
        description=(
            "Who trains: the reference engine's own torch trainer, or `deepspeed`: arctic-platform 0.1.4's own "
            "server code and DeepSpeedWorker on the CPU, for the warm start (in process) and for GRPO (a local "
            "`arctic-rl serve --reference --trainer deepspeed` the demo starts, driven through the real client)."
        ),
    )

    max_turns: int = Field(
        default=1,
        ge=1,
        le=8,
        description=(
            "`--max-turns N`: BIRD multi-turn (SkyRL-SQL's protocol, `envs.bird.multi_turn`): the model may run "
            "SQL against the database, shown as an observation, up to N turns before its <solution>; 1 = the "
            "single-turn task."
        ),
    )
    max_staleness: int = Field(
        default=0,
        ge=0,
        description=(
            "`--async K`: asynchronous GRPO, generation of the next batches overlapping training, no trained "
            "rollout older than K optimizer steps (the core's async.max_staleness, which the framework's own "
            "asynchronous trainer is set to); 0 = the synchronous trainer. Not with colocate."
        ),
    )

    @model_validator(mode="after")
    def _async_needs_separate_devices(self) -> DemoOptions:
        if self.max_staleness and self.colocate:
            raise ValueError(
                f"--async {self.max_staleness} with --colocate: colocated training and sampling take turns on the "
                "same devices, so generation cannot overlap training; drop --colocate, or --async 0"
            )
        return self

    @model_validator(mode="after")
    def _multi_turn_is_bird(self) -> DemoOptions:
        if self.max_turns > 1 and self.task != "bird":
            raise ValueError(
                f"--max-turns {self.max_turns} with --task {self.task}: the multi-turn demo task is BIRD (the model "
                "queries the database before it answers); use --task bird, or --max-turns 1"
            )
        return self

    @property
    def max_input_length(self) -> int:
        """The longest context a turn starts from: the prompt, and every earlier turn with its observation
        (a result table of the bundled sample fits in one response length)."""
        return self.max_prompt_length + (self.max_turns - 1) * 2 * self.max_response_length

    @model_validator(mode="after")
    def _check_trainer(self) -> DemoOptions:
        if self.trainer != "deepspeed":
            return self
        if self.server is not None:
            raise ValueError(
                f"--trainer deepspeed with --server {self.server}: the demo starts its own `arctic-rl serve "
                "--reference --trainer deepspeed`; a given server decides who trains (drop one of the two)"
            )
        return self

    @field_validator("server")
    @classmethod
    def _check_server(cls, value: str | None) -> str | None:
        if value is not None:
            server_address(value)
        return value

    @model_validator(mode="after")
    def _check_backend(self) -> DemoOptions:
        if self.backend == "cortex":
            if self.server is None:
                raise ValueError("backend='cortex' needs server=URL (the Cortex API's base URL)")
            if self.colocate:
                raise ValueError(
                    "backend='cortex' never colocates (training and sampling are separate sub-jobs)"
                )
            if self.kl_loss_coef > 0:
                raise ValueError("backend='cortex' has no reference log-probs: set kl_loss_coef=0")
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.out)
