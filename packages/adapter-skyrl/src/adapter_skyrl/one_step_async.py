"""SkyRL's one-step off-policy example on the Arctic path: `python -m adapter_skyrl.one_step_async
[--dry-run] <overrides>`, the entry point to switch `examples/train/async/main_async.py` to.

SkyRL's example (`AsyncRayPPOTrainer`, not part of the installed package) generates batch k+1 while it
trains on batch k, each batch sampled with the weights of one step before. The adapter has no
counterpart of that overlap: this entry point runs SkyRL's synchronous trainer on the Arctic path
(each step's rollouts sampled with the weights of the sync before it, generation and training taking
turns) and says so at dry run and at startup. For generation that overlaps training, SkyRL's fully
asynchronous trainer (`trainer.fully_async.enabled=true`) runs on the Arctic path.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from adapter_skyrl.main import run_main

SYNCHRONOUS = (
    "SkyRL's one-step off-policy example (examples/train/async, AsyncRayPPOTrainer) runs synchronously here: "
    "generation and training take turns, every rollout sampled with the last sync's weights (no overlap); "
    "for overlap run SkyRL's fully asynchronous trainer (trainer.fully_async.enabled=true)"
)
USAGE = f"""\
usage: python -m adapter_skyrl.one_step_async [--dry-run] [--help] <SkyRL overrides> [trainer.arctic_rl.<group>.<knob>=...]

The entry point to switch SkyRL's one-step off-policy example (examples/train/async/main_async.py) to.
{SYNCHRONOUS}.

  --dry-run   print the resolved core config and the settings table; start nothing. Exit 0, or 2
              listing every problem.
  --help      this text.
"""


def main(argv: Sequence[str] | None = None) -> None:
    run_main(list(sys.argv[1:] if argv is None else argv), usage=USAGE, notices=[SYNCHRONOUS])


if __name__ == "__main__":
    from adapter_skyrl.main import cli

    cli(main)
