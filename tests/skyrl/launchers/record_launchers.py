"""Re-record SkyRL's example launchers as data: `python tests/skyrl/launchers/record_launchers.py GIT_DIR`.

For each source (SkyRL's release tag and the default branch's HEAD, `SOURCES`) the example folders are
exported from the SkyRL git directory (`git archive`, nothing from the network) and every `.sh` in them
is either
- run with bash from the folder holding its `examples/`, as SkyRL's READMEs say (`bash
  examples/.../run_x.sh`), by `tests/shared/launcher_recorder.py` (stand-in `uv` / `python` ... that only
  write their argv down); the Python invocation that starts a trainer is kept as
  `["-m", "<module>", *overrides]` (or `["<script.py>", *args]`) in `recorded_commands.json` under
  `<source>/<path>`, with `$REPO` for that folder, `$HOME` for HOME and `$VAR` for a variable the script
  requires (`${VAR:?}`); or
- classified, without running it, as not a trainer launcher (`NOT_TRAINERS`: serving, Tinker, data
  preparation, cluster orchestration), written to `not_trainer_launchers.json` with the reason; a
  launcher whose entry point trains nothing (`NOT_TRAINER_ENTRY_POINTS`: generation-only evaluation)
  is written there too.

A script that is neither (no trainer invocation recorded and not classified) stops the recorder: a new
kind of launcher needs a decision. Entries of `recorded_commands.json` that are not `<source>/...`
(the legacy integration's launchers) are kept as they are. The scripts themselves are SkyRL's and are
not written anywhere in this repository.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from launcher_recorder import git_tree, record

HERE = Path(__file__).parent
RECORDED = HERE / "recorded_commands.json"
NOT_TRAINER_FILE = HERE / "not_trainer_launchers.json"

# source name -> (git ref, example folders at that ref). The release tag keeps its examples in the
# old skyrl-train tree (and a few in skyrl/examples); the default branch in examples/.
SOURCES = {
    "v0.4.0": ("skyrl_train-v0.4.0", ("skyrl-train/examples", "skyrl/examples")),
    "head": ("HEAD", ("examples",)),
}

# Scripts that start no trainer (path suffix -> (kind, reason)); not run.
NOT_TRAINERS = {
    "examples/serve/run_serve_qwen1.5b.sh": ("serving", "starts a vLLM inference server"),
    "examples/train/fully_async/sim_trainer/run_serve_qwen1.5b.sh": ("serving", "starts a vLLM inference server"),
    "examples/train/remote_inference_server/run_vllm_server.sh": ("serving", "starts a vLLM inference server"),
    "examples/remote_inference_engine/run_vllm_server.sh": ("serving", "starts a vLLM inference server"),
    "examples/remote_inference_engine/run_sglang_server.sh": ("serving", "starts an SGLang inference server"),
    "examples/train/delta_weight_sync/disagg/serve_qwen1p5b_s3.sh": ("serving", "starts a vLLM inference server"),
    "examples/tinker/ppo/run_tinker_server.sh": ("tinker", "starts SkyRL's Tinker API server"),
    "examples/tinker/session_based_routing/run_tinker_server.sh": ("tinker", "starts SkyRL's Tinker API server"),
    "examples/train/amd/run_tinker_server_amd.sh": ("tinker", "starts SkyRL's Tinker API server"),
    "examples/train/algorithms/dapo/prepare_dapo_data.sh": ("data preparation", "downloads the DAPO data sets"),
    "examples/algorithms/dapo/prepare_dapo_data.sh": ("data preparation", "downloads the DAPO data sets"),
    "examples/train/search/retriever/retrieval_launch.sh": ("serving", "starts the search example's retriever"),
    "examples/search/retriever/retrieval_launch.sh": ("serving", "starts the search example's retriever"),
    "examples/train/thunder_agent/scripts/r2egym_32b/cleanup_docker.sh": ("orchestration", "removes Docker containers"),
    "examples/train/thunder_agent/scripts/r2egym_32b/run_sbatch.sh": ("orchestration", "submits run_stages.sh to Slurm"),
    "examples/train/thunder_agent/scripts/r2egym_32b/run_stages.sh": (
        "orchestration", "starts Ray, the rollout servers and run_trainer.sh on Slurm nodes"),
    "examples/train/thunder_agent/scripts/r2egym_32b/setup_env.sh": ("orchestration", "builds the recipe's virtualenv"),
    "examples/train/thunder_agent/scripts/r2egym_32b/start_rollout_servers.sh": (
        "serving", "starts the external vLLM rollout servers"),
}  # fmt: skip

# Entry points that start no training run although a launcher starts them like a trainer (module name ->
# (kind, reason)): recorded with the scripts that start no trainer.
NOT_TRAINER_ENTRY_POINTS = {
    "main_generate": (
        "evaluation",
        "SkyRL's generation-only entry point: samples and scores, trains nothing",
    ),
    "main_harbor_generate": (
        "evaluation",
        "the Harbor example's generation-only entry point: trains nothing",
    ),
    "main_tbench_generate": (
        "evaluation",
        "the Terminal-Bench example's generation-only entry point: trains nothing",
    ),
}

# Variables a script checks by hand (not with `${VAR:?}`) before it starts the trainer: placeholders.
SCRIPT_ENV = {
    "examples/train/thunder_agent/scripts/r2egym_32b/run_trainer.sh": {
        "ROLLOUT_SERVER_URLS": "$ROLLOUT_SERVER_URLS"
    },
}

REQUIRED_VARIABLE = re.compile(r"line \d+: (\w+): ")


def trainer_invocation(argv: list[str]) -> list[str] | None:
    """`["-m", module, *args]` or `[script.py, *args]` of a recorded Python call that starts a trainer."""
    if "-m" in argv[:-1]:
        invocation = argv[argv.index("-m") :]
    elif argv and argv[0].endswith(".py"):
        invocation = argv
    else:
        return None
    return invocation if is_trainer(invocation) else None


def is_trainer(invocation: list[str]) -> bool:
    target = invocation[1] if invocation[0] == "-m" else invocation[0]
    name = target.rsplit(".", 1)[-1] if invocation[0] == "-m" else Path(target).stem
    return name.startswith("main") or "entrypoint" in target


def record_script(cwd: Path, home: Path, script: str) -> list[list[str]]:
    """Every trainer invocation `script` (relative to `cwd`) makes, run from `cwd` with HOME `home`
    (placeholders: `$REPO` for `cwd`, `$HOME`, `$VAR` for a required variable)."""
    env = {
        "HOME": str(home),
        "USER": "user",
        **next((v for k, v in SCRIPT_ENV.items() if script.endswith(k)), {}),
    }
    for _ in range(10):  # a variable the script requires (`${VAR:?...}`) gets the placeholder $VAR
        recording = record(cwd / script, cwd, env=env)
        required = REQUIRED_VARIABLE.search(recording.stderr_tail)
        if not required or required.group(1) in env:
            break
        env[required.group(1)] = f"${required.group(1)}"
    found = []
    for argv in recording.invocations:
        invocation = trainer_invocation(argv)
        if invocation:
            found.append(json.loads(json.dumps(invocation).replace(str(home), "$HOME")))
    return found


def record_source(git_dir: Path, source: str, work: Path) -> tuple[dict, dict]:
    ref, folders = SOURCES[source]
    root = work / source / "skyrl"
    home = work / source / "home"
    root.mkdir(parents=True)
    home.mkdir(parents=True)
    git_tree(git_dir, ref, list(folders), root)
    recorded, not_trainers = {}, {}
    scripts = sorted(str(p.relative_to(root)) for f in folders for p in (root / f).rglob("*.sh"))
    for script in scripts:
        name = f"{source}/{script}"
        # run from the folder holding `examples/` (the tag's skyrl-train/ or skyrl/; HEAD's root), as
        # the READMEs say (`bash examples/.../run_x.sh`); scripts call each other that way
        top, _, inner = script.rpartition("examples/")
        cwd = root / top if top else root
        classified = next((v for k, v in NOT_TRAINERS.items() if script.endswith(k)), None)
        if classified:
            not_trainers[name] = {"kind": classified[0], "why": classified[1]}
            continue
        invocations = record_script(cwd, home, f"examples/{inner}")
        module = invocations[0][1].rsplit(".", 1)[-1] if invocations and invocations[0][0] == "-m" else ""
        if module in NOT_TRAINER_ENTRY_POINTS:
            kind, why = NOT_TRAINER_ENTRY_POINTS[module]
            not_trainers[name] = {"kind": kind, "why": why, "entry_point": invocations[0][1]}
            continue
        if not invocations:
            raise SystemExit(f"{name}: no trainer invocation recorded and not classified in NOT_TRAINERS")
        for index, invocation in enumerate(invocations):
            recorded[name if index == 0 else f"{name}#{index + 1}"] = invocation
    return recorded, not_trainers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "git_dir", type=Path, help="SkyRL's git directory (e.g. /work/.mirror/NovaSky-AI+SkyRL/repo)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="skyrl-launchers-") as tmp:
        recorded, not_trainers, commits = {}, {}, {}
        for source, (ref, _) in SOURCES.items():
            commits[source] = subprocess.run(["git", "--git-dir", str(args.git_dir), "rev-parse", f"{ref}^{{commit}}"],
                                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
            got, skipped = record_source(args.git_dir, source, Path(tmp))
            recorded.update(got)
            not_trainers.update(skipped)
    kept = {k: v for k, v in json.loads(RECORDED.read_text()).items() if k.split("/", 1)[0] not in SOURCES}
    RECORDED.write_text(json.dumps({**kept, **recorded}, indent=1) + "\n", encoding="utf-8")
    NOT_TRAINER_FILE.write_text(json.dumps({"commits": commits, "launchers": not_trainers}, indent=1) + "\n",
                                encoding="utf-8")  # fmt: skip
    print(f"recorded {len(recorded)} trainer invocations, {len(not_trainers)} scripts that start no trainer")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
