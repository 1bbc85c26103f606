#!/usr/bin/env bash
# SkyRL + Arctic RL: GSM8K sanity run, Qwen3-0.6B on one node with 4 GPUs (2 train, 2 sample).
# Settings: gsm8k-qwen3-0.6b-4gpu.overrides next to this file. SkyRL overrides given after the script
# name are appended and win (e.g. trainer.max_training_steps=20).
#
# Environment (all optional):
#   GSM8K_DIR  holds train.jsonl and test.jsonl in the openai/grade-school-math format; downloaded
#              from GitHub when missing (default: $HOME/arctic-rl/data/gsm8k-raw)
#   DATA_DIR   parquet files for SkyRL (default: $HOME/arctic-rl/data/skyrl-gsm8k)
#   CKPT_DIR   checkpoints (default: $HOME/arctic-rl/ckpt/skyrl-gsm8k-qwen3-0.6b-4gpu)
#   MODEL      policy model (default: Qwen/Qwen3-0.6B)
#   RECIPE_DRY_RUN=1 prints the commands instead of running them.
set -euo pipefail
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$RECIPE_DIR/../.."
source recipes/_launcher.sh
source recipes/worker-env.sh separate  # the Arctic server workers' environment (inherited)

export GSM8K_DIR="${GSM8K_DIR:-$HOME/arctic-rl/data/gsm8k-raw}"
export DATA_DIR="${DATA_DIR:-$HOME/arctic-rl/data/skyrl-gsm8k}"
export CKPT_DIR="${CKPT_DIR:-$HOME/arctic-rl/ckpt/skyrl-gsm8k-qwen3-0.6b-4gpu}"
export MODEL="${MODEL:-Qwen/Qwen3-0.6B}"

# 1. Data. The core has no GSM8K download command: fetch the official JSONL files, then write the
#    parquet rows with the core's GSM8K prompt and answer (arctic_rl_core.envs.gsm8k), with the
#    env_class of the adapter's GSM8K environment (gsm8k_arctic; SkyRL's own "gsm8k" scores differently).
GSM8K_URL=https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data
for split in train test; do
  if [[ ! -f $GSM8K_DIR/$split.jsonl ]]; then
    recipe_run mkdir -p "$GSM8K_DIR"
    recipe_run curl -fsSL -o "$GSM8K_DIR/$split.jsonl" "$GSM8K_URL/$split.jsonl"
  fi
  if [[ ! -f $DATA_DIR/$split.parquet ]]; then
    recipe_run uv run --isolated --locked --package arctic-rl-core python -c '
import json, sys
from arctic_rl_core.envs.gsm8k import GSM8KProblem, build_rows, write_parquet
source, out, split, env_class = sys.argv[1:]
with open(source, encoding="utf-8") as lines:
    entries = [json.loads(line) for line in lines if line.strip()]
problems = [GSM8KProblem(question=e["question"], solution=e["answer"]) for e in entries]
rows = [{**row, "env_class": env_class} for row in build_rows(problems, split)]
print(f"{write_parquet(rows, out)}: {len(rows)} problems")
' "$GSM8K_DIR/$split.jsonl" "$DATA_DIR/$split.parquet" "$split" gsm8k_arctic
  fi
done

# 2. Train: SkyRL's loop in this process, the Arctic server's jobs on the GPUs.
recipe_train skyrl "$RECIPE_DIR/gsm8k-qwen3-0.6b-4gpu.overrides" "$@"
