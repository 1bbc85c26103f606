#!/usr/bin/env bash
# verl + Arctic RL: GRPO on BIRD-SQL with Qwen3-32B on 4 nodes x 8 GPUs, all 32 colocated
# (four TP=8 vLLM engines, ZeRO-3 with optimizer offload): ZoRRo in training, Forest Cascade
# Attention + Arctic speculative decoding in sampling, CUDA IPC weight sync.
# Settings: bird-qwen3-32b-32gpu.overrides next to this file. verl (Hydra) overrides given after the
# script name are appended and win (a `+remote_backend.core.*` key the file sets: use `++`).
#
# First start a Ray cluster over the 4 nodes (docs/recipes.md, "Multi-node"), then run this on the head node
# from a clone of the repository; Ray runs every worker under the same `uv run` environment.
# Environment:
#   BIRD_DIR    BIRD root holding train/ and dev/ (required)
#   DATA_DIR    parquet files (default: $HOME/arctic-rl/data/bird)
#               BIRD_DIR and DATA_DIR too must be on a filesystem every node sees at the same path:
#               verl's trainer and reward workers are Ray actors placed on any node.
#   CKPT_DIR    checkpoints; must be on a filesystem every node sees at the same path
#               (default: $HOME/arctic-rl/ckpt/verl-bird-qwen3-32b-32gpu)
#   MODEL       policy model (default: Qwen/Qwen3-32B)
#   SPEC_MODEL  Arctic speculative-decoding draft model (default: Snowflake/Arctic-LSTM-Speculator-Qwen3-32B)
#   RAY_ADDRESS the running Ray cluster (default: auto)
#   RECIPE_DRY_RUN=1 prints the commands instead of running them.
set -euo pipefail
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$RECIPE_DIR/../.."
source recipes/_launcher.sh
source recipes/worker-env.sh colocated  # the Arctic server workers' environment (inherited)

: "${BIRD_DIR:?set BIRD_DIR to the BIRD root (holding train/ and dev/)}"
export DATA_DIR="${DATA_DIR:-$HOME/arctic-rl/data/bird}"
export CKPT_DIR="${CKPT_DIR:-$HOME/arctic-rl/ckpt/verl-bird-qwen3-32b-32gpu}"
export MODEL="${MODEL:-Qwen/Qwen3-32B}"
export SPEC_MODEL="${SPEC_MODEL:-Snowflake/Arctic-LSTM-Speculator-Qwen3-32B}"
export RAY_ADDRESS="${RAY_ADDRESS:-auto}"

# 1. Data: BIRD -> parquet (chat prompts with the database schema, gold SQL, absolute database paths).
recipe_bird_data

# 2. Train: verl's driver here and its trainer as a CPU Ray task (no GPU needed for either), the
#    Arctic server's jobs on the cluster's GPUs.
recipe_train verl "$RECIPE_DIR/bird-qwen3-32b-32gpu.overrides" "$@"
