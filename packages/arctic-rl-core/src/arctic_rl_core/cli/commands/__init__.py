"""Subcommands of `arctic-rl`: one module each, each defining `register(subparsers)`."""
