"""What verl's end-to-end runs in these tests share (test_verl_e2e, test_verl_wire_e2e,
test_verl_async_wire): the working folder (the tiny model saved as a Hugging Face directory, which verl
reads, and the bundled BIRD sample preprocessed to verl's parquet files) and the overrides every such
`python -m adapter_verl.main` run sets (data, model, group size, the graded reward, one node of one
GPU, the console logger, Ray's and TransferQueue's sizes), running it, reading verl's logged step
metrics, and the control routes an Arctic server received from the run (in verl's order).
Each test adds its own layout, batch shapes and checks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

# The control routes an Arctic server receives from a verl run (`control_routes`):
# the weight-sync policy's sequence around a colocated sync (arctic_rl_core.weight_sync): the trainer
# gives the devices back after it
SYNC_COLOCATED = [
    "sleep-training(non_lp)",
    "wake-inference(['weights'])",
    "weight-sync",
    "wake-inference(['kv_cache'])",
    "reset-prefix-cache",
    "sleep-training(all)",
]
# verl's per-step order on the forwarder: the replica hands the devices to training after sampling,
# old log-probs on the training job, reference log-probs on the log-prob job (woken for it)
TO_TRAINING = ["sleep-inference(2)", "wake-training"]
REF_LOGPROBS = ["wake-log-prob", "sleep-log-prob"]
START_UP = ["initialize(sampling)", "initialize(log_prob)", "initialize(training)"]
SHUT_DOWN = ["destroy(training)", "destroy(sampling)", "destroy(log_prob)"]
_DATA_ROUTES = {"forward", "forward-backward", "step", "status", "health"}
TINY_MODEL = {"num_layers": 1, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4}
# a random tiny model writes no valid SQL (every BIRD reward is 0, every GRPO advantage 0): the graded
# vowel-share reward differs within groups, so the policy term has a signal
SHARED_DIR = Path(__file__).resolve().parent
LEARNABLE_REWARD = SHARED_DIR / "learnable_reward.py"


def prepare_workdir(root: Path, *, model: bool = True) -> Path:
    """`root/model` (the tiny model, seed 42; the backend builds the same one itself) unless `model` is
    false, and `root/data/{train,dev}.parquet` (the bundled BIRD sample's prompts)."""
    from arctic_rl_core.envs.bird.preprocess import PreprocessOptions, preprocess
    from arctic_rl_core.envs.bird.sample import sample_dir

    if model:
        from arctic_rl_core.config.reference_model import ReferenceModelConfig
        from arctic_rl_testbed.reference.model import save_model_dir

        save_model_dir(root / "model", ReferenceModelConfig(**TINY_MODEL), seed=42)
    preprocess(sample_dir(root / "bird_cache"), root / "data", PreprocessOptions(), show_progress=False)
    return root


def run_overrides(
    root: Path, *, train_batch: int, rollout_n: int, max_response: int, steps: int
) -> list[str]:
    """The overrides every verl end-to-end run of these tests sets."""
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={root / 'data' / 'train.parquet'}",
        f"data.val_files={root / 'data' / 'dev.parquet'}",
        f"data.train_batch_size={train_batch}",
        "data.max_prompt_length=1024",
        f"data.max_response_length={max_response}",
        "data.dataloader_num_workers=0",
        "data.shuffle=false",
        f"actor_rollout_ref.model.path={root / 'model'}",
        f"actor_rollout_ref.rollout.n={rollout_n}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={LEARNABLE_REWARD}",
        "reward.custom_reward_function.name=compute_score",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={steps}",
        "trainer.logger=[console]",
        "ray_kwargs.ray_init.num_cpus=8",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    ]


def run_verl_main(
    root: Path, overrides: list[str], *, log_name: str, timeout: int = 900, shared_on_path: bool = False
) -> tuple[int, str]:
    """`python -m adapter_verl.main OVERRIDES` in `root` (unbuffered, Ray's logs not deduplicated): its
    exit code and its output, which is also written to `root/log_name`. `shared_on_path`: tests/shared
    goes on PYTHONPATH (verl's Ray processes inherit it), for a run whose verl config names a module
    there (a custom agent loop's `_target_`)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_DEDUP_LOGS": "0"}
    if shared_on_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHARED_DIR), env.get("PYTHONPATH")) if p)
    out = subprocess.run(
        [sys.executable, "-m", "adapter_verl.main", *overrides],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    log = out.stdout + out.stderr
    (root / log_name).write_text(log)
    return out.returncode, log


def step_metrics(log: str, step: int) -> dict[str, float]:
    """verl's console logger prints `step:<n> - key:value - key:value ...` once per step (the last such
    line of `step` is read; numpy scalars, logged by repr, are unwrapped)."""
    lines = [line for line in log.splitlines() if re.search(rf"(^|\s)step:{step} - ", line)]
    assert lines, f"no metrics line for step {step}"
    metrics = {}
    for part in lines[-1].split(" - "):
        key, _, value = part.strip().rpartition(":")
        value = re.sub(r"^np\.\w+\((.*)\)$", r"\1", value)
        try:
            metrics[key] = float(value)
        except ValueError:
            continue
    return metrics


def control_routes(requests: list[dict]) -> list[str]:
    """Sleep/wake/sync/checkpoint calls and generates (consecutive generates, one per rollout request, as
    one `generate`), in the order the server received them (from whichever client sent them; a server's
    `--request-log`); job set-up polls and training data calls left out. Every request answered 200."""
    names: list[str] = []
    for entry in requests:
        route = entry["route"].lstrip("/")
        assert entry["status"] == 200, entry
        if route == "operation":
            route = entry["operation_type"]
        if route.startswith("job/") or route in _DATA_ROUTES:
            continue
        detail = entry.get("mode") or entry.get("tags") or entry.get("level") or entry.get("job_type")
        name = f"{route}({detail})" if detail is not None else route
        if not (name == "generate" and names and names[-1] == "generate"):
            names.append(name)
    return names
