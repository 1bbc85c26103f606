"""GRPO through verl 0.9.1's real V1 trainer on the reference backend, driven through the verl
adapter's public entry points (`adapter_verl.main.with_arctic_defaults` / `compose`, verl's own
`main_ppo.run_ppo` with the adapter's `arctic` trainer mode). The GRPO phase of
`arctic-rl demo --framework verl`: registered in the `arctic_rl.demo_drivers` entry-point group,
which `arctic_rl_testbed.demo.drivers` reads.

verl runs its trainer in a Ray actor (`TaskRunnerV1`) of a local Ray cluster; the trainer starts
the reference backend as another Ray actor, in its own process, and the forwarder workers and
rollout servers connect to it by handle. The demo reads verl's per-step metrics from verl's own
file logger (`trainer.logger=[console,file]`) while the run goes on. The backend actor ends with
the Ray cluster, so the accuracy after GRPO is measured on a fresh in-process reference backend
restored from the run's final checkpoint (the trained weights, synced to its sampler).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from arctic_rl_core.checkpoint_manifest import CheckpointFolder
from arctic_rl_core.envs import gsm8k
from arctic_rl_core.envs.bird import preprocess as bird_preprocess
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

from adapter_verl.config import UnsupportedVerlSettingError, arctic_config_from_verl, check_supported
from adapter_verl.main import compose, keep_ray_off_uv_run, with_arctic_defaults
from adapter_verl.modes import ASYNC_TRAINER_MODE
from adapter_verl.plugin import require_registered
from adapter_verl.session import lookup_session
from adapter_verl.worker import backend_checkpoint_root

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend
    from arctic_rl_testbed.demo.options import DemoOptions
    from arctic_rl_testbed.demo.tasks import DemoTask

CHECKPOINT_DIR = "checkpoints"
METRICS_DIR = "verl_metrics"  # one verl file-logger JSONL per attempt (verl truncates its file)
ROLLOUT_DIR = "rollouts"  # verl's per-step dump of every rollout with its reward
LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's record of its latest checkpoint
REWARD_FUNCTIONS = {
    "bird": "pkg://arctic_rl_core.envs.bird.reward",
    "gsm8k": "pkg://arctic_rl_core.envs.gsm8k",
}
# verl timing keys -> the demo's per-phase seconds.
PHASE_TIMINGS = {
    "seconds_generate": "timing_s/gen",
    "seconds_logprobs": "timing_s/old_log_prob",
    "seconds_train": "timing_s/update_actor",
    "seconds_sync": "timing_s/update_weights",
    "seconds_step": "timing_s/step",
}
# The forwarder's `async/*` step metrics (verl logs them under actor/) -> the names the SkyRL demo's
# records use, so both frameworks' --async K records read the same (groups are verl's replay buffer's).
ASYNC_METRICS = {
    "actor/async/max_staleness": "async/max_staleness",
    "actor/async/staleness_mean": "async/weights_staleness_mean",
    "actor/async/staleness_max": "async/weights_staleness_max",
    "actor/async/staleness_min": "async/weights_staleness_min",
    "actor/async/is_weight_mean": "async/is_weight_mean",
    "actor/async/is_weight_max": "async/is_weight_max",
    "actor/async/is_weight_min": "async/is_weight_min",
    "actor/async/is_weight_clipped_fraction": "async/is_weight_clipped_fraction",
}
_POLL_S = 0.5


def verl_overrides(
    options: DemoOptions, *, train_file: Path, model_path: Path, steps_per_epoch: int
) -> list[str]:
    """verl's Hydra overrides of the demo's GRPO run (written to config.yaml), before the adapter
    adds its selection overrides."""
    run_dir = options.run_dir.resolve()
    rows_per_step = options.prompts_per_step * options.rollouts_per_prompt
    use_kl = options.kl_loss_coef > 0
    # --trainer deepspeed: the 0.1.4 worker packs a training micro-batch's rows into one sequence, which
    # sdpa (the CPU's attention) cannot keep apart, and the demo's built-in loss reads that packed layout:
    # one row per training micro-batch (forwards go unpacked: all rows at once)
    micro = 1 if options.trainer == "deepspeed" else rows_per_step
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={train_file.resolve()}",
        f"data.val_files={train_file.resolve()}",  # required by verl; validation is off
        f"data.train_batch_size={options.prompts_per_step}",
        f"data.max_prompt_length={options.max_prompt_length}",
        f"data.max_response_length={options.max_response_length}",
        "data.dataloader_num_workers=0",
        f"data.seed={options.seed}",
        f"actor_rollout_ref.model.path={model_path.resolve()}",
        f"actor_rollout_ref.rollout.n={options.rollouts_per_prompt}",
        f"actor_rollout_ref.rollout.temperature={options.temperature}",
        # the rollout log-probs in the trainer's distribution: Cortex's training body has no temperature
        f"actor_rollout_ref.rollout.logprobs_mode={'raw' if options.backend == 'cortex' else 'processed'}_logprobs",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={rows_per_step}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={rows_per_step}",
        # one optimizer step per GRPO step, the whole batch in one micro batch (as the SkyRL demo)
        f"actor_rollout_ref.actor.ppo_mini_batch_size={options.prompts_per_step}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        *(
            ["+actor_rollout_ref.model.override_config.attn_implementation=sdpa"]  # no GPU kernel
            if options.trainer == "deepspeed"
            else []
        ),
        f"actor_rollout_ref.actor.optim.lr={options.lr}",
        f"actor_rollout_ref.actor.use_kl_loss={str(use_kl).lower()}",
        *([f"actor_rollout_ref.actor.kl_loss_coef={options.kl_loss_coef}"] if use_kl else []),
        f"actor_rollout_ref.actor.entropy_coeff={options.entropy_loss_coef}",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={REWARD_FUNCTIONS[options.task]}",
        "reward.custom_reward_function.name=compute_score",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.total_epochs={math.ceil(options.steps / steps_per_epoch)}",
        f"trainer.total_training_steps={options.steps}",
        "trainer.logger=[console,file]",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=1",
        f"trainer.rollout_data_dir={run_dir / ROLLOUT_DIR}",
        f"trainer.default_local_dir={run_dir / CHECKPOINT_DIR}",
        "trainer.resume_mode=auto",
        "trainer.project_name=arctic-rl-demo",
        f"trainer.experiment_name={options.task}",
        # logical CPUs for verl's actors (trainer, forwarder, rollout server, reward, TransferQueue)
        "ray_kwargs.ray_init.num_cpus=8",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        *verl_backend_overrides(options, model_path=model_path),
        *separate_async_overrides(options.max_staleness),
    ]


def separate_async_overrides(max_staleness: int) -> list[str]:
    """`--async K` (K > 0) as verl's own separate-async settings: one update per step (the demo's one
    optimizer step per step), a trajectory may span K + 1 steps (max_off_policy_threshold, so the core's
    async.max_staleness is K), K batches prefetched ahead of training, and what verl's separate-async
    trainer asserts (a collective checkpoint engine; the adapter syncs through its backend). Sampling
    runs on its own device (`--async` excludes `--colocate`: hybrid_engine=false, set with the backend)."""
    if max_staleness <= 0:
        return []
    return [
        # what adapter_verl.main makes of verl's trainer.v1.trainer_mode=separate_async
        f"trainer.v1.trainer_mode={ASYNC_TRAINER_MODE}",
        "trainer.v1.separate_async.parameter_sync_step=1",
        f"trainer.v1.separate_async.num_warmup_batches={max_staleness}",
        f"trainer.v1.sampler.max_off_policy_threshold={max_staleness + 1}",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
    ]


def verl_backend_overrides(options: DemoOptions, *, model_path: Path) -> list[str]:
    """The GRPO backend (`arctic_rl_testbed.demo.backend.grpo_backend_settings`) as verl overrides
    (`+remote_backend.core.*`); a server's jobs load `actor_rollout_ref.model.path`."""
    from arctic_rl_testbed.demo.backend import grpo_backend_settings, override_value

    settings = grpo_backend_settings(options, model_path=model_path)
    overrides: list[str] = []
    for key, value in settings.items():
        if key == "placement.colocate":  # verl's own field: the hybrid engine
            overrides.append(f"actor_rollout_ref.hybrid_engine={override_value(value)}")
            if not value:  # sampling on its own (simulated) GPU: verl's standalone rollout pool
                overrides += [
                    "actor_rollout_ref.rollout.nnodes=1",
                    "actor_rollout_ref.rollout.n_gpus_per_node=1",
                ]
        elif key == "checkpoint.path":  # verl's own field: trainer.default_local_dir (set above)
            continue
        else:
            # `++`: add or override (the adapter's `remote_backend=arctic` config already sets backend.kind)
            overrides.append(f"++remote_backend.core.{key}={override_value(value)}")
    return overrides


