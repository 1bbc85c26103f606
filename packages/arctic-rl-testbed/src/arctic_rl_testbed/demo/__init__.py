"""`arctic-rl demo`: a real GRPO job on the bundled sample, on the CPU reference backend.

`options` (the settings, light), `launch` (which environment runs it, light), `tasks` (rows,
supervised targets and official scoring), `prompts` (chat template -> token ids), `warm_start`
(supervised cross-entropy through the backend's forward-backward), `evaluation` (greedy accuracy),
`run_log` (metrics JSONL, table, plot), `drivers` (the GRPO phase: each adapter's driver, found through
the `arctic_rl.demo_drivers` entry points) and
`run` (the driver's entry point, `python -m arctic_rl_testbed.demo.run`).
"""
