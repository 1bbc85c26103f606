"""GRPO through SkyRL 0.4.0's real `RayPPOTrainer.train()` on the reference backend, driven through
the SkyRL adapter's public classes (`adapter_skyrl.config.parse_cli`, `ArcticPPOExp`,
`ArcticGenerator`). The GRPO phase of `arctic-rl demo --framework skyrl`: registered in the
`arctic_rl.demo_drivers` entry-point group, which `arctic_rl_testbed.demo.drivers` reads."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.registry import create_backend
from arctic_rl_core.checkpoint_manifest import CheckpointFolder
from arctic_rl_core.envs.bird.multi_turn import STOP_STRINGS
from loguru import logger

from adapter_skyrl.config import parse_cli, to_arctic_config
from adapter_skyrl.experiment import ArcticPPOExp
from adapter_skyrl.trainer import SKYRL_LATEST_FILE

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend
    from arctic_rl_testbed.demo.options import DemoOptions
    from arctic_rl_testbed.demo.tasks import DemoTask

CHECKPOINT_DIR = "checkpoints"
# SkyRL timing keys -> the demo's per-phase seconds.
PHASE_TIMINGS = {
    "seconds_generate": "timing/generate",
    "seconds_logprobs": "timing/fwd_logprobs_values_reward",
    "seconds_train": "timing/train_critic_and_policy",
    "seconds_sync": "timing/sync_weights",
    "seconds_step": "timing/step",
}


# The core's per-step statistics of an asynchronous run (adapter_skyrl.fully_async names the three
# version-staleness ones async/weights_staleness_*, next to SkyRL's own async/staleness_*).
ASYNC_METRICS = (
    "async/max_staleness",
    "async/weights_staleness_mean",
    "async/weights_staleness_max",
    "async/weights_staleness_min",
    "async/trained_groups",
    "async/dropped_groups",
    "async/regenerated_groups",
    "async/is_weight_mean",
    "async/is_weight_max",
    "async/is_weight_min",
    "async/is_weight_clipped_fraction",
)


def skyrl_overrides(
    options: DemoOptions, *, train_file: Path, model_path: Path, steps_per_epoch: int
) -> list[str]:
    """The SkyRL command-line overrides of the demo's GRPO run (written to config.yaml)."""
    run_dir = options.run_dir.resolve()
    rows_per_step = options.prompts_per_step * options.rollouts_per_prompt
    use_kl = options.kl_loss_coef > 0
    use_entropy = options.entropy_loss_coef > 0
    # --trainer deepspeed: the 0.1.4 worker packs a training micro-batch's rows into one sequence, which
    # sdpa (the CPU's attention) cannot keep apart, and the demo's built-in loss reads that packed layout:
    # one row per training micro-batch (forwards go unpacked: all rows at once)
    micro = 1 if options.trainer == "deepspeed" else rows_per_step
    return [
        f"data.train_data=['{train_file.resolve()}']",
        "data.val_data=[]",
        "data.dataloader.num_workers=0",
        "trainer.placement.colocate_all=false",
        "generator.inference_engine.enable_ray_prometheus_stats=false",
        "trainer.enable_ray_gpu_monitor=false",
        "trainer.algorithm.advantage_estimator=grpo",
        *skyrl_async_overrides(options),
        *skyrl_multi_turn_overrides(options),
        f"trainer.algorithm.use_kl_loss={str(use_kl).lower()}",
        *([f"trainer.algorithm.kl_loss_coef={options.kl_loss_coef}"] if use_kl else []),
        f"trainer.algorithm.use_entropy_loss={str(use_entropy).lower()}",
        *([f"trainer.algorithm.entropy_loss_coef={options.entropy_loss_coef}"] if use_entropy else []),
        f"trainer.policy.optimizer_config.lr={options.lr}",
        f"trainer.train_batch_size={options.prompts_per_step}",
        f"trainer.policy_mini_batch_size={options.prompts_per_step}",
        "trainer.update_epochs_per_batch=1",
        f"generator.n_samples_per_prompt={options.rollouts_per_prompt}",
        f"trainer.micro_train_batch_size_per_gpu={micro}",
        f"trainer.micro_forward_batch_size_per_gpu={rows_per_step}",
        *(["trainer.flash_attn=false"] if options.trainer == "deepspeed" else []),  # sdpa: no GPU kernel
        f"trainer.max_prompt_length={options.max_prompt_length}",
        f"generator.sampling_params.max_generate_length={options.max_response_length}",
        f"generator.sampling_params.temperature={options.temperature}",
        f"trainer.epochs={math.ceil(options.steps / steps_per_epoch)}",
        f"trainer.max_training_steps={options.steps}",
        "trainer.eval_interval=0",
        "trainer.eval_before_train=false",
        "trainer.print_example_interval=0",
        "trainer.logger=console",
        f"trainer.seed={options.seed}",
        "trainer.ckpt_interval=1",
        # a Cortex save keeps every checkpoint (no pruning through the 0.1.4 client): keep all there
        f"trainer.max_ckpts_to_keep={-1 if options.backend == 'cortex' and options.server else 2}",
        f"trainer.ckpt_path={run_dir / CHECKPOINT_DIR}",
        f"trainer.export_path={run_dir / 'export'}",
        "trainer.resume_mode=latest",
        *skyrl_backend_overrides(options, model_path=model_path),
    ]


