"""SkyRL 0.4.0's real `RayPPOTrainer.train()` through `ArcticBackend` and the real arctic-platform
0.1.4 client over HTTP, against `arctic-rl serve --reference --trainer deepspeed`: the training and
log-prob jobs are arctic-platform 0.1.4's own server code and `DeepSpeedWorker`s on the CPU (one
process per rank); only sampling is the reference engine's (the stand-in for vLLM), and it receives the
workers' weights at every sync.

Runs (one server for the module; each run starts its own jobs, ~20-40 s of worker start-up):
- ZeRO-3, the KL loss with the log-prob job on ZeRO-3 (under ZeRO-1/2 training the client starts it on
  ZeRO-0: tests/verl/test_verl_deepspeed_wire.py runs that), a weight sync from the workers every step, a
  checkpoint each step with an HF export;
- resumed from step 1 (the DeepSpeed checkpoint loads into fresh workers) for step 2;
- a save whose writes the workers' kernel refuses (a full disk), then the resume that follows it.
Not colocated: DeepSpeed offloads a ZeRO-3 job's states (`/sleep-training`) only with its FusedAdam, a
C++ op it would compile here, and the CPU runs torch's AdamW (`deepspeed_cpu_shims`); the colocated
family runs on ZeRO-2 in verl's run (tests/verl/test_verl_deepspeed_wire.py).

On a CPU the configuration names what the GPU defaults would need: sdpa attention (flash-attention is a
GPU kernel, and so ZoRRo is off) and no Liger kernels; one row per training micro-batch
(`micro_train_batch_size_per_gpu=1`: the built-in verl_grpo loss reads the 0.1.4 pipeline's packed
layout, which sdpa cannot keep apart). Forwards (old and reference log-probs) go unpacked
(`meta.cu_seqlens=None`, issue 28 item 3).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import resource
import time
from pathlib import Path

import pytest
import torch
from arctic_rl_core.backends.arctic import ArcticBackend
from skyrl_e2e_run import TINY_GRPO, TINY_MODEL, CallLog, logged_steps, run_grpo
from wire_server import WireServer, serve_reference, tiny_model_dir

SEED = 7
DEEPSPEED_ON_CPU = [
    "trainer.flash_attn=false",  # SkyRL's own switch: sdpa attention (flash-attention is a GPU kernel)
    "trainer.arctic_rl.zorro.enable=false",
    "trainer.arctic_rl.kernels.use_liger=false",
    "trainer.arctic_rl.deepspeed.zero_stage=3",  # the log-prob job takes the same stage (ZeRO-0 under 1/2)
]


@pytest.fixture(scope="module")
def deepspeed_server(tmp_path_factory) -> WireServer:
    log_dir = tmp_path_factory.mktemp("deepspeed-server")
    with serve_reference(log_dir, args=["--trainer", "deepspeed"]) as server:
        yield server


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-model"), SEED, **TINY_MODEL)


def _run(server, model_dir, learnable_jsonl, root, *extra: str, log=CallLog):
    logs: list[CallLog] = []

    def factory(arctic_cfg):
        logs.append(log(ArcticBackend.from_config(arctic_cfg)))
        return logs[-1]

    start = time.perf_counter()
    try:
        exp = run_grpo(
            [
                *server.overrides("trainer.arctic_rl.", model=False),
                *DEEPSPEED_ON_CPU,
                f"trainer.policy.model.path={model_dir}",
                f"data.train_data=['{learnable_jsonl}']",
                f"trainer.seed={SEED}",
                "trainer.max_training_steps=2",
                f"trainer.ckpt_path={root / 'ckpt'}",
                f"trainer.export_path={root / 'export'}",
                f"trainer.arctic_rl.checkpoint.path={root / 'server'}",
                "trainer.arctic_rl.placement.log_prob_gpus=1",  # reference log-probs for the KL loss
                *extra,
            ],
            base=TINY_GRPO,
            backend_factory=factory,
            shutdown=True,
        )
    finally:
        leftover = server.destroy_all_jobs()  # a failed run must not break the next one
    assert leftover == []  # the run destroyed the jobs it created
    return exp, logs[0], time.perf_counter() - start


@pytest.fixture(scope="module")
def kl_run(deepspeed_server, model_dir, learnable_jsonl, tmp_path_factory):
    root = tmp_path_factory.mktemp("skyrl_deepspeed_kl")
    exp, calls, seconds = _run(
        deepspeed_server,
        model_dir,
        learnable_jsonl,
        root,
        "trainer.ckpt_interval=1",
        "trainer.hf_save_interval=-1",
        "trainer.arctic_rl.checkpoint.export_hf=true",
        "trainer.resume_mode=none",
    )
    print(f"SkyRL run on the 0.1.4 DeepSpeed workers (ZeRO-3, KL, 2 steps): {seconds:.1f} s")
    return exp, calls, root


def _checkpoint_folder(root: Path, step: int) -> Path:
    """The server-side checkpoint SkyRL's step-`step` checkpoint points at (its arctic_checkpoint.json)."""
    policy = root / "ckpt" / f"global_step_{step}" / "policy"
    marker = json.loads((policy / "arctic_checkpoint.json").read_text())
    return (
        policy / marker["backend_path"]
    ).resolve() / f"checkpoint-{marker['step']}"  # relative to the marker


