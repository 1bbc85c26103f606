"""Installing the adapters into stock SkyRL 0.4.0 / verl 0.9.1 from wheels alone.

Wheels are built from the checkout (`uv build --all-packages`); everything else runs in a temporary
folder outside the workspace, with `uv run --isolated --no-project` and nothing of the repository
(no tests/, no uv.lock, no source tree on the path): the launcher lines are read from the README's
"Use it from your own SkyRL or verl checkout" section, so the README shows what CI runs. SkyRL runs
its own `main_base` with `trainer.override_entrypoint=adapter_skyrl.main`, verl its own
`verl.trainer.main_ppo`, each for one GRPO step on the reference backend.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PACKAGES = ("arctic_rl_core", "arctic_rl_losses", "arctic_rl_testbed", "adapter_skyrl", "adapter_verl")
TIMEOUT_S = 900
TINY_MODEL = {"num_layers": 1, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4}


def _uv() -> str:
    found = os.environ.get("ARCTIC_RL_TEST_UV") or shutil.which("uv")
    if not found:
        pytest.fail("uv not found: tests/run.sh exports ARCTIC_RL_TEST_UV; or put uv on PATH")
    return found


def _clean_env(wheels: Path) -> dict[str, str]:
    """The caller's environment minus everything that points into the workspace; Python 3.12
    (this interpreter's base) first on PATH for `--python 3.12`, and `uv` on PATH."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("VIRTUAL_ENV", "PYTHONPATH", "UV_PROJECT_ENVIRONMENT", "UV_PROJECT", "PYTHONHOME")
        and not key.startswith("PYTEST")
    }
    paths = [str(Path(_uv()).parent), str(Path(sys._base_executable).parent)]  # type: ignore[attr-defined]
    paths += [p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(str(REPO))]
    env["PATH"] = os.pathsep.join(paths)
    env["W"] = str(wheels)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def readme_launcher(name: str) -> str:
    """The bash block after `<!-- ci:NAME -->` in the README, continuation lines joined."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"<!-- ci:{re.escape(name)} -->\s*```bash\n(.*?)```", text, re.S)
    assert match, f"README has no launcher block <!-- ci:{name} -->"
    return match.group(1).replace("\\\n", " ").strip()


def with_requirements(launcher: str) -> list[str]:
    words = shlex.split(launcher.split(" -- ", 1)[0])
    return [words[i + 1] for i, word in enumerate(words) if word == "--with"]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [_uv(), "build", "--all-packages", "--wheel", "-o", str(out), "-q"], cwd=REPO, check=True, timeout=300
    )
    built = sorted(p.name for p in out.glob("*.whl"))
    assert [name.split("-")[0] for name in built] == sorted(PACKAGES), built
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, wheels) -> Path:
    """A folder outside the workspace holding only data the core wheel writes: the bundled BIRD
    sample preprocessed to parquet and the reference backend's tiny model (for verl's tokenizer)."""
    root = tmp_path_factory.mktemp("outside")
    assert REPO not in root.parents
    prefix = [_uv(), "run", "-q", "--isolated", "--no-project", "--python", "3.12"]
    for wheel in ("arctic_rl_core", "arctic_rl_losses", "arctic_rl_testbed"):
        prefix += [
            "--with",
            f"{wheels}/{wheel}-0.1.0-py3-none-any.whl" + ("[reference]" if "testbed" in wheel else ""),
        ]
    prefix.append("--")
    env = _clean_env(wheels)
    run = lambda *argv: subprocess.run([*prefix, *argv], cwd=root, env=env, check=True, timeout=TIMEOUT_S)  # noqa: E731
    run("arctic-rl", "bird", "sample", "--out", "bird")
    run("arctic-rl", "bird", "preprocess", "--bird-dir", "bird", "--out", "data")
    args = ", ".join(f"{k}={v}" for k, v in TINY_MODEL.items())
    run(
        "python",
        "-c",
        "from arctic_rl_testbed.reference.model import save_model_dir; "
        "from arctic_rl_core.config.reference_model import ReferenceModelConfig; "
        f"save_model_dir('model', ReferenceModelConfig({args}), seed=42)",
    )
    return root


def run_launcher(name: str, overrides: list[str], workdir: Path, wheels: Path, log: str) -> str:
    launcher = readme_launcher(name)
    assert launcher.count("<your overrides>") == 1, launcher
    command = launcher.replace("<your overrides>", " ".join(shlex.quote(o) for o in overrides))
    out = subprocess.run(
        ["bash", "-c", command],
        cwd=workdir,
        env=_clean_env(wheels),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    text = out.stdout + out.stderr
    (workdir / log).write_text(text, encoding="utf-8")
    assert out.returncode == 0, text[-6000:]
    assert str(REPO) not in text.replace(str(wheels), ""), "the run referenced the workspace"
    return text


# One micro-batch in the Arctic server's packed layout (two rows: prompt 2 + response 4, prompt 3 +
# response 3), the server-side loss and the import probe on it; prints what a test compares.
LOSS_SCRIPT = """
import json, sys
from importlib.metadata import distribution
import torch
import arctic_rl_losses
from arctic_rl_losses.server import import_probe, policy_loss
g = torch.Generator().manual_seed(0)
T = 12
batch = {"response_lens": torch.tensor([4, 3]), "sequence_offsets": torch.tensor([6, 12]),
         "response_mask": torch.ones(1, T), "advantages": torch.randn(1, T, generator=g),
         "old_log_probs": -torch.rand(1, T, generator=g)}
