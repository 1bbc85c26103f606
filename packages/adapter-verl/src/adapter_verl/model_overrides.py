"""verl's Hugging Face config overrides (`actor_rollout_ref.model.override_config.*`) on the Arctic jobs.

verl 0.9.1 applies them to the config its own actor loads (`HFModelConfig.__post_init__`: the keys of
`override_config`, or of `override_config.model_config` when that key is there, set one by one with
`verl.utils.model.update_model_config`: a mapping recurses into a sub-config, anything else is
`setattr`); `attn_implementation` is read apart (the Arctic path maps it to
`kernels.attn_implementation`). verl's vLLM server starts from the model folder as is and passes no
override to vLLM (its `hf_overrides` carry quantization only).

arctic-platform 0.1.4's training job (`ModelSpec.from_ds_worker_config` -> the `huggingface` loader:
`AutoModelForCausalLM.from_pretrained(model_name, attn_implementation, dtype)`), its log-prob job and its
vLLM sampler (`ModelConfig(model=model_name)`) all load `model_name` and take no config override. So
the Arctic jobs get the SAME overridden config by being given another folder: made at start-up in the
run's folder (`<trainer.default_local_dir>/arctic_model`), its `config.json` the model's config with verl's
overrides applied as verl applies them, every other entry of the model folder linked (never copied), and
named as `model.name` of every Arctic job. The server must see that path: the Ray backend and an HTTP
server on this machine do; Cortex and an HTTP server elsewhere do not (refused with the fix).

Checked before anything starts, against the model's `config.json` (a local folder, or a hub id's
snapshot in the local Hugging Face cache). A key the config does not have is set as verl sets it (a
new attribute no code of the model reads: verl-recipe's DAPO launchers set GPT-2's `embd_pdrop` /
`resid_pdrop` on Qwen models, and run on stock verl), named in a startup notice; one close to a key the
config has (a misspelling: verl would leave the key meant as it was) is refused with "did you mean", as
is a value of another type than the config's (transformers' typed config fields refuse most: verl fails
in its workers then; a field without a type takes it as given) and a mapping for a key that
is not a sub-config (verl 0.9.1's `update_model_config` cannot set one: it raises `AttributeError`).
"""

from __future__ import annotations

import copy
import difflib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arctic_rl_core.config.errors import ConfigIssue

FIELD = "actor_rollout_ref.model.override_config"
ATTN_KEY = "attn_implementation"  # read apart by verl; mapped to kernels.attn_implementation
NESTED_KEY = "model_config"  # verl's HFModelConfig applies only this mapping when it is present
FOLDER_NAME = "arctic_model"
CLOSE_KEY = 0.85  # how close an unknown key must be to one of the config's to count as misspelt
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})


def config_overrides(override_config: Any) -> dict[str, Any]:
    """What verl's `HFModelConfig` applies to the HF config of `override_config` (less
    `attn_implementation`, which the Arctic path maps apart): `{}` when nothing."""
    if not isinstance(override_config, Mapping):
        return {}
    chosen = override_config.get(NESTED_KEY, override_config)
    if not isinstance(chosen, Mapping):
        return {}
    return {key: value for key, value in chosen.items() if key != ATTN_KEY}


def _field(path: tuple[str, ...], nested: bool) -> str:
    return ".".join([FIELD, *((NESTED_KEY,) if nested else ()), *path])


def _same_type(old: Any, new: Any) -> bool:
    if old is None or new is None:
        return True  # the config leaves the type open (or the override clears it)
    if isinstance(old, bool) or isinstance(new, bool):
        return isinstance(old, bool) and isinstance(new, bool)
    if isinstance(old, float):
        return isinstance(new, int | float)
    if isinstance(old, int):
        return isinstance(new, int)
    if isinstance(old, list | tuple):
        return isinstance(new, list | tuple)
    return isinstance(new, type(old))


@dataclass
class Findings:
    """What the overrides do to a model's config: problems (refused) and the keys the config does
    not have (set as verl sets them: said at startup)."""

    issues: list[ConfigIssue]
    new_keys: list[str]


def _keys_of(config: Any) -> list[str]:
    return sorted({*config.to_dict(), *getattr(config, "attribute_map", {})})


def _findings(target: Any, overrides: Mapping[str, Any], path: tuple[str, ...], nested: bool) -> Findings:
    from transformers import PretrainedConfig  # noqa: PLC0415 - CLI start-up

    found = Findings([], [])
    issues = found.issues
    kind = type(target).__name__
    for key, value in overrides.items():
        where = _field((*path, str(key)), nested)
        if not hasattr(target, key):
            close = difflib.get_close_matches(str(key), _keys_of(target), n=1, cutoff=CLOSE_KEY)
            if close:  # a misspelling: verl would add it and leave the key meant as it was
                issues.append(
                    ConfigIssue(
                        where,
                        value,
                        f"{kind} (the model's config.json) has no {key}: verl would add it as a new attribute "
                        f"that no code of the model reads, and leave {close[0]} as it is",
                        f"did you mean {_field((*path, close[0]), nested)}?",
                    )
                )
            else:
                found.new_keys.append(where)
            continue
        current = getattr(target, key)
        if isinstance(value, Mapping):
            if isinstance(current, PretrainedConfig):
                inner = _findings(current, value, (*path, str(key)), nested)
                issues.extend(inner.issues)
                found.new_keys.extend(inner.new_keys)
            else:
                issues.append(
                    ConfigIssue(
                        where,
                        value,
                        f"{kind}.{key} is not a sub-config: verl 0.9.1 sets a mapping's keys one by one "
                        "(update_model_config) and fails on it",
                        "set the whole value in the model's config.json and remove the override",
                    )
                )
        elif (refusal := _refusal(target, key, value)) is not None or not _same_type(current, value):
            why = f" ({refusal}: verl would fail on it)" if refusal else ""
            issues.append(
                ConfigIssue(
                    where,
                    value,
                    f"{kind}.{key} is {type(current).__name__} ({current!r} in the model's config.json), the "
                    f"override is {type(value).__name__}{why}",
                    f"give a value of type {type(current).__name__}",
                )
            )
    return found


