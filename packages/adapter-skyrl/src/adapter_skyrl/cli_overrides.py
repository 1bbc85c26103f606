"""SkyRL's command-line overrides read before SkyRL 0.4.0's strict parse, so that a launcher gets every
problem in one round instead of SkyRL's first `Invalid fields` error:

- the spellings of skyrl-train 0.4.0 (the `skyrl_train_v0.4.0` release's Hydra config, which the
  examples of that tag use: `generator.num_inference_engines`, `+generator.engine_init_kwargs.x`,
  DAPO's `overlong_buffer.len`, ...) are read as SkyRL 0.4.0's, each with a notice naming the new key;
- a key SkyRL 0.4.0 does not have is a problem naming the nearest key ("did you mean"), and the rest
  is still parsed and checked; the settings of SkyRL's SFT trainer and of the examples that extend
  SkyRL's config with their own class (agent harnesses, ...) are named as such;
- an argument that is not `key=value` (an example entry point's own `--flag`) is a problem.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from arctic_rl_core.config import ConfigIssue
from arctic_rl_core.config.errors import suggest_key_among
from arctic_rl_core.config.override_values import value_problem
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from skyrl.train.config.sft_config import SFTConfig

from adapter_skyrl.config import (
    DAPO_ONLY_FIELDS,
    ArcticSkyRLConfig,
    skyrl_defaults,
    strip_override_entrypoint,
)
from adapter_skyrl.legacy_keys import LEGACY_SKYRL_KEYS, split_dropped_keys

# skyrl-train 0.4.0 (Hydra, flat generator group) -> SkyRL 0.4.0 (generator.inference_engine.*).
_ENGINE_FIELDS = (
    "backend",
    "run_engines_locally",
    "weight_sync_backend",
    "weight_transfer_threshold_cuda_ipc_GB",
    "external_proxy_url",
    "external_server_urls",
    "vllm_v1_disable_multiproc",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "max_num_batched_tokens",
    "enforce_eager",
    "fully_sharded_loras",
    "enable_ray_prometheus_stats",
    "gpu_memory_utilization",
    "max_num_seqs",
    "served_model_name",
    "model_dtype",
    "engine_init_kwargs",
    "async_engine",
)
SKYRL_TRAIN_RENAMES: dict[str, str] = {
    "generator.num_inference_engines": "generator.inference_engine.num_engines",
    **{
        f"generator.inference_engine_{kind}_parallel_size": f"generator.inference_engine.{kind}_parallel_size"
        for kind in ("tensor", "pipeline", "expert", "data")
    },
    **{f"generator.{name}": f"generator.inference_engine.{name}" for name in _ENGINE_FIELDS},
    "trainer.policy.megatron_config.torch_profiler_config": "trainer.policy.torch_profiler_config",
    "trainer.ref.megatron_config.torch_profiler_config": "trainer.ref.torch_profiler_config",
    # the DAPO example's config (examples/algorithms/dapo/main_dapo.py): a nested group then, two fields now
    "trainer.algorithm.overlong_buffer.len": "trainer.algorithm.overlong_buffer_len",
    "trainer.algorithm.overlong_buffer.penalty_factor": "trainer.algorithm.overlong_buffer_penalty_factor",
}
# skyrl-train 0.4.0 keys SkyRL 0.4.0 removed because its inference path always does what they chose.
SKYRL_TRAIN_REMOVED: dict[str, str] = {
    "generator.enable_http_endpoint": "SkyRL 0.4.0 always serves its engines over HTTP (the field is gone); "
    "the Arctic generator samples through the backend",
    "generator.http_endpoint_host": "SkyRL 0.4.0 has no HTTP endpoint settings (see enable_http_endpoint)",
    "generator.http_endpoint_port": "SkyRL 0.4.0 has no HTTP endpoint settings (see enable_http_endpoint)",
    "generator.override_existing_update_group": "SkyRL 0.4.0 manages the weight-update group itself",
}

# skyrl-train 0.4.0 keys SkyRL 0.4.0 refuses, as problems (SkyRL's reason, and the Arctic path's).
SKYRL_TRAIN_REFUSED: dict[str, tuple[str, str]] = {
    "generator.remote_inference_engine_urls": (
        "generation on inference servers of your own (SkyRL 0.4.0 spells them generator.inference_engine."
        "external_proxy_url / external_server_urls); the Arctic server samples with its own engines, which its "
        "weight sync updates",
        "remove it (the Arctic sampling job serves generation)",
    ),
}

# Fields that SkyRL's own examples add to its config with their own config class (each example's entry
# point parses them, and runs its own generator): field -> the example.
EXAMPLE_FIELDS: dict[str, str] = {
    "harbor_trial_config": "Harbor (examples/train_integrations/harbor: agents in sandboxed containers)",
    "rate_limit": "Harbor (examples/train_integrations/harbor: agents in sandboxed containers)",
    "max_train_tasks": "ThunderAgent (examples/train/thunder_agent: Harbor agents on external vLLM servers)",
    "max_eval_tasks": "ThunderAgent (examples/train/thunder_agent: Harbor agents on external vLLM servers)",
    "thunder_agent_mode": "ThunderAgent (examples/train/thunder_agent: Harbor agents on external vLLM servers)",
    "thunder_agent_profile_enabled": "ThunderAgent (examples/train/thunder_agent: Harbor agents on external vLLM servers)",
    "thunder_agent_metrics_enabled": "ThunderAgent (examples/train/thunder_agent: Harbor agents on external vLLM servers)",
    "terminal_bench_config": "Terminal-Bench (examples/terminal_bench: agents in containers)",
    "miniswe_config_path": "mini-SWE-agent (examples/train/mini_swe_agent: agents in containers)",
    "miniswe_traj_dir": "mini-SWE-agent (examples/train/mini_swe_agent: agents in containers)",
    "enable_child_agents": "RLM (examples/train/rlm: recursive language-model agents)",
    "train_child_trajectories": "RLM (examples/train/rlm: recursive language-model agents)",
    "num_dummy_steps": "full-context (examples/train_scripts/full_context: a memory test with dummy data)",
}
_EXAMPLE_FIX = (
    "run it with SkyRL's own entry point (its vLLM engines); on the Arctic path SkyRL's config drives "
    "SkyRL's SkyRLGymGenerator over Arctic inference, not the example's own generator class (its agent harness)"
)
_INVALID = re.compile(r"Invalid fields \{(?P<names>[^}]*)\} for (?P<cls>\w+)")


@dataclass
class ReadOverrides:
    """The overrides SkyRL's strict parse gets (`args`), the notices (renamed or dropped keys) and
    the problems (unknown keys, stray arguments): reported with the rest of the run's."""

    args: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    issues: list[ConfigIssue] = field(default_factory=list)


