"""Re-record `recorded.json`: the Hydra overrides each GRPO-family example launcher of verl passes
(expanded by its own bash, `tests/shared/launcher_recorder.py`), from the commits named below.

    python tests/verl/launchers/record.py [--verl-git DIR] [--recipe-git DIR]

verl 0.9.1's wheel and sdist ship no `examples/`, and no commit of the verl repository carries
version 0.9.1; the launchers come from the commit closest to the 0.9.1 sdist: verl-project/verl main at
1dda039 (2026-08-22, `verl/version/version` 0.10.0.dev; 324 of the sdist's 418 .py/.yaml files under
verl/ are byte-identical there, 288 at the release/v0.9.0 branch's head; its `ppo_trainer` config
differs from 0.9.1's by a handful of leaves: `router_replay` in place of 0.9.1's
`use_no_sync_for_gradient_accumulation` / `checkpoint_callback_class` / `rollout.router_config_path`),
and the DAPO recipe from the verl-recipe commit that verl commit pins as its `recipe` submodule.
Nothing of the scripts is stored: only the overrides, with `$HOME` / `$REPO` for the paths."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "shared"))

from launcher_recorder import HOME, git_tree, record  # noqa: E402


@dataclass(frozen=True)
class Source:
    name: str
    repo: str  # owner/name on GitHub
    commit: str
    git_dir: str  # default mirror of it
    folders: tuple[str, ...]  # what the recorder checks out
    globs: tuple[str, ...]  # the launchers among them


# Every GRPO-family trainer of verl's examples (critic-free advantage estimators and the GRPO loop's
# loss variants: GRPO, CISPO, DPPO, GDPO, GMPO, GPG, GSPO, OTB, prefix grouper, REINFORCE++, ReMax,
# RLOO, rollout correction, router replay, SAPO, MTP, LoRA / scaling tuning, profiling; the Ascend
# extras), verl's PPO examples (a critic: refused), and the asynchronous entry points that ship with
# verl (fully async, one step off policy) and the DAPO recipe.
EXAMPLE_DIRS = (
    "grpo_trainer",
    "cispo_trainer",
    "dppo_trainer",
    "gdpo_trainer",
    "gmpo_trainer",
    "gpg_trainer",
    "gspo_trainer",
    "otb_trainer",
    "prefix_grouper",
    "reinforce_plus_plus_trainer",
    "remax_trainer",
    "rloo_trainer",
    "rollout_correction",
    "router_replay",
    "sapo_trainer",
    "mtp_trainer",
    "ppo_trainer",
    "profile",
)
SOURCES = (
    Source(
        name="verl",
        repo="verl-project/verl",
        commit="1dda039b9c6311889a9c9a26040677e1254814f9",
        git_dir="/work/.mirror/verl-project+verl/repo",
        folders=("examples", "verl/experimental/fully_async_policy", "verl/experimental/one_step_off_policy"),
        globs=(
            *(f"examples/{d}/*.sh" for d in EXAMPLE_DIRS),
            "examples/tuning/*/*.sh",
            "examples/ascend_extras/*/*.sh",
            "verl/experimental/fully_async_policy/shell/*.sh",
            "verl/experimental/one_step_off_policy/shell/*.sh",
        ),
    ),
    Source(
        name="verl-recipe",
        repo="verl-project/verl-recipe",
        commit="e7f889574b8301cc0f0fc1d57c6d67f31ffeb689",
        git_dir="/work/.mirror/verl-project+verl-recipe/repo",
        folders=("dapo",),
        globs=("dapo/run_*.sh", "dapo/test_*.sh", "dapo/dapo_transfer_queue/*.sh"),
    ),
)

# the training entry points a launcher may call (the recording keeps the last call of one of them)
ENTRY_PREFIXES = ("verl.", "recipe.")

# What a launcher demands from its user before it runs (it stops, or bash's `set -u` does, without
# them): given as a user would, with paths under the recorder's $HOME.
LAUNCHER_ENV: dict[str, dict[str, str]] = {
    "verl:examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh": {
        "HDFS_ROOT": f"{HOME}/hdfs",
        "DATA_ROOT": f"{HOME}/data",
    },
    "verl:examples/grpo_trainer/run_deepseek_v4_veomni.sh": {
        "HDFS_ROOT": f"{HOME}/hdfs",
        "DATA_ROOT": f"{HOME}/data",
    },
    "verl:examples/grpo_trainer/run_kimi_k2_6_glm5_1_megatron_lite.sh": {
        "MODEL_PATH": f"{HOME}/models/Kimi-K2.6"
    },
    "verl:examples/grpo_trainer/run_nemotron_nano_v3_30b_a3b_megatron.sh": {"RAY_DATA_HOME": f"{HOME}/verl"},
    "verl:examples/grpo_trainer/run_qwen3_vl_30b_a3b_fsdp.sh": {"INFER_BACKEND": "vllm"},
    "verl:examples/tuning/lora/run_qwen3_8b_from_adapter_fsdp.sh": {
        "LORA_ADAPTER_PATH": f"{HOME}/lora_adapter"
    },
    "verl-recipe:dapo/test_dapo_qwen3next_80b_megatron.sh": {"RAY_DATA_HOME": f"{HOME}/verl"},
    # the script reads ${True} (a bug under its set -u): what a user would set to run it at all
    "verl:verl/experimental/fully_async_policy/shell/run_qwen35_35b_a3b_math_dynamic_megatron.sh": {
        "True": "True"
    },
}
# Scripts that launch nothing (they print where the example moved and exit 1).
NOT_LAUNCHERS = {"verl:examples/grpo_trainer/run_deepseek_v4_megatron_lite.sh"}


def record_source(source: Source, git_dir: str) -> dict[str, dict]:
    found: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix=f"record-{source.name}-") as scratch:
        root = git_tree(Path(git_dir), source.commit, list(source.folders), Path(scratch))
        scripts = sorted({p for g in source.globs for p in root.glob(g)})
        for script in scripts:
            key = f"{source.name}:{script.relative_to(root)}"
            if key in NOT_LAUNCHERS:
                continue
            env = LAUNCHER_ENV.get(key, {})
            recording = record(script, root, env=env)
            entries = [(m, a) for m, a in recording.module_calls() if m.startswith(ENTRY_PREFIXES)]
            item: dict = {"env": env} if env else {}
            if entries:
                item["entry"], item["overrides"] = entries[-1]
            else:
                item["entry"] = None
                item["exit"] = recording.returncode
                item["stderr_tail"] = recording.stderr_tail[-400:]
            found[key] = item
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--verl-git", default=SOURCES[0].git_dir)
    parser.add_argument("--recipe-git", default=SOURCES[1].git_dir)
    parser.add_argument("--out", default=str(HERE / "recorded.json"))
    args = parser.parse_args()
    git_dirs = {"verl": args.verl_git, "verl-recipe": args.recipe_git}
    launchers: dict[str, dict] = {}
    for source in SOURCES:
        launchers.update(record_source(source, git_dirs[source.name]))
    document = {
        "sources": {s.name: {"repo": s.repo, "commit": s.commit} for s in SOURCES},
        "recorded_by": "tests/verl/launchers/record.py",
        "launchers": launchers,
    }
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    print(f"{len(launchers)} launchers -> {args.out}")


if __name__ == "__main__":
    main()
