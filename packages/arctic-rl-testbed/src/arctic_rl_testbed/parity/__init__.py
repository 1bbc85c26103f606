"""Cross-framework parity: the canonical inputs both frameworks are checked on, and the trace diff.

- `loss_cases`: seeded random policy-loss inputs (response-aligned `[B, R]` rows) shared by the
  math-parity tests in the SkyRL and verl environments.
- `scenario`: the canonical scenario (BIRD slice, seeds, settings) and its rendering as SkyRL
  overrides and verl Hydra overrides.
- `trace_diff`: load two payload traces and report the first difference (call, field, index, values).
"""
