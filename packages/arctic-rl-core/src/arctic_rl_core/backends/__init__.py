"""Backends: the one async protocol (`protocol`) and its implementations.

- `arctic`: the real arctic-platform client (GPU clusters, remote servers, Cortex).
- `reference`: a CPU PyTorch engine honouring the same contract (tests, laptops, demo).
"""