def _refusal(target: Any, key: str, value: Any) -> str | None:
    """What the config's own field validation (transformers' typed config fields) says of `value`."""
    from huggingface_hub.errors import StrictDataclassError  # noqa: PLC0415 - CLI start-up

    try:
        setattr(copy.copy(target), key, value)
    except (StrictDataclassError, TypeError, ValueError) as error:
        return str(error).strip().splitlines()[-1].strip()
    return None


def check_overrides(base_config: Any, override_config: Mapping[str, Any]) -> Findings:
    """The overrides against the model's loaded HF config: refused are misspelt keys, other types,
    mappings for keys that are no sub-config and keys beside `model_config` (verl applies only its);
    the other keys the config does not have are listed."""
    nested = NESTED_KEY in override_config
    issues = []
    if nested:
        if not isinstance(override_config[NESTED_KEY], Mapping):
            problem = ConfigIssue(
                _field((), True), override_config[NESTED_KEY], "must be a mapping", "give key=value pairs"
            )
            return Findings([problem], [])
        for key in sorted(set(override_config) - {NESTED_KEY, ATTN_KEY}):
            issues.append(
                ConfigIssue(
                    _field((str(key),), False),
                    override_config[key],
                    f"beside {NESTED_KEY}, verl 0.9.1 applies only {NESTED_KEY}'s keys",
                    f"move it under {FIELD}.{NESTED_KEY}",
                )
            )
    found = _findings(base_config, config_overrides(override_config), (), nested)
    return Findings(issues + found.issues, found.new_keys)


def apply_overrides(config: Any, overrides: Mapping[str, Any]) -> None:
    """verl's application: a mapping recurses into the sub-config of its key, anything else is set."""
    for key, value in overrides.items():
        if isinstance(value, Mapping):
            apply_overrides(getattr(config, key), value)
        else:
            setattr(config, key, value)


def local_model_folder(name: str) -> Path | None:
    """The folder holding `name`'s files on this machine: a local folder, or a hub id's snapshot in
    the local Hugging Face cache (nothing is downloaded); None when neither exists."""
    local = Path(os.path.expanduser(name))
    if (local / "config.json").is_file():
        return local.resolve()
    if "/" not in name or name.startswith(("/", ".", "~")) or name.count("/") != 1:
        return None
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - CLI start-up
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError  # noqa: PLC0415 - CLI start-up

    try:
        snapshot = Path(snapshot_download(name, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError):
        return None
    return snapshot if (snapshot / "config.json").is_file() else None


def load_base_config(folder: Path) -> Any:
    """The model's HF config as verl's actor loads it (without remote code: refused on the Arctic path)."""
    from transformers import AutoConfig  # noqa: PLC0415 - CLI start-up

    return AutoConfig.from_pretrained(str(folder), local_files_only=True)


def server_sees_local_paths(kind: str, host: str, launch_local_server: bool) -> bool:
    """Whether the Arctic server reads this machine's files: the Ray backend (the local Ray cluster) and
    an HTTP server on this machine do (the recipes' on-prem layout); Cortex and a remote server do not."""
    if kind in ("ray", "reference"):
        return True
    if kind == "http":
        return launch_local_server or host in LOCAL_HOSTS or host == os.uname().nodename
    return False


@dataclass(frozen=True)
class DerivedModel:
    """The model folder the Arctic jobs load: `base` with `overrides` applied, at `folder`."""

    base: str
    overrides: dict[str, Any]
    folder: str

    def make(self) -> Path:
        """Write the folder (again: it follows the current settings): `config.json` with the overrides
        applied, a symbolic link for every other entry of the base folder."""
        base = local_model_folder(self.base)
        if base is None:
            raise FileNotFoundError(
                f"actor_rollout_ref.model.path={self.base!r}: no config.json there or in the local Hugging Face "
                f"cache: the Arctic jobs need a model folder with {FIELD} applied. Fix: give a local folder, or "
                f"download it first (huggingface-cli download {self.base})"
            )
        config = load_base_config(base)
        issues = _findings(config, self.overrides, (), False).issues
        if issues:
            raise ValueError("\n".join(issue.render() for issue in issues))
        apply_overrides(config, self.overrides)
        folder = Path(self.folder)
        if folder.exists():
            if not (folder / ".arctic_model").is_file():
                raise FileExistsError(f"{folder} exists and was not made by adapter_verl: move it away")
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        (folder / ".arctic_model").write_text(f"{base}\n")  # marks the folder as ours (rebuilt at start-up)
        for entry in sorted(base.iterdir()):
            if entry.name != "config.json":
                (folder / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
        config.to_json_file(str(folder / "config.json"), use_diff=False)
        return folder


__all__ = [
    "ATTN_KEY",
    "FIELD",
    "FOLDER_NAME",
    "NESTED_KEY",
    "DerivedModel",
    "Findings",
    "apply_overrides",
    "check_overrides",
    "config_overrides",
    "load_base_config",
    "local_model_folder",
    "server_sees_local_paths",
]