def step_record(data: dict[str, Any], rewards: list[float]) -> dict[str, Any]:
    """The demo's per-step metrics from what verl's trainer logged for one step and the step's
    per-rollout rewards (verl's rollout dump)."""
    from arctic_rl_testbed.demo.run_log import phase_seconds, rollout_ex

    return {
        "reward_mean": float(data["critic/rewards/mean"]),
        "rollout_ex": rollout_ex(rewards),
        "loss": float(data["actor/pg_loss"]),
        # null in verl's file log when the backend measures none (Cortex's step reports no gradient norm)
        "grad_norm": math.nan if data["actor/grad_norm"] is None else float(data["actor/grad_norm"]),
        # the adapter's trainer logs what its weight sync reports after every step
        "weights_version": int(data["arctic/weights_version"]),
        "rollout_weights_version": int(data["arctic/rollout_weights_version"]),
        "optimizer_steps": int(data["arctic/optimizer_steps"]),
        **phase_seconds(data, PHASE_TIMINGS),
        **{ours: float(data[name]) for name, ours in ASYNC_METRICS.items() if data.get(name) is not None},
    }


def step_rewards(rollout_dir: Path, step: int) -> list[float]:
    """Per-rollout rewards of one step from verl's rollout dump (`<step>.jsonl`, written before the
    step's metrics are logged)."""
    path = rollout_dir / f"{step}.jsonl"
    return [float(json.loads(line)["score"]) for line in path.read_text(encoding="utf-8").splitlines()]


