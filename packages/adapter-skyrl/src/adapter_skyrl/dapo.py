"""SkyRL's DAPO examples on the Arctic path: `python -m adapter_skyrl.dapo [--dry-run] <overrides>`.

SkyRL 0.4.0's DAPO entry points (`examples/train/algorithms/dapo/main_dapo.py` and
`main_dapo_fully_async.py`, not part of the installed package) extend SkyRL in their own file: a
config class whose algorithm group has two more fields, `trainer.algorithm.overlong_buffer_len`
(default 512) and `trainer.algorithm.overlong_buffer_penalty_factor` (default 1.0), and a trainer
subclass that applies DAPO's soft overlong punishment to the rewards before SkyRL's advantages
(`postprocess_generator_output`). This module is the adapter's counterpart of both: the same two
fields with the same defaults on the adapter's config (`ArcticDAPOConfig`), and the punishment
(`arctic_rl_core.overlong`) on the adapter's synchronous trainer or, with
`trainer.fully_async.enabled=true`, on its fully asynchronous one. Everything else DAPO's launchers
set is SkyRL's own config (clip-higher `eps_clip_high`, `generator.apply_overlong_filtering`, the
loss reduction, the off-policy correction) and goes through the field table as in any run.
"""

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arctic_rl_core.overlong import punish_overlong
from skyrl.train.config import AlgorithmConfig, make_config

from adapter_skyrl.config import ArcticTrainerConfig, parse_cli_with_notices
from adapter_skyrl.experiment import ArcticPPOExp
from adapter_skyrl.fully_async import ArcticFullyAsyncPPOTrainer
from adapter_skyrl.main import run_main
from adapter_skyrl.trainer import ArcticPPOTrainer

USAGE = """\
usage: python -m adapter_skyrl.dapo [--dry-run] [--help] <SkyRL overrides> [trainer.arctic_rl.<group>.<knob>=...]

SkyRL's DAPO examples (examples/train/algorithms/dapo/main_dapo.py, main_dapo_fully_async.py) on the
Arctic RL stack: adapter_skyrl.main plus the DAPO config fields trainer.algorithm.overlong_buffer_len
(default 512) and trainer.algorithm.overlong_buffer_penalty_factor (default 1.0), and DAPO's soft
overlong punishment of the rewards. trainer.fully_async.enabled=true runs SkyRL's fully async trainer.

  --dry-run   print the resolved core config and the settings table; start nothing. Exit 0, or 2
              listing every problem.
  --help      this text.
"""


# No `from __future__ import annotations` in this module: SkyRL's config builder reads real field types.
@dataclass
class DAPOAlgorithmConfig(AlgorithmConfig):
    """SkyRL's algorithm config plus DAPO's overlong buffer (the defaults of SkyRL's DAPOConfig)."""

    overlong_buffer_len: int = 512
    overlong_buffer_penalty_factor: float = 1.0


@dataclass
class ArcticDAPOTrainerConfig(ArcticTrainerConfig):
    algorithm: DAPOAlgorithmConfig = field(default_factory=DAPOAlgorithmConfig)


ArcticDAPOConfig = make_config(trainer_cls=ArcticDAPOTrainerConfig)
# make_config builds the class with type(): an importable name so Ray can pickle configs.
ArcticDAPOConfig.__name__ = ArcticDAPOConfig.__qualname__ = "ArcticDAPOConfig"
ArcticDAPOConfig.__module__ = __name__

DAPO_FIELDS = ("trainer.algorithm.overlong_buffer_len", "trainer.algorithm.overlong_buffer_penalty_factor")


class SoftOverlongPunishment:
    """DAPO's reward shaping before SkyRL's own post-processing (per-token rewards, metrics): on the
    trained output and, in the fully async trainer, on the metrics view of kept and dropped groups
    (a separate list, so no reward is punished twice)."""

    cfg: Any

    def postprocess_generator_output(
        self, generator_output, uids, metrics_generator_output=None, metrics_uids=None
    ):
        self._punish_overlong(generator_output)
        if metrics_generator_output is not None and metrics_generator_output is not generator_output:
            self._punish_overlong(metrics_generator_output)
        return super().postprocess_generator_output(
            generator_output,
            uids,
            metrics_generator_output=metrics_generator_output,
            metrics_uids=metrics_uids,
        )

    def _punish_overlong(self, output: dict[str, Any]) -> None:
        algo = self.cfg.trainer.algorithm
        output["rewards"] = punish_overlong(
            output["rewards"],
            [len(ids) for ids in output["response_ids"]],
            max_length=int(self.cfg.generator.sampling_params.max_generate_length),
            buffer_len=int(algo.overlong_buffer_len),
            penalty_factor=float(algo.overlong_buffer_penalty_factor),
        )


class ArcticDAPOTrainer(SoftOverlongPunishment, ArcticPPOTrainer):
    """SkyRL's synchronous trainer on the Arctic path with DAPO's soft overlong punishment."""


def _fully_async_trainer() -> type:
    class ArcticFullyAsyncDAPOTrainer(SoftOverlongPunishment, ArcticFullyAsyncPPOTrainer):
        """SkyRL's fully asynchronous trainer on the Arctic path with DAPO's soft overlong punishment."""

    return ArcticFullyAsyncDAPOTrainer


class ArcticDAPOExp(ArcticPPOExp):
    def trainer_class(self) -> type[ArcticPPOTrainer]:
        if self.cfg.trainer.fully_async.enabled:
            return _fully_async_trainer()
        return ArcticDAPOTrainer


def parse_cli(argv: Sequence[str]):
    """SkyRL's strict CLI parse of the DAPO config with the `trainer.arctic_rl.*` extension."""

    return parse_cli_with_notices(argv, config_cls=ArcticDAPOConfig)[0]


def main(argv: Sequence[str] | None = None) -> None:
    run_main(list(sys.argv[1:] if argv is None else argv), config_cls=ArcticDAPOConfig, exp_cls=ArcticDAPOExp,
             usage=USAGE)  # fmt: skip


if __name__ == "__main__":
    from adapter_skyrl.main import cli

    cli(main)
