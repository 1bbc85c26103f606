"""`to_client_config()`: the real `arctic_platform.client.ArcticClientConfig` (arctic-platform
0.1.4), built from the plan's plain data. arctic-platform is imported here, lazily."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from arctic_rl_core.config.errors import ConfigError, ConfigIssue
from arctic_rl_core.config.plan import client_fields

if TYPE_CHECKING:
    from arctic_platform.client import ArcticClientConfig

    from arctic_rl_core.config.schema import ArcticRLSettings
from pydantic import SecretStr

INSTALL_HINT = "install arctic-rl-core[transport] (arctic-platform[transport]==0.1.4)"


def _cortex_backend(fields: dict[str, Any]) -> Any:
    from arctic_platform.client import CortexConfig

    data = dict(fields)
    token_env = data.pop("pat_from_env", None)
    optional_env = data.pop("pat_from_env_if_set", None)
    if optional_env is not None and os.environ.get(optional_env):
        # base_url with a token (the Cortex emulator checks it on every call): arctic_compat's
        # Cortex transport sends it, where 0.1.4's sends a PAT only to `host`
        data["pat"] = SecretStr(os.environ[optional_env])
    if token_env is not None:
        token = os.environ.get(token_env, "")
        if not token:
            raise ConfigError(
                [
                    ConfigIssue(
                        "backend.cortex.token_env",
                        token_env,
                        f"the environment variable {token_env} is unset or empty",
                        f"export {token_env} with the Cortex programmatic access token, or set "
                        "backend.cortex.token_env to the variable that holds it",
                    )
                ]
            )
        data["pat"] = SecretStr(token)
    # model_validate (not the constructor): CortexConfig is a settings class, and only the
    # constructor reads ARCTIC_CORTEX_* variables. Every value here comes from the configuration.
    return CortexConfig.model_validate(data)


def to_client_config(cfg: ArcticRLSettings) -> ArcticClientConfig:
    if not cfg.is_arctic:
        raise ConfigError(
            [
                ConfigIssue(
                    "backend.kind",
                    cfg.backend.kind,
                    "the reference backend does not use the Arctic client",
                    "set backend.kind to ray, http or cortex to build an Arctic client config",
                )
            ]
        )
    try:
        from arctic_platform.client import (
            ArcticClientConfig,
            OnPremConfig,
            SamplingConfig,
            TrainingConfig,
        )
    except ImportError as error:
        raise ImportError(f"to_client_config() needs arctic-platform: {INSTALL_HINT}") from error

    fields = client_fields(cfg)
    backend_fields = fields.pop("backend")
    if backend_fields["type"] == "remote":
        backend = _cortex_backend(backend_fields)
    else:
        backend = OnPremConfig.model_validate(backend_fields)
    return ArcticClientConfig(
        **{key: value for key, value in fields.items() if key not in ("training", "sampling")},
        training=TrainingConfig.model_validate(fields["training"]),
        sampling=SamplingConfig.model_validate(fields["sampling"]),
        backend=backend,
    )
