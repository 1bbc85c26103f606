"""Asynchronous GRPO with bounded staleness (`async.max_staleness` k), framework-neutral.

- `staleness`: the version arithmetic and the gate that keeps any rollout older than k off the trainer
  (drop or regenerate, by `async.stale_policy`);
- `is_weights`: truncated importance-sampling weights from rollout vs old log-probs, sent as
  `rollout_is_weights` (the server losses multiply each token's policy loss by them);
- `metrics`: the per-step `async/*` statistics;
- `pipeline`: the overlapped loop (generation of batch i+1.. with the sampler's weights while batch i
  trains) for drivers that own their loop;
- `token_task`: a framework-free GRPO step on a synthetic token task over any `Backend`, for the
  benchmark and the tests.

A rollout's weights version is `GenerateOutput.weights_version` of the generate call that sampled it; a
rollout of version v may be trained at trainer version s (optimizer steps taken before the step) only if
s - v <= k. k = 0 is the synchronous path.
"""