def config_paths(config: Any, prefix: str = "") -> tuple[set[str], set[str]]:
    """(every group path, every leaf path) of a SkyRL config dataclass instance; a mapping is a leaf."""
    groups, leaves = set(), set()
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            groups.add(path)
            sub_groups, sub_leaves = config_paths(value, path + ".")
            groups |= sub_groups
            leaves |= sub_leaves
        else:
            leaves.add(path)
    return groups, leaves


def _known(key: str, groups: set[str], leaves: set[str]) -> bool:
    """A group, a leaf, or below a leaf (a mapping's keys, a typed leaf's sub-fields: SkyRL decides)."""
    if key in groups:
        return True
    parts = key.split(".")
    return any(".".join(parts[: i + 1]) in leaves for i in range(len(parts)))


def read_overrides(
    argv: Sequence[str], defaults: Any, *, sft_fields: Sequence[str] = (), also_known: Sequence[str] = ()
) -> ReadOverrides:
    """`argv` as SkyRL 0.4.0's strict parse of `defaults`' class takes it (see the module doc).
    `also_known`: keys read before SkyRL's parse (the legacy integration's dropped keys)."""
    groups, leaves = config_paths(defaults)
    leaves |= set(also_known)
    known = sorted(groups | leaves)
    out = ReadOverrides()
    unknown: list[tuple[str, str]] = []
    examples: dict[str, list[str]] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if "=" not in arg:
            if arg.startswith("-") and args and "=" not in args[0] and not args[0].startswith("-"):
                arg = f"{arg} {args.pop(0)}"  # an argparse flag and its value
            out.issues.append(
                ConfigIssue(
                    arg,
                    "(no value)",
                    "not a SkyRL override (key=value): an example entry point's own argument, which "
                    "adapter_skyrl does not read",
                    "remove it (SkyRL's settings are key=value overrides)",
                )
            )
            continue
        raw_key, value = arg.split("=", 1)
        plus = len(raw_key) - len(raw_key.lstrip("+"))
        key = raw_key.lstrip("+")
        renamed = _rename(key)
        if renamed != key:
            out.notices.append(f"{raw_key}: skyrl-train 0.4.0's spelling, read as SkyRL 0.4.0's {renamed}")
            key = renamed
        elif plus:
            out.notices.append(
                f"{raw_key}: Hydra's '{'+' * plus}' (skyrl-train 0.4.0) dropped; SkyRL 0.4.0 takes {key} as is"
            )
        if key in SKYRL_TRAIN_REMOVED:
            out.notices.append(f"{raw_key}={value}: dropped; {SKYRL_TRAIN_REMOVED[key]}")
            continue
        if key in SKYRL_TRAIN_REFUSED:
            out.issues.append(ConfigIssue(raw_key, value, *SKYRL_TRAIN_REFUSED[key]))
            continue
        if key.split(".", 1)[0] == "hydra":
            out.notices.append(f"{raw_key}={value}: dropped; Hydra's own setting (skyrl-train 0.4.0's CLI), "
                               "SkyRL 0.4.0 parses without Hydra")  # fmt: skip
            continue
        if _known(key, groups, leaves):
            out.args.append(f"{key}={value}")
            continue
        if (
            plus
            and renamed == raw_key.lstrip("+")
            and key.split(".", 1)[0] in groups
            and not _example_field(key)
        ):
            out.notices.append(
                f"{raw_key}={value}: dropped; a key Hydra's '+' added to skyrl-train 0.4.0's config, which that "
                "config does not define (its code never read it); SkyRL 0.4.0 has no such field"
            )
            continue
        example = _example_field(key)
        if example:
            examples.setdefault(example, []).append(key)
        else:
            unknown.append((key, value))
    # SkyRL's SFT launchers: every unknown key is a top-level field of SkyRL's SFTConfig
    tops = {key.split(".", 1)[0] for key, _ in unknown}
    if len(tops) >= 2 and tops <= set(sft_fields):
        out.issues.append(sft_issue(sorted(tops)))
        unknown = []
    for key, value in unknown:
        group, leaf = key.rsplit(".", 1) if "." in key else ("", key)
        out.issues.append(
            ConfigIssue(
                key,
                _as_written(value),
                "SkyRL 0.4.0's config has no such field",
                suggest_key_among(known, group, leaf),
            )
        )
    if examples:  # one problem: the example's own generator (fields of one or more related examples)
        out.issues.append(
            ConfigIssue(
                _some([key for keys in examples.values() for key in keys]),
                "(set)",
                f"fields of SkyRL's {' and '.join(examples)} example, which extends SkyRL's config with its own "
                "class and runs its own generator",
                _EXAMPLE_FIX,
            )
        )
    return out


