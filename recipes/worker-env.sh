# Environment for the Arctic server's GPU workers. Source it on EVERY node before `ray start`, and in
# the shell that launches a recipe:   source recipes/worker-env.sh colocated|separate
# arctic-platform 0.1.4 starts its DeepSpeed and vLLM workers as Ray actors with no runtime
# environment (`ray.init(address="auto")`), so they inherit what `ray start` was given. The recipes'
# launchers source it themselves (the in-process server and a Ray they start inherit it from them).
#   ARCTIC_INFERENCE_ENABLED=1            the plugin acts only with it; 0.1.4 sets it itself on its
#                                         colocated branch only (without it FCA and Arctic speculative
#                                         decoding silently fall back to plain vLLM)
#   TORCHINDUCTOR_FORCE_DISABLE_CACHES=1  a stale on-disk inductor graph from an earlier run (e.g. one with
#                                         a fused all-reduce) asserts at vLLM warm-up (legacy launchers)
#   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  separate training GPUs only: less fragmentation with
#                                         optimizer offload; colocated vLLM runs in sleep mode, whose
#                                         CuMemAllocator refuses expandable segments at start-up
# Not carried over from the legacy integration: VLLM_DISABLE_COMPILE_CACHE=1 (0.1.4 turns the cache back on with Arctic
# Inference), TORCH_COMPILE_DISABLE=1 (disables vLLM's compiled graphs), ARCTIC_WEIGHT_SYNC_STRICT_NAMES
# and ARCTIC_CUDA_IPC_LOW_MEM (0.1.4 reads neither; weight_sync.low_memory is the setting).
case "${1:-}" in
  colocated | separate) ;;
  *)
    echo "worker-env.sh: say how the run places its GPUs: source recipes/worker-env.sh colocated|separate" >&2
    return 2 2>/dev/null || exit 2
    ;;
esac
export ARCTIC_INFERENCE_ENABLED=1
export TORCHINDUCTOR_FORCE_DISABLE_CACHES=1
if [[ $1 == separate ]]; then
  export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
elif [[ ${PYTORCH_CUDA_ALLOC_CONF:-} == *expandable_segments:True* ]]; then
  echo "worker-env.sh: PYTORCH_CUDA_ALLOC_CONF=$PYTORCH_CUDA_ALLOC_CONF breaks colocated vLLM (sleep mode); unset" >&2
  unset PYTORCH_CUDA_ALLOC_CONF
fi