class _MetricsTail:
    """Follows verl's file-logger JSONL from a thread and hands each step's record to `on_step`."""

    def __init__(
        self,
        path: Path,
        rollout_dir: Path,
        on_step: Callable[[int, dict[str, Any]], None],
        on_first_step: Callable[[], None],
        on_poll: Callable[[], None] = lambda: None,
    ) -> None:
        self.path = path
        self.rollout_dir = rollout_dir
        self.on_step = on_step
        self.on_first_step = on_first_step
        self.on_poll = on_poll
        self._seen_step = False
        self.error: BaseException | None = None
        self._offset = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="demo-verl-metrics", daemon=True)

    def __enter__(self) -> _MetricsTail:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is None:
            self._read()  # the lines written since the last poll
        if self.error is not None and exc_info[0] is None:
            raise self.error

    def _follow(self) -> None:
        while not self._stop.wait(_POLL_S):
            try:
                self.on_poll()
                self._read()
            except BaseException as error:  # reported by __exit__ in the driver's thread
                self.error = error
                return

    def _read(self) -> None:
        if not self.path.is_file():
            return
        with self.path.open("rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.splitlines():
            entry = json.loads(line)
            if "actor/pg_loss" in entry["data"]:
                if not self._seen_step:
                    self._seen_step = True
                    self.on_first_step()
                step = int(entry["step"])
                self.on_step(step, step_record(entry["data"], step_rewards(self.rollout_dir, step)))


class _LocationProbe:
    """The backend's location, looked up while verl's run is up: the trainer shuts the backend it
    started down when `fit` ends, so a short run's first metrics line can be read after the
    reference engine's actor is gone."""

    def __init__(self, options: DemoOptions) -> None:
        self.options = options
        self.found: dict[str, Any] | None = None

    def poll(self) -> None:
        if self.found is not None or not ray.is_initialized():  # never start a cluster of our own
            return
        try:
            self.found = _backend_location(self.options)
        except Exception:  # the session or the engine's actor is not up yet: the next poll asks again
            return

    def get(self) -> dict[str, Any]:
        return self.found if self.found is not None else _backend_location(self.options)


def _backend_location(options: DemoOptions) -> dict[str, Any]:
    """Where verl's trainer started the reference engine: its Ray actor's process and node (or
    the Arctic server the run drives)."""
    if options.server is not None:
        api = "Cortex API" if options.backend == "cortex" else "Arctic on-prem server"
        return {"where": f"{api} at {options.server} (arctic-platform client)"}

    handle = lookup_session().handle
    return {"where": "ray actor", **handle.location()}


def _first_step(checkpoints: Path) -> int:
    """The step after the run's latest checkpoint, every file of it checked (`CheckpointDamaged`)."""

    return (CheckpointFolder(checkpoints, LATEST_FILE).resume_point() or 0) + 1


def run_grpo(
    options: DemoOptions,
    task: DemoTask,
    *,
    model_path: Path,
    on_step: Callable[[int, dict[str, Any]], None],
    on_ready: Callable[[int, list[str], dict[str, Any]], None],
    on_backend: Callable[[dict[str, Any]], None],
) -> Backend | None:
    """Run (or resume) the GRPO steps; returns an in-process reference backend holding the
    final trained weights, synced to its sampler (the caller shuts it down); None on Cortex.

    `on_ready(first_step, overrides, arctic_config)` is called before training (a resumed run
    starts after its latest checkpoint); `on_backend(location)` once the trainer's backend runs
    (where: "ray actor", pid, hostname, node_id); `on_step(step, record)` after every step."""

    notice = keep_ray_off_uv_run()  # `uv run arctic-rl demo` runs this driver under uv run
    if notice:
        print(notice, file=sys.stderr)  # into the run log

    run_dir = options.run_dir
    data_dir = run_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    train_file = data_dir / "train.parquet"
    _write_rows(task, train_file)
    steps_per_epoch = task.steps_per_epoch(options.prompts_per_step)
    overrides, _added = with_arctic_defaults(
        verl_overrides(options, train_file=train_file, model_path=model_path, steps_per_epoch=steps_per_epoch)
    )
    config = compose(overrides)
    problems = check_supported(config)
    if problems:
        raise UnsupportedVerlSettingError(problems)
    require_registered()
    arctic_cfg = arctic_config_from_verl(config, options.steps)
    checkpoints = run_dir / CHECKPOINT_DIR
    first_step = _first_step(checkpoints)
    on_ready(first_step, overrides, arctic_cfg.model_dump(mode="json"))

    if first_step <= options.steps:
        metrics_file = run_dir / METRICS_DIR / f"from_step_{first_step}-{int(time.time())}.jsonl"
        metrics_file.parent.mkdir(parents=True, exist_ok=True)
        # verl's file logger reads this in the trainer's Ray actor, which inherits the driver's
        # environment through the local cluster ray.init starts (and verl's runtime env)
        os.environ["VERL_FILE_LOGGER_PATH"] = str(metrics_file.resolve())
        try:
            location = _LocationProbe(options)
            tail = _MetricsTail(
                metrics_file,
                run_dir / ROLLOUT_DIR,
                on_step,
                lambda: on_backend(location.get()),
                location.poll,
            )
            with tail:
                run_ppo(config, task_runner_class=TaskRunnerV1)
        finally:
            ray.shutdown()  # also on Ctrl-C: the trainer and backend actors end with the cluster

    if options.backend == "cortex" and options.server is not None:
        # the final weights were in the run's Cortex jobs, which ended with verl's trainer; Cortex
        # keeps the checkpoints in its own store, which the 0.1.4 client cannot load from
        return None
    return asyncio.run(_restored_backend(options, model_path, checkpoints))


def _write_rows(task: DemoTask, path: Path) -> None:
    write_parquet = bird_preprocess.write_parquet if task.name == "bird" else gsm8k.write_parquet
    write_parquet(task.train_rows, path)


async def _restored_backend(options: DemoOptions, model_path: Path, checkpoints: Path) -> Backend:
    """A reference backend on the final checkpoint's weights, synced to its sampler."""
    from arctic_rl_testbed.demo.backend import reference_backend, synced

    step = _first_step(checkpoints) - 1
    if step < 1:
        raise RuntimeError(f"verl left no checkpoint in {checkpoints}: the GRPO run did not finish a step")
    backend = reference_backend(options, model_path=model_path, lr=options.lr)

    await backend.load_checkpoint(
        backend_checkpoint_root(str(checkpoints / f"global_step_{step}" / "actor")), step
    )
    await synced(backend)
    return backend


# `arctic-rl demo --framework verl --async K` runs verl's separate-async trainer (separate_async_overrides)
run_grpo.supports_async = True
# the demo checks (and rewinds) the run's verl checkpoints before a resume
run_grpo.checkpoint_layout = (CHECKPOINT_DIR, LATEST_FILE)
