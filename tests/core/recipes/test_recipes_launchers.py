"""The GPU recipe launchers under recipes/skyrl and recipes/verl, checked without a GPU: shape of
each script, the locked `uv run` environments they use (and what Ray's `uv run` hook makes of them
for worker processes), every file and module they reference, the override-file reader they share,
and their data-preparation steps run for real on the bundled samples."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from recipe_checks import dry_run

REPO = Path(__file__).resolve().parents[3]
FRAMEWORKS = ("skyrl", "verl")
LAUNCHERS = sorted(
    p for fw in FRAMEWORKS for p in (REPO / "recipes" / fw).glob("*.sh") if not p.name.startswith("_")
)
HELPERS = [REPO / "recipes" / "_launcher.sh"]
# Workspace packages by import name -> their source root (for pkg:// references).
SOURCES = {
    "arctic_rl_core": REPO / "packages" / "arctic-rl-core" / "src",
    "adapter_skyrl": REPO / "packages" / "adapter-skyrl" / "src",
    "adapter_verl": REPO / "packages" / "adapter-verl" / "src",
}
UV_CORE = ["uv", "run", "--isolated", "--locked", "--package", "arctic-rl-core"]


def framework(launcher: Path) -> str:
    return launcher.parent.name


def test_there_are_four_recipes_per_framework_with_matching_names():
    names = {fw: sorted(p.stem for p in LAUNCHERS if framework(p) == fw) for fw in FRAMEWORKS}
    assert names["skyrl"] == names["verl"] and len(names["skyrl"]) == 4, names


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda p: f"{framework(p)}/{p.stem}")
def test_launcher_shape(launcher: Path):
    text = launcher.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
    assert os.access(launcher, os.X_OK), f"{launcher} is not executable"
    # Runs from any working directory: resolves its own folder, then the repository root.
    assert 'RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"' in lines
    assert 'cd "$RECIPE_DIR/../.."' in lines
    assert REPO / "recipes" / framework(launcher) / ".." / ".." == launcher.parent / ".." / ".."


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda p: f"{framework(p)}/{p.stem}")
def test_launcher_references_only_files_that_exist(launcher: Path):
    text = launcher.read_text(encoding="utf-8")
    sourced = re.findall(r"^source (\S+)$", text, flags=re.M)
    assert sourced == ["recipes/_launcher.sh"]
    assert all((REPO / path).is_file() for path in sourced)
    from_recipe_dir = [name for name in re.findall(r"\$RECIPE_DIR/([\w.-]+)", text) if name != ".."]
    assert from_recipe_dir == [f"{launcher.stem}.overrides"], from_recipe_dir
    assert (launcher.parent / from_recipe_dir[0]).is_file()
    # Every other repository path it names.
    for path in re.findall(r"\b((?:recipes|packages|tests)/[\w./-]+)", text):
        assert (REPO / path).exists(), path


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_every_override_file_belongs_to_one_launcher(fw: str):
    files = sorted(p.stem for p in (REPO / "recipes" / fw).glob("*.overrides"))
    assert files == sorted(p.stem for p in LAUNCHERS if framework(p) == fw)


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda p: f"{framework(p)}/{p.stem}")
def test_override_files_reference_only_modules_and_groups_that_exist(launcher: Path):
    text = (launcher.parent / f"{launcher.stem}.overrides").read_text(encoding="utf-8")
    modules = re.findall(r"pkg://([\w.]+)", text)
    if framework(launcher) == "verl":
        assert "adapter_verl.hydra_config" in modules and "+remote_backend=arctic" in text.splitlines()
        group = SOURCES["adapter_verl"] / "adapter_verl" / "hydra_config" / "remote_backend" / "arctic.yaml"
        assert group.is_file()
    for module in modules:
        root = SOURCES[module.split(".")[0]] / module.replace(".", "/")
        assert root.with_suffix(".py").is_file() or (root / "__init__.py").is_file(), module
    # Placeholders are only the variables the launcher sets.
    exported = set(
        re.findall(r'^\s*export (\w+)="\$\{\1:-', launcher.read_text(encoding="utf-8"), flags=re.M)
    )
    settings = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    placeholders = set(re.findall(r"\$\{(\w+)\}", settings))
    assert {"DATA_DIR", "CKPT_DIR", "MODEL"} <= placeholders <= exported, (placeholders, exported)


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda p: f"{framework(p)}/{p.stem}")
def test_every_uv_run_is_isolated_locked_and_free_of_requirement_traps(
    launcher: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from ray._private.runtime_env import uv_runtime_env_hook

    fw = framework(launcher)
    text = launcher.read_text(encoding="utf-8")
    assert "--with" not in text and "pip install" not in text
    commands = dry_run(launcher, tmp_path)
    uv_runs = [c for c in commands if c[:2] == ["uv", "run"]]
    assert uv_runs and all(c[2:4] == ["--isolated", "--locked"] for c in uv_runs), uv_runs
    train = commands[-1]
    # flash-attn (`--extra flash`, compiled from its sdist) only where the recipe selects flash attention
    overrides = launcher.with_suffix(".overrides").read_text()
    flash = re.search(r"^[^#\n]*(attn_implementation=flash_attention_|flash_attn=true)", overrides, re.M)
    extras = ["--extra", "gpu", *(["--extra", "flash"] if flash else [])]
    assert flash is not None or "gsm8k" in launcher.stem  # the BIRD recipes run ZoRRo (flash attention)
    head = ["uv", "run", "--isolated", "--locked", "--package", f"adapter-{fw}", *extras, "python", "-m"]
    assert train[: len(head)] == head
    assert train[len(head)] == f"adapter_{fw}.main"
    for command in uv_runs[:-1]:
        assert command[:6] == UV_CORE, command  # data steps need only the light core

    # Ray's `uv run` hook joins the driver's uv options with spaces into the workers' shell command:
    # that string must mean the same options to a shell (no redirect or other shell syntax).
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(uv_runtime_env_hook, "_get_uv_run_cmdline", lambda: list(train))
    runtime_env = uv_runtime_env_hook.hook({})
    py_executable = runtime_env["py_executable"]
    assert not re.search(r"[<>|;&$`\\'\"()]", py_executable), py_executable
    tokens = shlex.split(py_executable)
    assert tokens[:8] == train[:8] and tokens[-1] == "python", tokens
    assert runtime_env["working_dir"] == str(REPO)
    assert py_executable.startswith("uv run --isolated --locked --package ")
    # ... which is why the launchers turn the hook off: every worker would install its own environment
    assert _launcher_env()["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] == "0"


def _launcher_env(**env: str) -> dict[str, str]:
    """The environment a launcher's commands run in (after `source recipes/_launcher.sh`)."""
    done = subprocess.run(
        ["bash", "-c", "source recipes/_launcher.sh && env"],
        cwd=REPO,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def test_launchers_keep_a_ray_uv_hook_setting_the_user_exported():
    assert _launcher_env(RAY_ENABLE_UV_RUN_RUNTIME_ENV="1")["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] == "1"


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda p: f"{framework(p)}/{p.stem}")
def test_multi_node_recipes_need_bird_and_a_ray_cluster(launcher: Path, tmp_path: Path):
    text = launcher.read_text(encoding="utf-8")
    multi_node = launcher.stem.endswith("32gpu")
    assert ('export RAY_ADDRESS="${RAY_ADDRESS:-auto}"' in text) is multi_node
    if not multi_node:
        return
    proc = subprocess.run(
        ["bash", str(launcher)],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "RECIPE_DRY_RUN": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "set BIRD_DIR to the BIRD root" in proc.stderr
    assert proc.stdout == ""  # nothing ran


# ----------------------------------------------------------------------------------------------
# The override-file reader (`recipe_overrides` in recipes/_launcher.sh)
# ----------------------------------------------------------------------------------------------


def read_overrides(helper: Path, file: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`recipe_overrides FILE` as a launcher calls it (inside `set -euo pipefail`)."""
    script = 'set -euo pipefail; source "$1"; out=$(recipe_overrides "$2"); printf "%s" "$out"'
    return subprocess.run(
        ["bash", "-c", script, "read", str(helper), str(file)],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("helper", HELPERS, ids=lambda p: p.name)
def test_reader_skips_comments_trims_and_substitutes_without_evaluating(helper: Path, tmp_path: Path):
    marker = tmp_path / "evaluated"
    file = tmp_path / "x.overrides"
    file.write_text(
        "# a comment line\n"
        "\n"
        "   trainer.a=${DATA_DIR}/train.parquet   \n"
        "data.files=['${DATA_DIR}/a', '${MODEL}']\n"
        f"literal=$(touch {marker}) and $HOME and ${{VALUE}}\n"
        "last=no-newline-at-end",
        encoding="utf-8",
    )
    proc = read_overrides(helper, file, DATA_DIR="/d d", MODEL="Q/M", VALUE="${DATA_DIR}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n") == [
        "trainer.a=/d d/train.parquet",
        "data.files=['/d d/a', 'Q/M']",
        f"literal=$(touch {marker}) and $HOME and ${{DATA_DIR}}",  # values are not expanded again
        "last=no-newline-at-end",
    ]
    assert not marker.exists()


@pytest.mark.parametrize("helper", HELPERS, ids=lambda p: p.name)
def test_reader_fails_on_an_unset_variable_or_a_missing_file(helper: Path, tmp_path: Path):
    file = tmp_path / "x.overrides"
    file.write_text("a=${CKPT_DIR}/x\n", encoding="utf-8")
    proc = read_overrides(helper, file)
    assert proc.returncode != 0 and "uses ${CKPT_DIR}, which is not set" in proc.stderr
    file.write_text("a=${1x}\n", encoding="utf-8")
    proc = read_overrides(helper, file)
    assert proc.returncode != 0 and "must start ${NAME}" in proc.stderr
    proc = read_overrides(helper, tmp_path / "missing.overrides")
    assert proc.returncode != 0 and "not found" in proc.stderr


# ----------------------------------------------------------------------------------------------
# Data preparation, run for real (the uv prefix replaced by this environment's interpreter)
# ----------------------------------------------------------------------------------------------


def run_data_steps(commands: list[list[str]], cwd: Path) -> None:
    for command in commands[:-1]:
        assert command[:6] == UV_CORE, command
        step = command[6:]
        if step[0] == "arctic-rl":
            argv = [sys.executable, "-m", "arctic_rl_core.cli.main", *step[1:]]
        else:
            assert step[:2] == ["python", "-c"], step
            argv = [sys.executable, *step[1:]]
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_bird_smoke_data_step_builds_parquet_from_the_bundled_sample(fw: str, tmp_path: Path):
    import pyarrow.parquet as pq

    launcher = REPO / "recipes" / fw / "bird-smoke-qwen3-1.7b-8gpu.sh"
    commands = dry_run(launcher, tmp_path, BIRD_DIR="")  # no BIRD: the bundled sample
    assert [c[6:9] for c in commands[:2]] == [
        ["arctic-rl", "bird", "sample"],
        ["arctic-rl", "bird", "preprocess"],
    ]
    run_data_steps(commands, cwd=REPO)
    data_dir = tmp_path / "home" / "arctic-rl" / "data" / "bird-sample"
    train = pq.read_table(data_dir / "train.parquet").to_pylist()
    dev = pq.read_table(data_dir / "dev.parquet").to_pylist()
    assert (len(train), len(dev)) == (16, 10)  # the smoke run's 8-prompt batches: 2 steps per epoch
    assert {row["env_class"] for row in train} == {"bird"} and {row["data_source"] for row in train} == {
        "bird"
    }
    assert all(Path(row["extra_info"]["db_path"]).is_file() for row in train + dev)


@pytest.mark.parametrize(("fw", "env_class"), [("skyrl", "gsm8k_arctic"), ("verl", "gsm8k")])
def test_gsm8k_data_step_writes_core_rows_for_the_framework(fw: str, env_class: str, tmp_path: Path):
    import pyarrow.parquet as pq
    from arctic_rl_core.envs.gsm8k import SAMPLE_PATH, compute_score, sample_problems

    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "test"):  # present: the launcher skips the download
        (raw / f"{split}.jsonl").write_text(SAMPLE_PATH.read_text(encoding="utf-8"), encoding="utf-8")
    launcher = REPO / "recipes" / fw / "gsm8k-qwen3-0.6b-4gpu.sh"
    commands = dry_run(launcher, tmp_path, GSM8K_DIR=str(raw), DATA_DIR=str(tmp_path / "data"))
    assert not any(c[0] == "curl" for c in commands)
    assert len(commands) == 3
    run_data_steps(commands, cwd=REPO)
    rows = pq.read_table(tmp_path / "data" / "train.parquet").to_pylist()
    problems = sample_problems()
    assert len(rows) == len(problems) == 12
    assert {row["env_class"] for row in rows} == {env_class}
    assert [row["reward_model"]["ground_truth"] for row in rows] == [p.final_answer for p in problems]
    # The written prompt and gold answer score as the framework's reward will score them.
    assert (
        compute_score(rows[0]["data_source"], problems[0].solution, rows[0]["reward_model"]["ground_truth"])[
            "score"
        ]
        == 1.0
    )
    assert pq.read_table(tmp_path / "data" / "test.parquet").num_rows == 12


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_gsm8k_data_step_downloads_the_official_files_when_missing(fw: str, tmp_path: Path):
    launcher = REPO / "recipes" / fw / "gsm8k-qwen3-0.6b-4gpu.sh"
    commands = dry_run(launcher, tmp_path)
    base = "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data"
    raw = tmp_path / "home" / "arctic-rl" / "data" / "gsm8k-raw"
    curls = [c for c in commands if c[0] == "curl"]
    assert curls == [
        ["curl", "-fsSL", "-o", str(raw / f"{split}.jsonl"), f"{base}/{split}.jsonl"]
        for split in ("train", "test")
    ]


def _worker_env(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    script = 'source recipes/worker-env.sh "$@" && env'
    base = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    return subprocess.run(
        ["bash", "-c", script, "worker-env", *args],
        cwd=REPO,
        env=base | (env or {}),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_worker_env_exports_what_the_server_workers_need_for_the_placement():
    def exported(done: subprocess.CompletedProcess) -> dict[str, str]:
        assert done.returncode == 0, done.stderr
        return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)

    colocated = exported(_worker_env("colocated"))
    assert colocated["ARCTIC_INFERENCE_ENABLED"] == "1"
    assert colocated["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] == "1"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in colocated  # vLLM sleep mode refuses expandable segments
    assert exported(_worker_env("separate"))["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    inherited = _worker_env("colocated", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert (
        "PYTORCH_CUDA_ALLOC_CONF" not in exported(inherited) and "breaks colocated vLLM" in inherited.stderr
    )
    missing = _worker_env()
    assert missing.returncode == 2 and "colocated|separate" in missing.stderr


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_launcher_sources_the_worker_env_of_its_placement(launcher: Path):
    text = launcher.read_text()
    overrides = launcher.with_suffix(".overrides").read_text()
    # SkyRL's own field is trainer.placement.colocate_all; verl's is its hybrid engine
    colocated = (
        re.search(r"(placement\.colocate_all|actor_rollout_ref\.hybrid_engine)=true", overrides) is not None
    )
    expected = "colocated" if colocated else "separate"
    assert f"source recipes/worker-env.sh {expected} " in text