def skyrl_async_overrides(options: DemoOptions) -> list[str]:
    """The loss and trainer: SkyRL's synchronous trainer with dual-clip PPO, or with `--async K`
    SkyRL's own fully asynchronous trainer as its examples run it (`rollout_is`: the ratio to the
    rollout log-probs is the off-policy correction; no TIS on top, which would weight each token by
    that ratio a second time; over three `bench learning` seeds the two end alike, README),
    `max_staleness_steps=K` (the demo's one optimizer step per SkyRL step makes it the core's
    async.max_staleness) and enough generation workers for K steps of prompt groups ahead."""
    k = options.max_staleness
    if not k:
        # single turn: one generate call per step (SkyRL's batched generation, as its GSM8K example): the
        # rollouts of a resumed run are the ones the original run drew
        batched = "true" if options.max_turns == 1 else "false"
        return ["trainer.algorithm.policy_loss_type=dual_clip", f"generator.batched={batched}"]
    return [
        "generator.batched=false",  # SkyRL's fully async trainer samples per trajectory
        "trainer.fully_async.enabled=true",
        f"trainer.fully_async.max_staleness_steps={k}",
        f"trainer.fully_async.num_parallel_generation_workers={options.prompts_per_step * (k + 1)}",
        "trainer.algorithm.policy_loss_type=rollout_is",
    ]


def skyrl_multi_turn_overrides(options: DemoOptions) -> list[str]:
    """`--max-turns N`: SkyRL's generator as SkyRL-SQL runs it (one continued message, stop at </sql> and
    </solution>, N turns), each turn starting from at most `options.max_input_length` tokens."""
    if options.max_turns == 1:
        return []

    stop = "[" + ",".join(f"'{s}'" for s in STOP_STRINGS) + "]"
    return [
        f"generator.max_turns={options.max_turns}",
        "generator.use_conversation_multi_turn=false",
        f"generator.sampling_params.stop={stop}",
        f"generator.eval_sampling_params.stop={stop}",
        f"generator.max_input_length={options.max_input_length}",
    ]


def skyrl_backend_overrides(options: DemoOptions, *, model_path: Path) -> list[str]:
    """The GRPO backend (`arctic_rl_testbed.demo.backend.grpo_backend_settings`) as SkyRL overrides:
    `trainer.arctic_rl.*`, and for a server the policy model path (the model its jobs load, and
    the tokenizer SkyRL builds)."""
    from arctic_rl_testbed.demo.backend import grpo_backend_settings, override_value

    settings = grpo_backend_settings(options, model_path=model_path)
    # Colocation is SkyRL's own switch (colocate_all); the rest are core groups under trainer.arctic_rl.
    colocate = settings.pop("placement.colocate", False)
    overrides = [f"trainer.placement.colocate_all={override_value(colocate)}"]
    overrides += [f"trainer.arctic_rl.{key}={override_value(value)}" for key, value in settings.items()]
    if options.server is not None:
        overrides.append(f"trainer.policy.model.path={model_path.resolve()}")
    return overrides


def step_record(data: dict[str, Any], rewards: list[float]) -> dict[str, Any]:
    """The demo's per-step metrics from what SkyRL's trainer logged for one step."""
    from arctic_rl_testbed.demo.run_log import phase_seconds, rollout_ex

    return {
        "reward_mean": float(data["reward/avg_raw_reward"]),
        "rollout_ex": rollout_ex(rewards),
        "loss": float(data["policy/policy_loss"]),
        "grad_norm": float(data["policy/grad_norm"]),
        "weights_version": int(data["arctic/weights_version"]),
        "rollout_weights_version": int(data["generate/weights_version"]),
        "turns_mean": float(data["generate/turns_mean"]) if "generate/turns_mean" in data else None,
        "optimizer_steps": int(data["arctic/optimizer_steps"]),
        **phase_seconds(data, PHASE_TIMINGS),
        **{name: float(data[name]) for name in ASYNC_METRICS if name in data},
    }