def test_grpo_with_kl_trains_on_the_real_workers(kl_run):
    exp, calls, _ = kl_run
    steps = logged_steps(exp)
    assert sorted(steps) == [1, 2]
    for step in steps.values():
        assert math.isfinite(step["policy/policy_loss"]) and step["policy/grad_norm"] > 0
        assert step["loss/avg_raw_advantages_abs"] > 0.1  # rewards differ within groups
        assert step["policy/arctic/kl_loss"] >= 0.0 and step["policy/arctic/kl_coef"] == pytest.approx(0.01)
    assert "forward" in calls.calls and calls.prompt_types == {str}


def test_each_step_samples_from_the_workers_last_sync(kl_run):
    exp, calls, _ = kl_run
    names = calls.calls
    generates = [i for i, name in enumerate(names) if name == "generate"]
    between = names[generates[0] : generates[1]]
    assert (
        between.index("forward_backward")
        < between.index("sync_weights")
        < between.index("reset_prefix_cache")
    )
    versions = [batch["version"] for batch in exp.generator.batches]
    assert versions[0] < versions[1] == logged_steps(exp)[1]["arctic/weights_version"]


def test_each_checkpoint_is_a_deepspeed_checkpoint_with_an_hf_export(kl_run):
    _, calls, root = kl_run
    assert calls.calls.count("save_checkpoint") == 2
    for step in (1, 2):
        folder = _checkpoint_folder(root, step)
        tag = (folder / "latest").read_text().strip()  # DeepSpeed's own pointer to its tag folder
        assert list((folder / tag).glob("*model_states.pt")) and list((folder / tag).glob("*optim_states.pt"))
        assert (folder / "hf" / "config.json").is_file() and (folder / "hf" / "model.safetensors").is_file()


def _trained_state(folder: Path) -> dict[str, torch.Tensor]:
    """The weights and optimizer moments a DeepSpeed checkpoint holds. Under ZeRO-3 the model_states file's
    module tensors are empty placeholders (shape (0,)): the parameters are the optimizer file's fp32 flat
    partition, beside Adam's moments."""
    tag = (folder / "latest").read_text().strip()
    (states,) = (folder / tag).glob("*optim_states.pt")
    saved = torch.load(states, map_location="cpu", weights_only=False)["optimizer_state_dict"]
    assert saved["zero_stage"] == 3
    found = {f"fp32_flat_group.{i}": t for i, t in enumerate(saved["fp32_flat_groups"])}
    for group, moments in saved["optimizer_state_dict"]["state"].items():
        found.update(
            {f"{group}.{name}": t for name, t in moments.items() if torch.is_tensor(t) and t.numel() > 1}
        )
    assert found and all(t.numel() > 0 for t in found.values())
    return found


def test_resume_from_step_1_trains_step_2_from_the_loaded_workers(
    deepspeed_server, kl_run, model_dir, learnable_jsonl, tmp_path
):
    exp, _, root = kl_run
    resumed, calls, seconds = _run(
        deepspeed_server,
        model_dir,
        learnable_jsonl,
        tmp_path,
        "trainer.ckpt_interval=1",
        "trainer.hf_save_interval=-1",
        "trainer.resume_mode=from_path",
        f"trainer.resume_path={root / 'ckpt' / 'global_step_1'}",
    )
    print(f"SkyRL run on the 0.1.4 DeepSpeed workers (resumed, 1 step): {seconds:.1f} s")
    assert "load_checkpoint" in calls.calls
    assert calls.calls.index("load_checkpoint") < calls.calls.index("forward_backward")
    assert sorted(logged_steps(resumed)) == [2]
    assert resumed.generator.batches[0]["texts"] == exp.generator.batches[1]["texts"]  # the same rollouts
    before, original, again = (
        _trained_state(_checkpoint_folder(root, 1)),
        _trained_state(_checkpoint_folder(root, 2)),
        _trained_state(_checkpoint_folder(tmp_path, 2)),
    )
    assert original.keys() == again.keys() == before.keys() and "fp32_flat_group.0" in original
    for name in original:  # the same step from the same state: DeepSpeed on one CPU rank is deterministic
        assert torch.equal(original[name], again[name]), name
        assert not torch.equal(before[name], original[name]), name  # and step 2 did move every one of them


