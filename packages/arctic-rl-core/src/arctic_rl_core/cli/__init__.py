"""The `arctic-rl` command."""