def _as_written(value: str) -> Any:
    """A CLI value as SkyRL's parser reads it (YAML: 8 is a number), for the message."""

    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _example_field(key: str) -> str | None:
    """The SkyRL example whose own config class defines `key` (by any of its names)."""
    return next((EXAMPLE_FIELDS[part] for part in key.split(".") if part in EXAMPLE_FIELDS), None)


def _some(keys: Sequence[str], shown: int = 6) -> str:
    """Up to `shown` of `keys`, then `...`: the field of a problem that many keys share."""
    return ", ".join(keys[:shown]) + (", ..." if len(keys) > shown else "")


def sft_issue(keys: Sequence[str]) -> ConfigIssue:
    return ConfigIssue(
        _some(sorted(keys)),
        "(set)",
        "settings of SkyRL's SFT trainer (skyrl.train.main_sft, its SFTConfig): the Arctic adapter runs SkyRL's "
        "RL trainer (the GRPO family), and the Arctic stack trains no SFT job",
        "run SkyRL's SFT trainer itself: python -m skyrl.train.main_sft <these overrides>",
    )


def _rename(key: str) -> str:
    for old, new in SKYRL_TRAIN_RENAMES.items():
        if key == old or key.startswith(old + "."):
            return new + key[len(old) :]
    return key