outputs = {"logprobs": (-torch.rand(1, T, generator=g, dtype=torch.float64)).requires_grad_()}
meta = {"actor_config": {"clip_ratio": 0.2}, "policy_loss_config": {"loss_mode": "dual_clip"}}
loss, metrics = policy_loss(outputs, batch, meta, {}, "cpu")
loss.backward()
print(json.dumps({
    "loss": loss.item(), "grad": outputs["logprobs"].grad.tolist(), "probe": import_probe(outputs, batch, meta, {}, "cpu")[1],
    "file": arctic_rl_losses.__file__, "requires": distribution("arctic-rl-losses").requires or [],
    "workspace": sorted(m for m in sys.modules if m.split(".")[0] in ("arctic_rl_core", "arctic_rl_testbed", "numpy")),
}))
"""


def test_the_losses_wheel_runs_the_server_loss_with_torch_alone(wheels, tmp_path):
    """What the Arctic server's environment installs: the losses wheel and torch, nothing else; the
    server loss there equals the workspace's on the same micro-batch, gradient included."""
    losses = f"{wheels}/arctic_rl_losses-0.1.0-py3-none-any.whl"
    argv = [_uv(), "run", "-q", "--isolated", "--no-project", "--python", "3.12", "--with", losses]
    argv += ["--with", "torch==2.11.0", "--", "python", "-c", LOSS_SCRIPT]
    out = subprocess.run(
        argv, cwd=tmp_path, env=_clean_env(wheels), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert out.returncode == 0, out.stderr[-3000:]
    wheel = json.loads(out.stdout.splitlines()[-1])
    here = subprocess.run([sys.executable, "-c", LOSS_SCRIPT], capture_output=True, text=True, check=True)
    workspace = json.loads(here.stdout.splitlines()[-1])
    assert str(REPO) not in wheel["file"] and str(REPO) in workspace["file"]
    assert wheel["requires"] == [] and wheel["workspace"] == []
    assert wheel["loss"] == workspace["loss"] and wheel["grad"] == workspace["grad"]
    assert any(g != 0.0 for row in wheel["grad"] for g in row)  # the loss reaches the log-probs
    assert wheel["probe"] == {
        "arctic_rl_core/import_probe": 1.0,
        "arctic_rl_core/version_major": 0.0,
        "arctic_rl_core/version_minor": 1.0,
    }


def test_base_dependencies_carry_no_exact_pins_and_the_extras_exist(wheels):
    for wheel in wheels.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            meta_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            meta = Parser().parsestr(archive.read(meta_name).decode())
        requires = meta.get_all("Requires-Dist") or []
        base = [r for r in requires if "extra ==" not in r]
        pinned = [r for r in base if "==" in r and not r.startswith("arctic-rl-")]
        assert pinned == [], f"{wheel.name}: exact pins in base dependencies: {pinned}"
        if wheel.name.startswith("adapter_"):
            assert any(r.startswith("arctic-rl-core") and "==0.1.0" in r for r in base), base
            extras = set(meta.get_all("Provides-Extra") or [])
            assert {"reference", "arctic", "cpu", "gpu"} <= extras, extras
            arctic = [r.split(";")[0].strip() for r in requires if "extra == 'arctic'" in r]
            assert {"vllm==0.26.0", "arctic-inference==0.3.0", "arctic-platform[rl]==0.1.4"} <= set(arctic)


@pytest.mark.parametrize("name", ["skyrl-wheels", "verl-wheels"])
def test_the_readme_launchers_pin_every_requirement(name):
    for requirement in with_requirements(readme_launcher(name)):
        assert "<" not in requirement and ">" not in requirement, requirement
        assert "==" in requirement or requirement.startswith("$W/"), requirement


SKYRL_OVERRIDES = [
    "data.train_data=['data/train.parquet']",
    "data.val_data=[]",
    "data.dataloader.num_workers=0",
    "trainer.placement.colocate_all=false",
    "generator.inference_engine.enable_ray_prometheus_stats=false",
    "trainer.enable_ray_gpu_monitor=false",
    "trainer.algorithm.advantage_estimator=grpo",
    "trainer.algorithm.policy_loss_type=dual_clip",
    "trainer.algorithm.use_entropy_loss=true",  # a gradient although a random model's rewards tie at 0
    "trainer.algorithm.entropy_loss_coef=0.01",
    "trainer.train_batch_size=2",
    "trainer.policy_mini_batch_size=2",
    "generator.n_samples_per_prompt=2",
    "trainer.micro_train_batch_size_per_gpu=4",
    "trainer.micro_forward_batch_size_per_gpu=4",
    "trainer.max_prompt_length=4000",
    "generator.sampling_params.max_generate_length=8",
    "trainer.epochs=1",
    "trainer.max_training_steps=1",
    "trainer.eval_interval=0",
    "trainer.eval_before_train=false",
    "trainer.logger=console",
    "trainer.ckpt_interval=1",
    "trainer.ckpt_path=skyrl_ckpt",
    "trainer.export_path=skyrl_export",
    "trainer.arctic_rl.backend.kind=reference",
    *(f"trainer.arctic_rl.backend.reference.{k}={v}" for k, v in TINY_MODEL.items()),
]


def _supports_dry_run(wheels: Path, package: str) -> bool:
    wheel = next(wheels.glob(f"{package}-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        return "--dry-run" in archive.read(f"{package}/main.py").decode()


def test_skyrl_main_base_dry_run_from_wheels(wheels, workdir):
    if not _supports_dry_run(wheels, "adapter_skyrl"):
        pytest.skip("adapter_skyrl.main has no --dry-run yet (issue 14, h14skyrl): only this step is skipped")
    run_launcher("skyrl-wheels", [*SKYRL_OVERRIDES, "--dry-run"], workdir, wheels, "skyrl_dry_run.log")
    assert not (workdir / "skyrl_ckpt").exists()  # a dry run trains nothing


def test_skyrl_main_base_one_grpo_step_from_wheels(wheels, workdir):
    log = run_launcher("skyrl-wheels", SKYRL_OVERRIDES, workdir, wheels, "skyrl.log")
    assert "Reached max_training_steps=1" in log, log[-3000:]
    assert re.search(r"'arctic/optimizer_steps': '?1", log), "no optimizer step reached the backend"
    assert (workdir / "skyrl_ckpt" / "latest_ckpt_global_step.txt").read_text().strip() == "1"


VERL_OVERRIDES = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=data/train.parquet",
    "data.val_files=data/dev.parquet",
    "data.train_batch_size=2",
    "data.max_prompt_length=1024",
    "data.max_response_length=8",
    "data.dataloader_num_workers=0",
    "actor_rollout_ref.model.path=model",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.actor.entropy_coeff=0.01",  # a gradient although the rewards tie at 0
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "reward.num_workers=1",
    "reward.custom_reward_function.path=pkg://arctic_rl_core.envs.bird.reward",
    "reward.custom_reward_function.name=compute_score",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.total_training_steps=1",
    "trainer.logger=[console]",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "trainer.default_local_dir=verl_ckpt",
    "ray_kwargs.ray_init.num_cpus=4",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    # verl's rollout TP defaults to 2; the adapter's default backend is the Arctic server on Ray
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "remote_backend.core.backend.kind=reference",
    *(f"+remote_backend.core.backend.reference.{k}={v}" for k, v in TINY_MODEL.items()),
]


def test_verl_main_ppo_one_grpo_step_from_wheels(wheels, workdir):
    log = run_launcher("verl-wheels", [*VERL_OVERRIDES], workdir, wheels, "verl.log")
    steps = [line for line in log.splitlines() if re.search(r"(^|\s)step:1 - ", line)]
    assert steps, log[-3000:]
    assert "arctic/weights_version:1" in steps[-1] and "arctic/optimizer_steps:1" in steps[-1], steps[-1][
        :3000
    ]