def run_grpo(
    options: DemoOptions,
    task: DemoTask,
    *,
    model_path: Path,
    on_step: Callable[[int, dict[str, Any]], None],
    on_ready: Callable[[int, list[str], dict[str, Any]], None],
    on_backend: Callable[[dict[str, Any]], None],
) -> Backend:
    """Run (or resume) the GRPO steps; returns the backend (the caller shuts it down), its sampler
    on the final weights.

    `on_ready(first_step, overrides, arctic_config)` is called before training (a resumed run
    starts after its latest checkpoint); `on_backend(location)` once the backend is built (where:
    "in process", pid, hostname); `on_step(step, record)` after every step."""

    from arctic_rl_testbed.reference.ray_actor import process_location

    os.environ.setdefault("TQDM_DISABLE", "1")  # the demo shows its own progress

    run_dir = options.run_dir
    log_file = run_dir / "skyrl.log"

    def log_to_file() -> None:
        logger.remove()
        logger.add(str(log_file), level="INFO")

    log_to_file()
    data_dir = run_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    train_file = data_dir / "train.jsonl"
    train_file.write_text("".join(json.dumps(row) + "\n" for row in task.train_rows), encoding="utf-8")
    steps_per_epoch = task.steps_per_epoch(options.prompts_per_step)
    overrides = skyrl_overrides(
        options, train_file=train_file, model_path=model_path, steps_per_epoch=steps_per_epoch
    )

    class DemoTracker:
        """SkyRL's tracker surface: every step's logged metrics become one demo record."""

        def log(self, data: dict[str, Any], step: int, commit: bool = False) -> None:
            if "policy/policy_loss" in data:
                on_step(int(step), step_record(data, list(trained_rewards)))

        def finish(self) -> None:
            pass

        def log_exception(self, exc: BaseException, step: int) -> None:
            pass

    # The raw rewards of the rollouts the step trains (SkyRL's post-processing sees exactly those: the
    # synchronous trainer's batch, the fully async trainer's groups admitted by the staleness gate).
    trained_rewards: list[float] = []

    class DemoExp(ArcticPPOExp):
        def _setup_trainer(self):
            trainer = super()._setup_trainer()
            log_to_file()  # SkyRL's trainer points loguru (and stdlib logging) at stderr
            return trainer

        def get_tracker(self) -> DemoTracker:
            return DemoTracker()

        def trainer_class(self):
            class DemoTrainer(super().trainer_class()):
                def postprocess_generator_output(self, generator_output, uids, *args, **kwargs):
                    trained_rewards[:] = [  # a row's reward: SkyRL's per-token rewards summed
                        float(sum(r)) if isinstance(r, list) else float(r)
                        for r in generator_output["rewards"]
                    ]
                    return super().postprocess_generator_output(generator_output, uids, *args, **kwargs)

            return DemoTrainer

    cfg = parse_cli(overrides)
    # a damaged checkpoint stops the resume here, before any backend or job starts
    CheckpointFolder(run_dir / CHECKPOINT_DIR, SKYRL_LATEST_FILE).resume_point()
    # The demo builds the backend itself (so it stays up for the accuracy after GRPO; an
    # experiment shuts down only a backend it created), from the adapter's own config mapping.
    backend = create_backend(to_arctic_config(cfg, steps_per_epoch=steps_per_epoch))
    if options.server is None:
        on_backend({"where": "in process", **process_location()})
    else:
        api = "Cortex API" if options.backend == "cortex" else "Arctic on-prem server"
        on_backend({"where": f"{api} at {options.server} (arctic-platform client)"})
    exp = DemoExp(cfg, backend=backend)
    done = CheckpointFolder(run_dir / CHECKPOINT_DIR, SKYRL_LATEST_FILE).resume_point()  # every file checked
    on_ready((done or 0) + 1, overrides, exp.arctic_cfg.model_dump(mode="json"))
    exp.run()  # SkyRL's own entry: build the trainer, resume from the latest checkpoint, train
    return exp.backend


run_grpo.supports_async = True  # `arctic-rl demo --async K`: SkyRL's FullyAsyncRayPPOTrainer
run_grpo.supports_multi_turn = True  # `arctic-rl demo --max-turns N`: SkyRL's generator, BIRD multi-turn
# the demo checks (and rewinds) the run's SkyRL checkpoints before a resume
run_grpo.checkpoint_layout = (CHECKPOINT_DIR, "latest_ckpt_global_step.txt")
