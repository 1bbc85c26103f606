"""The resolved configuration as `arctic-rl config show` prints it: a top-level `config:` mapping
(every field, defaults included), then the `plan:` the Arctic stack receives. The adapters' dry
runs print the same document."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arctic_rl_core.config.run_config import ArcticRLConfig
import yaml


def config_document(cfg: ArcticRLConfig) -> dict[str, Any]:
    return {"config": cfg.model_dump(mode="json"), "plan": cfg.plan()}


def dump_document(data: object, as_json: bool = False) -> str:
    """YAML (no anchors, keys in schema order) or indented JSON, ending in a newline."""
    if as_json:
        return json.dumps(data, indent=2) + "\n"

    class _NoAliases(yaml.SafeDumper):
        def ignore_aliases(self, data: object) -> bool:
            return True

    return yaml.dump(data, Dumper=_NoAliases, sort_keys=False, default_flow_style=False)


def render_config_document(cfg: ArcticRLConfig, as_json: bool = False) -> str:
    return dump_document(config_document(cfg), as_json)
