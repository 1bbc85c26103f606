"""The command line of `python -m adapter_verl.main`: the adapter's flags, Hydra's config selection
(`--config-path` / `--config-name`, as verl's launchers pass them to their entry point) and the
overrides, and where the selected config lives.

Hydra resolves a relative `--config-path` against the directory of the Python file that declares
`@hydra.main`; a launcher written for `verl.trainer.main_ppo` (`config`), for verl's fully-async or
one-step-off entry points (their own `config` folders) or for a recipe therefore names a folder next to
the entry point it used. With the entry point switched to the adapter, a relative path is looked up
in the working directory first (a recipe checkout), then in the folders of verl's own entry points,
where the config name decides (`ppo_megatron_trainer` is verl/trainer/config's,
`fully_async_ppo_trainer` the fully-async entry point's)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ADAPTER_FLAGS = ("--dry-run", "--help", "-h")
_SELECTION = {
    "--config-path": "config_path",
    "-cp": "config_path",
    "--config-name": "config_name",
    "-cn": "config_name",
}

# verl 0.9.1's Hydra config packages of its entry points, in lookup order
VERL_CONFIG_PACKAGES = (
    "verl.trainer.config",
    "verl.experimental.fully_async_policy.config",
    "verl.experimental.one_step_off_policy.config",
)
DEFAULT_CONFIG_NAME = "ppo_trainer"


@dataclass
class CommandLine:
    """What the user typed, sorted."""

    dry_run: bool = False
    help: bool = False
    config_path: str | None = None
    config_name: str | None = None
    overrides: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def parse(argv: Sequence[str]) -> CommandLine:
    """Split `argv` into the adapter's flags, Hydra's config selection and verl overrides (both
    `--config-name=X` and `--config-name X`)."""
    line = CommandLine()
    args = list(argv)
    while args:
        arg = args.pop(0)
        flag, eq, value = arg.partition("=")
        if arg == "--dry-run":
            line.dry_run = True
        elif arg in ("--help", "-h"):
            line.help = True
        elif flag in _SELECTION:
            if not eq:
                if not args or args[0].startswith("-"):
                    line.problems.append(f"{flag}: give a value ({flag}=<value>)")
                    continue
                value = args.pop(0)
            setattr(line, _SELECTION[flag], value.strip().strip("'\""))
        elif arg.startswith("--") and "=" not in arg:
            line.problems.append(
                f"{arg}: not an option of python -m adapter_verl.main (its options: --dry-run, --help, "
                "--config-path, --config-name); verl's settings are Hydra overrides key=value"
            )
        else:
            line.overrides.append(arg)
    return line


@dataclass(frozen=True)
class ConfigSelection:
    """The primary config verl composes: a name in a folder (None: verl's own `ppo_trainer`)."""

    name: str = DEFAULT_CONFIG_NAME
    folder: Path | None = None  # None: verl.trainer.config
    package: str = "verl.trainer.config"

    @property
    def is_default(self) -> bool:
        return (
            self.name == DEFAULT_CONFIG_NAME and self.package == "verl.trainer.config" and self.folder is None
        )


def package_folder(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _config_file(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    return None


def select_config(line: CommandLine) -> tuple[ConfigSelection, list[str]]:
    """Where `--config-path` / `--config-name` point; returns (selection, problems)."""
    if line.config_path is None and line.config_name is None:
        return ConfigSelection(), []
    name = (line.config_name or DEFAULT_CONFIG_NAME).removesuffix(".yaml")
    path = line.config_path
    folders: list[tuple[Path, str | None]] = []
    if path is not None and (Path(path).is_absolute() or Path(path).is_dir()):
        folders.append((Path(path).resolve(), None))
    if path is None or not Path(path).is_absolute():
        for package in VERL_CONFIG_PACKAGES:
            folder = package_folder(package)
            if folder is not None:
                folders.append((folder, package))
    for folder, package in folders:
        if _config_file(folder, name) is not None:
            if package is not None:
                return ConfigSelection(name=name, package=package), []
            return ConfigSelection(name=name, folder=folder, package=""), []
    known = sorted(
        {p.stem for folder, _ in folders for p in folder.glob("*.yaml") if not p.stem.startswith("_")}
    )
    where = f"{path} (nor in verl's config folders)" if path else "verl's config folders"
    return ConfigSelection(), [
        f"--config-name={line.config_name}: no such config in {where}; verl 0.9.1 ships {', '.join(known)}. Fix: "
        "give the folder holding it as --config-path=<folder> (with the entry point switched to the adapter, "
        "Hydra no longer looks next to the recipe's own main), or drop --config-name for verl's ppo_trainer"
    ]


def override_key(override: str) -> str:
    """The dotted key of a Hydra override (`+a.b=1`, `~a.b`, `a.b=1` -> `a.b`)."""
    return override.split("=", 1)[0].lstrip("+~")
