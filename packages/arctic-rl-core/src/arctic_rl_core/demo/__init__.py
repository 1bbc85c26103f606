"""`arctic-rl demo`: a real GRPO job on the bundled sample, on the CPU reference backend.

`options` (the settings, light), `launch` (which environment runs it, light), `tasks` (prompts,
supervised targets and held-out scoring), `warm_start` (supervised cross-entropy through the
backend's forward-backward), `evaluation` (held-out accuracy), `run_log` (metrics JSONL, table,
plot), `skyrl_driver` (GRPO through SkyRL's real trainer) and `run` (the driver's entry point).
"""
