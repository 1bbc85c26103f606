"""The typed, framework-neutral configuration of an Arctic RL run and its translation.

`load_config(path, overrides)` reads YAML/TOML plus Hydra-style overrides into an
`ArcticRLConfig`; `cfg.plan()` is what the Arctic stack receives, as plain data;
`cfg.to_client_config()` builds the real arctic-platform client config. Light: pydantic and PyYAML
only at import time.
"""

from arctic_rl_core.config.errors import ConfigError, ConfigIssue
from arctic_rl_core.config.run_config import ArcticRLConfig
from arctic_rl_core.config.shape import TrainingShape
from arctic_rl_core.config.sources import load_config

__all__ = ["ArcticRLConfig", "ConfigError", "ConfigIssue", "TrainingShape", "load_config"]
