"""The CPU reference engine: the Arctic server's contract on one process, with a tiny model."""
