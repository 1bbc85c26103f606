#!/usr/bin/env bash
# SkyRL + Arctic RL: BIRD-SQL smoke run, Qwen3-1.7B on one node with 8 GPUs, 10 steps: colocated
# GPUs, CUDA IPC weight sync, ZoRRo and Forest Cascade Attention at small scale.
# Settings: bird-smoke-qwen3-1.7b-8gpu.overrides next to this file. SkyRL overrides given after the
# script name are appended and win.
#
# Environment (all optional):
#   BIRD_DIR   BIRD root holding train/ and dev/; unset: the bundled 16-question sample
#              (`arctic-rl bird sample`), enough for this smoke run without the BIRD download
#   DATA_DIR   parquet files (default: $HOME/arctic-rl/data/bird, or .../bird-sample for the sample)
#   CKPT_DIR   checkpoints (default: $HOME/arctic-rl/ckpt/skyrl-bird-smoke-qwen3-1.7b-8gpu)
#   MODEL      policy model (default: Qwen/Qwen3-1.7B)
#   RECIPE_DRY_RUN=1 prints the commands instead of running them.
set -euo pipefail
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$RECIPE_DIR/../.."
source recipes/_launcher.sh
source recipes/worker-env.sh colocated  # the Arctic server workers' environment (inherited)

if [[ -z ${BIRD_DIR:-} ]]; then
  export BIRD_DIR="$HOME/arctic-rl/data/bird-sample-raw"
  export DATA_DIR="${DATA_DIR:-$HOME/arctic-rl/data/bird-sample}"
  if [[ ! -d $BIRD_DIR ]]; then
    recipe_run uv run --isolated --locked --package arctic-rl-core arctic-rl bird sample --out "$BIRD_DIR"
  fi
fi
export DATA_DIR="${DATA_DIR:-$HOME/arctic-rl/data/bird}"
export CKPT_DIR="${CKPT_DIR:-$HOME/arctic-rl/ckpt/skyrl-bird-smoke-qwen3-1.7b-8gpu}"
export MODEL="${MODEL:-Qwen/Qwen3-1.7B}"

# 1. Data: BIRD -> parquet (chat prompts with the database schema, gold SQL, absolute database paths).
recipe_bird_data

# 2. Train: SkyRL's loop in this process, the Arctic server's jobs on the GPUs.
recipe_train skyrl "$RECIPE_DIR/bird-smoke-qwen3-1.7b-8gpu.overrides" "$@"