def invalid_fields_issues(error: ValueError, argv: Sequence[str]) -> list[ConfigIssue] | None:
    """SkyRL's strict-parse error `Invalid fields {...} for <Class>` as one issue per field (None when
    the error is another kind): a safety net for fields `read_overrides` let through."""
    found = _INVALID.search(str(error))
    if not found:
        return None
    names = [n.strip().strip("'\"") for n in found.group("names").split(",") if n.strip()]
    keys = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if "=" in a}
    issues = []
    for name in names:
        key = next((k for k in keys if k == name or k.endswith("." + name) or f".{name}." in f".{k}"), name)
        issues.append(
            ConfigIssue(
                key,
                keys.get(key, "(set)"),
                f"SkyRL 0.4.0's {found.group('cls')} has no such field",
                "remove it",
            )
        )
    return issues


@dataclass
class ParsedOverrides:
    """SkyRL's config parsed from the overrides (None when even the readable ones do not parse), the
    notices and every problem of the overrides themselves."""

    cfg: Any
    notices: list[str]
    issues: list[ConfigIssue]


def parse_overrides(argv: Sequence[str], config_cls: type | None = None) -> ParsedOverrides:
    """The launcher's overrides as SkyRL's config of `config_cls` (default the adapter's; the DAPO entry
    point passes its own), with every problem of the overrides at once: unknown keys are reported and
    left out, and the rest is parsed and checked as usual."""

    cls = config_cls or ArcticSkyRLConfig
    read = read_overrides(
        strip_override_entrypoint(argv),
        skyrl_defaults(cls),
        sft_fields=[f.name for f in dataclasses.fields(SFTConfig)],
        also_known=list(LEGACY_SKYRL_KEYS),
    )
    read.args, notices = split_dropped_keys(read.args)
    issues = [i for i in read.issues if i.path.rsplit(".", 1)[-1] not in DAPO_ONLY_FIELDS]
    dapo = sorted(i.path for i in read.issues if i.path.rsplit(".", 1)[-1] in DAPO_ONLY_FIELDS)
    if dapo:
        issues.append(
            ConfigIssue(
                ", ".join(dapo),
                "(set)",
                "defined by SkyRL's DAPO example (its DAPOConfig and trainer subclass), not by SkyRL's config",
                "run python -m adapter_skyrl.dapo, the adapter's counterpart of examples/train/algorithms/dapo/"
                "main_dapo*.py",
            )
        )
    args = list(read.args)
    for arg in list(args):  # a value YAML cannot read (OmegaConf parses each value as YAML)
        key, value = arg.split("=", 1)
        try:
            yaml.safe_load(value)
        except yaml.YAMLError as error:
            args.remove(arg)
            problem = str(error).splitlines()[0]
            issues.append(ConfigIssue(key, value, f"not a value SkyRL's parser (YAML) can read: {problem}",
                                      "quote it as a YAML string"))  # fmt: skip
    for arg in list(args):  # a value of another type than the field's (SkyRL keeps `two` as text), or base 60
        issue = mistyped(arg, skyrl_defaults(cls))
        if issue is not None:
            args.remove(arg)
            issues.append(issue)
    try:
        cfg = cls.from_cli_overrides(args)
    except (ValueError, TypeError, OmegaConfBaseException) as error:  # SkyRL refuses a value: its message
        cfg = None
        issues += invalid_fields_issues(error, args) or [
            ConfigIssue("SkyRL's parse", type(error).__name__, str(error), "change the override it names")
        ]
    return ParsedOverrides(cfg, [*notices, *read.notices], issues)


def mistyped(arg: str, defaults: Any) -> ConfigIssue | None:
    """The problem of a `key=value` override whose value, as SkyRL's parser (OmegaConf, YAML 1.1) reads
    it, has another type than SkyRL's default for the field (`trainer.epochs=two` stays the text "two"),
    or is written in base 60 (`weight_decay=1:2:3` is read as 3723); None when it is fine."""

    key, _, text = arg.partition("=")
    node = defaults
    for part in key.split("."):
        if not dataclasses.is_dataclass(node) or part not in {f.name for f in dataclasses.fields(node)}:
            return None  # a mapping's key or a path SkyRL reports itself
        node = getattr(node, part)
    problem = value_problem(text, OmegaConf.select(OmegaConf.from_cli([arg]), key), node)
    return None if problem is None else ConfigIssue(key, text, *problem)
