"""The testbed's `arctic-rl` subcommands (`serve`, `demo`, `bench`): each a module with
`register(subparsers)`, declared in the `arctic_rl.commands` entry-point group."""
