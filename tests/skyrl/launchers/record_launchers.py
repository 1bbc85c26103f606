"""Re-record SkyRL's example launchers as data: `python tests/skyrl/launchers/record_launchers.py GIT_DIR`.

For each source (SkyRL's release tag and the default branch's HEAD, `SOURCES`) the example folders are
exported from the SkyRL git directory (`git archive`, nothing from the network) and every `.sh` in them
is either
- run with bash from the export's root, as its README says (`bash examples/.../run_x.sh`), with stand-in
  `uv`, `python`, `python3`, `torchrun` ... on PATH that only write down their argv; the Python
  invocation that starts a trainer (`-m <module> <overrides>`) is kept as
  `["-m", "<module>", *overrides]` in `recorded_commands.json` under `<source>/<path>`, with the export's
  root written `@SKYRL@` and HOME `@HOME@`; or
- classified, without running it, as not a trainer launcher (`NOT_TRAINERS`: serving, tinker, data
  preparation, cluster orchestration), written to `not_trainer_launchers.json` with the reason.

A script that is neither (no trainer invocation recorded and not classified) stops the recorder: a new
kind of launcher needs a decision. Entries of `recorded_commands.json` that are not `<source>/...`
(the seed integration's launchers) are kept as they are. The scripts themselves are SkyRL's and are
not written anywhere in this repository.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

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

# Variables a script checks by hand (not with `${VAR:?}`) before it starts the trainer: placeholders.
SCRIPT_ENV = {
    "examples/train/thunder_agent/scripts/r2egym_32b/run_trainer.sh": {
        "ROLLOUT_SERVER_URLS": "@ROLLOUT_SERVER_URLS@"
    },
}

# Commands the launchers may call; each stand-in appends {"cmd", "argv"} to $RECORD_FILE and exits 0.
STAND_INS = ("uv", "python", "python3", "torchrun", "ray", "sbatch", "srun", "vllm", "modal", "docker",
             "nvidia-smi", "hf", "huggingface-cli", "wget", "curl", "git", "pip", "sleep", "ssh")  # fmt: skip
STAND_IN = """#!{python}
import json, os, sys
with open(os.environ["RECORD_FILE"], "a", encoding="utf-8") as out:
    out.write(json.dumps({{"cmd": os.path.basename(sys.argv[0]), "argv": sys.argv[1:]}}) + "\\n")
"""
REQUIRED_VARIABLE = re.compile(r"line \d+: (\w+): ")
FIXED_DATE = "#!/bin/sh\necho 20260101_000000\n"  # `date` stand-in: run names that embed it stay the same
# uv options that take a value (the rest of `uv run`'s options are flags).
UV_VALUE_OPTIONS = {"--extra", "--with", "--env-file", "--directory", "--project", "--python", "--group",
                    "--index", "--package", "--with-requirements", "-p"}  # fmt: skip


def python_invocation(cmd: str, argv: list[str]) -> list[str] | None:
    """`["-m", module, *args]` or `[script.py, *args]` of a recorded call, or None if it runs no Python."""
    if cmd == "uv":
        if not argv or argv[0] != "run":
            return None
        rest = argv[1:]
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            option = rest.pop(0)
            if option in UV_VALUE_OPTIONS and "=" not in option:
                rest.pop(0)
        if rest and rest[0] in ("python", "python3"):
            rest = rest[1:]
    elif cmd in ("python", "python3", "torchrun"):
        rest = [a for a in argv if not (cmd == "torchrun" and a.startswith("--nproc"))]
    else:
        return None
    if rest[:1] == ["-m"] and len(rest) >= 2:
        return rest
    if rest and rest[0].endswith(".py"):
        return rest
    return None


def is_trainer(invocation: list[str]) -> bool:
    target = invocation[1] if invocation[0] == "-m" else invocation[0]
    name = target.rsplit(".", 1)[-1] if invocation[0] == "-m" else Path(target).stem
    return name.startswith("main") or "entrypoint" in target


def record_script(root: Path, cwd: Path, home: Path, script: str, bin_dir: Path) -> list[list[str]]:
    """Every trainer invocation `script` (relative to `cwd`, inside the export `root`) makes, run from
    `cwd` (placeholders applied)."""
    log = home / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home), "USER": "user", "RECORD_FILE": str(log),
           "LANG": "C.UTF-8", **next((v for k, v in SCRIPT_ENV.items() if script.endswith(k)), {})}  # fmt: skip
    for _ in range(10):  # a variable the script requires (`${VAR:?...}`) gets the placeholder @VAR@
        log.unlink(missing_ok=True)
        run = subprocess.run(["bash", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
                             check=False)  # fmt: skip
        required = REQUIRED_VARIABLE.search(run.stderr)
        if not required or required.group(1) in env:
            break
        env[required.group(1)] = f"@{required.group(1)}@"
    found = []
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            call = json.loads(line)
            invocation = python_invocation(call["cmd"], call["argv"])
            if invocation and is_trainer(invocation):
                text = json.dumps(invocation).replace(str(root), "@SKYRL@").replace(str(home), "@HOME@")
                found.append(json.loads(text))
    return found


def record_source(git_dir: Path, source: str, work: Path, bin_dir: Path) -> tuple[dict, dict]:
    ref, folders = SOURCES[source]
    root = work / source / "skyrl"
    home = work / source / "home"
    root.mkdir(parents=True)
    home.mkdir(parents=True)
    archive = work / f"{source}.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "--git-dir", str(git_dir), "archive", ref, *folders], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
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
        invocations = record_script(root, cwd, home, f"examples/{inner}", bin_dir)
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
        work = Path(tmp)
        bin_dir = work / "bin"
        bin_dir.mkdir()
        for name in STAND_INS:
            path = bin_dir / name
            path.write_text(STAND_IN.format(python=sys.executable), encoding="utf-8")
            path.chmod(0o755)
        (bin_dir / "date").write_text(FIXED_DATE, encoding="utf-8")
        (bin_dir / "date").chmod(0o755)
        recorded, not_trainers = {}, {}
        commits = {}
        for source in SOURCES:
            ref = SOURCES[source][0]
            commits[source] = subprocess.run(["git", "--git-dir", str(args.git_dir), "rev-parse", f"{ref}^{{commit}}"],
                                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
            got, skipped = record_source(args.git_dir, source, work, bin_dir)
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
