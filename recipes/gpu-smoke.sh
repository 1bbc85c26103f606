#!/usr/bin/env bash
# The Arctic GPU path on ONE machine with one (or more) GPUs, in under 10 minutes once the GPU
# environment is installed: Qwen3-0.6B, one Arctic server launched locally by the real 0.1.4 client,
# colocated and then with separate training / sampling GPUs. recipes/gpu_smoke.py does the work and
# says what it checked (see its docstring): the server workers' environment (ARCTIC_INFERENCE_ENABLED,
# worker-env.sh), generate with Arctic Inference on, the lean-wire forward (old log-probs against the
# sampler's), forward-backward + step at PPO ratio 1, one weight sync and a generate after it,
# checkpoint with export_hf + save_total_limit, a timed-out call's error. Each phase prints its time.
# A third run, `ray`, is the separate placement over the in-process Ray transport (backend.kind=ray, the
# 0.1.4 Ray server on the Ray head this script starts), with a generate and the server's health issued
# while a long forward-backward runs (they must answer before it returns) and a blocking step timed out.
# Attention: sdpa with ZoRRo off (the GPU environment has no flash-attn unless `--extra flash`).
#
#   bash recipes/gpu-smoke.sh            # colocated, separate, ray
#   bash recipes/gpu-smoke.sh colocated  # or: separate, ray
#   RECIPE_DRY_RUN=1 bash recipes/gpu-smoke.sh   # print the commands, run nothing (no GPU needed)
# Environment:
#   MODEL          model id or local path (default Qwen/Qwen3-0.6B; must be in the HF cache offline)
#   SMOKE_PYTHON   python of an installed GPU environment (default: uv run --locked --package
#                  adapter-skyrl --extra gpu python, from uv.lock)
#   SMOKE_DIR      scratch directory (default /tmp/arctic-rl-gpu-smoke)
#   SMOKE_TIMEOUT  seconds per placement (default 420)
#   RAY_PORT       port of the Ray head this script starts (default 6390)
# With one GPU the "separate" placement still gets two GPU slots: Ray is started with --num-gpus=2 and
# RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1 so both jobs land on device 0; the weight sync is then
# skipped (NCCL refuses two ranks on one device) and says so. With two GPUs nothing is faked.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source recipes/_launcher.sh

placements=("${@:-colocated separate ray}")
read -r -a placements <<<"${placements[*]}"
for p in "${placements[@]}"; do
  [[ $p == colocated || $p == separate || $p == ray ]] || { echo "gpu-smoke: unknown run '$p' (colocated|separate|ray)" >&2; exit 2; }
done
export MODEL="${MODEL:-Qwen/Qwen3-0.6B}"
SMOKE_DIR="${SMOKE_DIR:-/tmp/arctic-rl-gpu-smoke}"
SMOKE_TIMEOUT="${SMOKE_TIMEOUT:-420}"
RAY_PORT="${RAY_PORT:-6390}"
if [[ -n ${SMOKE_PYTHON:-} ]]; then
  python=("$SMOKE_PYTHON")
  ray=("$(dirname "$SMOKE_PYTHON")/ray")
else
  python=(uv run --locked --package adapter-skyrl --extra gpu python)
  ray=(uv run --locked --package adapter-skyrl --extra gpu ray)
fi

if [[ ${RECIPE_DRY_RUN:-0} == 1 ]]; then
  gpus=1
else
  command -v nvidia-smi >/dev/null || { echo "gpu-smoke: nvidia-smi not found: this needs a GPU machine" >&2; exit 2; }
  gpus=$(nvidia-smi --list-gpus | wc -l)
  ((gpus >= 1)) || { echo "gpu-smoke: no GPU visible" >&2; exit 2; }
  mkdir -p "$SMOKE_DIR"
fi
echo "gpu-smoke: $gpus GPU(s), model $MODEL, placements ${placements[*]}, scratch $SMOKE_DIR"

ray_pid=""
stop_ray() {  # only the Ray head this script started (ray start --block exits with its daemons)
  if [[ -n $ray_pid ]]; then
    kill -INT "$ray_pid" 2>/dev/null || true
    sleep 2
    kill "$ray_pid" 2>/dev/null || true
    wait "$ray_pid" 2>/dev/null || true
    ray_pid=""
  fi
}
trap stop_ray EXIT

failed=0
for run in "${placements[@]}"; do
  (
    placement=$run
    extra=()
    if [[ $run == ray ]]; then  # the separate placement over the in-process Ray transport
      placement=separate
      extra+=(--transport ray)
    fi
    # what the server's workers inherit: exported before Ray starts, as on a cluster
    source recipes/worker-env.sh "$placement"
    ray_gpus=$gpus
    if [[ $placement == separate && $gpus -lt 2 ]]; then
      export RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1
      ray_gpus=2
      extra+=(--skip-sync)
    fi
    export RAY_ADDRESS="127.0.0.1:$RAY_PORT"
    if [[ ${RECIPE_DRY_RUN:-0} == 1 ]]; then
      recipe_run "${ray[@]}" start --head --block --port="$RAY_PORT" --num-gpus="$ray_gpus"
    else
      "${ray[@]}" start --head --block --port="$RAY_PORT" --num-gpus="$ray_gpus" \
        >"$SMOKE_DIR/ray-$run.log" 2>&1 &
      ray_pid=$!
      trap stop_ray EXIT
      for _ in $(seq 120); do
        "${ray[@]}" status --address="$RAY_ADDRESS" >/dev/null 2>&1 && break
        kill -0 "$ray_pid" 2>/dev/null || { echo "gpu-smoke: ray start failed: $SMOKE_DIR/ray-$run.log" >&2; exit 3; }
        sleep 1
      done
    fi
    recipe_run timeout "$SMOKE_TIMEOUT" "${python[@]}" recipes/gpu_smoke.py --placement "$placement" \
      --model "$MODEL" --workdir "$SMOKE_DIR/$run" --summary "$SMOKE_DIR/summary-$run.json" "${extra[@]}"
  ) || failed=$((failed + 1))
done
if [[ ${RECIPE_DRY_RUN:-0} == 1 ]]; then
  echo "gpu-smoke: dry run, nothing ran"
  exit 0
fi
if ((failed)); then
  echo "gpu-smoke: $failed run(s) failed: see the FAILED lines above and $SMOKE_DIR"
  exit 1
fi
echo "gpu-smoke: every run VERIFIED"
