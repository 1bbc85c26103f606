"""Entry point: `python -m adapter_skyrl.main <SkyRL overrides> trainer.arctic_rl.<group>.<knob>=...`,
or SkyRL's own launcher with `trainer.override_entrypoint=adapter_skyrl.main` (SkyRL calls `main()`
before its strict parse; the argument is stripped here).

The run happens in this process: the backend (reference engine in-process, or the Arctic server's
jobs) does the GPU work, so SkyRL needs no Ray workers of its own.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    from skyrl.train.utils import validate_cfg

    from adapter_skyrl.config import check_supported, parse_cli
    from adapter_skyrl.trainer import ArcticPPOExp

    cfg = parse_cli(sys.argv[1:] if argv is None else argv)
    check_supported(cfg)  # before SkyRL's validation: our messages name the Arctic remedy
    validate_cfg(cfg)
    ArcticPPOExp(cfg).run()


if __name__ == "__main__":
    main()