class CheckpointCalls(CallLog):
    """The backend, with each save's and load's (path, step) recorded; the `refused_save`-th save (from 1)
    runs while the server's DeepSpeed worker processes may write at most 64 bytes to any file (RLIMIT_FSIZE
    through prlimit: their writes fail with EFBIG, as on a full disk; Python ignores SIGXFSZ)."""

    def __init__(self, target, server: WireServer | None = None, refused_save: int | None = None):
        super().__init__(target)
        self.server, self.refused_save = server, refused_save
        self.saves: list[tuple[str, int]] = []
        self.loads: list[tuple[str, int]] = []

    async def save_checkpoint(self, path, step, **kwargs):
        self.saves.append((path, step))
        if len(self.saves) != self.refused_save:
            return await self.target.save_checkpoint(path, step, **kwargs)
        with _workers_file_size_limit(self.server, 64):
            return await self.target.save_checkpoint(path, step, **kwargs)

    async def load_checkpoint(self, path, step):
        self.loads.append((path, step))
        return await self.target.load_checkpoint(path, step)


@contextlib.contextmanager
def _workers_file_size_limit(server: WireServer, nbytes: int):
    import psutil

    workers = [
        p
        for p in psutil.Process(server.process.pid).children(recursive=True)
        if "deepspeed_worker_process" in " ".join(p.cmdline())
    ]
    assert workers, "the server runs no DeepSpeed worker process"
    before = [resource.prlimit(p.pid, resource.RLIMIT_FSIZE) for p in workers]
    for p, (_, hard) in zip(workers, before, strict=True):
        resource.prlimit(p.pid, resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        for p, limits in zip(workers, before, strict=True):
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                resource.prlimit(p.pid, resource.RLIMIT_FSIZE, limits)


def test_a_refused_write_fails_the_save_and_the_resume_loads_the_last_whole_checkpoint(
    deepspeed_server, model_dir, learnable_jsonl, tmp_path
):
    """0.1.4's own save on a full disk at SkyRL's step 2: DeepSpeed's writes fail in the worker, the
    server answers an error and leaves a partial checkpoint-<its step> (the backend counts optimizer
    steps: 4 per SkyRL step here). The run stops saying which save failed and why, keeps no
    global_step_2 (so no marker names the partial folder), and the resume loads step 1's checkpoint,
    trains step 2 again and saves a whole checkpoint over the partial one."""
    from arctic_rl_core.checkpoint_manifest import BackendSaveFailed, StepSaveFailed, file_record

    settings = ("trainer.ckpt_interval=1", "trainer.hf_save_interval=-1")
    refused = functools.partial(CheckpointCalls, server=deepspeed_server, refused_save=2)
    with pytest.raises(StepSaveFailed) as caught:
        _run(
            deepspeed_server,
            model_dir,
            learnable_jsonl,
            tmp_path,
            *settings,
            "trainer.resume_mode=none",
            log=refused,
        )
    ckpt = tmp_path / "ckpt"
    failed = caught.value
    assert isinstance(failed.cause, BackendSaveFailed)
    partial, whole = failed.cause.folder, failed.cause.folder.parent / "checkpoint-4"
    assert partial.name == "checkpoint-8"  # SkyRL's step 2: the backend's optimizer step 8
    said = str(failed)
    assert said.startswith(
        f"saving the checkpoint {ckpt / 'global_step_2'} failed: BackendSaveFailed: the backend's save of "
        f"{partial} failed (ArcticServerError: "
    )
    assert "failed with HTTP 500: Internal Server Error" in said  # 0.1.4: its worker's exception, unhandled
    assert "The server may have left that folder partial on its disk" in said
    assert not (ckpt / "global_step_2").exists() and (ckpt / "latest_ckpt_global_step.txt").read_text() == "1"
    # what the server left: the folder begun, without DeepSpeed's own pointer to a whole tag folder
    assert partial.is_dir() and not (partial / "latest").exists()
    assert (partial.parent / "latest").read_text() == "4"  # 0.1.4's pointer is written after a save only

    resumed, calls, _ = _run(
        deepspeed_server,
        model_dir,
        learnable_jsonl,
        tmp_path,
        *settings,
        "trainer.resume_mode=latest",
        log=CheckpointCalls,
    )
    assert calls.loads == [(str(partial.parent), 4)] and calls.saves == [(str(partial.parent), 8)]
    assert calls.calls.index("load_checkpoint") < calls.calls.index("forward_backward")
    assert sorted(logged_steps(resumed)) == [2]
    assert (ckpt / "latest_ckpt_global_step.txt").read_text() == "2"
    # the partial folder is whole now: DeepSpeed's pointer, the same files as step 1's checkpoint (none
    # left truncated by the refused writes), and other states (ZeRO-3 keeps the weights with the optimizer)
    files = {}
    for folder in (whole, partial):
        tag = folder / (folder / "latest").read_text().strip()
        files[folder] = {p.name: file_record(p) for p in tag.iterdir()}
    assert files[partial].keys() == files[whole].keys() and any(
        n.endswith("optim_states.pt") for n in files[whole]
    )
    assert all(record["bytes"] > 64 for record in files[partial].values())
    assert all(files[partial][n]["sha256"] != files[whole][n]["sha256"] for n in files[whole])
