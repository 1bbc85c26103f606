"""Hostile configuration input (issue 19 items 6, 7, 8): non-finite numbers, silent coercions,
duplicate YAML keys, alias bombs, self-reference, deep nesting, non-UTF-8 files and huge inputs
are each one message naming field, value and fix, reported fast and in bounded memory."""

from __future__ import annotations

import itertools
import resource
import time
from pathlib import Path

import pytest
from arctic_rl_core.cli.main import main
from arctic_rl_core.config import ArcticRLConfig, ConfigError, load_config
from arctic_rl_core.config.input_bounds import MAX_FILE_BYTES

# 9 levels of 9 aliases: 442 bytes that expand to 9**9 (387 million) values.
_LEVELS = "abcdefghi"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{level}: &{level} [{', '.join(['*' + previous] * 9)}]\n"
    for previous, level in itertools.pairwise(_LEVELS)
)


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def _issues(path: Path | None, overrides: list[str] = ()) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as raised:
        load_config(path, overrides)
    return [(issue.path, issue.render()) for issue in raised.value.issues]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize(
    "field",
    ["optimizer.lr", "optimizer.weight_decay", "loss.temperature"],
)
@pytest.mark.parametrize("spelling", [".inf", "-.inf", ".nan", "1e999"])
def test_non_finite_numbers_are_refused(tmp_path: Path, field: str, spelling: str) -> None:
    group, key = field.split(".")
    path = _write(tmp_path, "c.yaml", f"{group}:\n  {key}: {spelling}\n")
    ((where, message),) = _issues(path)
    assert where == field and "not a finite number" in message and "Fix: give a finite number" in message


def test_non_finite_numbers_inside_free_form_mappings_and_overrides() -> None:
    issues = _issues(None, ["++vllm.engine_args={gpu_memory_utilization: .inf}", "optimizer.lr=.nan"])
    assert [where for where, _ in issues] == ["vllm.engine_args.gpu_memory_utilization", "optimizer.lr"]


@pytest.mark.parametrize(
    ("yaml_text", "field", "problem"),
    [
        ("placement:\n  training_gpus: true\n", "placement.training_gpus", "true/false where a whole number"),
        ("placement:\n  training_gpus: '2'\n", "placement.training_gpus", "text where a whole number"),
        ("optimizer:\n  lr: '1e-6'\n", "optimizer.lr", "text where a number"),
        ("placement:\n  colocate: 1\n", "placement.colocate", "a number where true/false"),
        ("placement:\n  colocate: 'yes'\n", "placement.colocate", "text where true or false"),
        ("optimizer:\n  betas: [0.9, true]\n", "optimizer.betas[1]", "true/false where a number"),
        ("deepspeed:\n  zero_stage: true\n", "deepspeed.zero_stage", "true/false where a whole number"),
    ],
)
def test_silent_coercions_are_refused(tmp_path: Path, yaml_text: str, field: str, problem: str) -> None:
    path = _write(tmp_path, "c.yaml", yaml_text)
    ((where, message),) = _issues(path)
    assert where == field and problem in message and "Fix:" in message


def test_legitimate_typed_values_still_pass() -> None:
    # overrides are YAML scalars: numbers, bools and lists arrive typed
    cfg = load_config(None, ["optimizer.lr=1e-6", "placement.training_gpus=2", "placement.colocate=true"])
    assert (cfg.optimizer.lr, cfg.placement.training_gpus, cfg.placement.colocate) == (1e-6, 2, True)
    # an int where a float is wanted is a number, not a coercion; a tuple arrives as a list
    cfg = ArcticRLConfig.from_dict({"optimizer": {"lr": 1, "betas": [0, 0.999]}})
    assert cfg.optimizer.lr == 1.0 and cfg.optimizer.betas == (0.0, 0.999)


def test_a_coercion_and_a_schema_error_are_reported_together(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", "placement:\n  training_gpus: true\nbatch:\n  nope: 1\n")
    assert [where for where, _ in _issues(path)] == ["placement.training_gpus", "batch.nope"]


def test_duplicate_yaml_keys_are_refused_with_both_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", "optimizer:\n  lr: 1.0e-6\n  weight_decay: 0.0\n  lr: 1.0e-5\n")
    ((where, message),) = _issues(path)
    assert where == "optimizer.lr" and "lines 2 and 4" in message and "Fix: keep one of them" in message
    # a merge key's values may still be overridden
    merged = _write(tmp_path, "m.yaml", "optimizer: &o {lr: 1.0e-6}\nloss:\n  temperature: 0.7\n")
    assert load_config(merged).optimizer.lr == 1e-6


def test_an_alias_bomb_is_reported_fast_in_bounded_memory(tmp_path: Path) -> None:
    assert len(BOMB.encode()) < 450
    path = _write(tmp_path, "bomb.yaml", BOMB)
    before, start = _peak_rss_mb(), time.monotonic()
    ((_, message),) = _issues(path)
    # was 24 s and 827 MB (the error formatter expanded the aliases before truncating)
    assert time.monotonic() - start < 2.0 and _peak_rss_mb() - before < 50
    assert "expands to more than 100,000 values" in message


def test_config_show_refuses_a_bomb_inside_engine_args(tmp_path: Path, capsys) -> None:
    nested = "vllm:\n  engine_args:\n" + "".join(f"    {line}\n" for line in BOMB.splitlines()[:7])
    path = _write(tmp_path, "bomb.yaml", nested)
    start = time.monotonic()
    assert main(["config", "show", str(path)]) == 1
    out, err = capsys.readouterr()
    assert time.monotonic() - start < 2.0 and out == ""  # was 373 MB on stdout
    assert "expands to more than 100,000 values" in err and len(err) < 2000


def test_a_self_referential_engine_args_is_refused_before_show(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, "self.yaml", "vllm:\n  engine_args: &args\n    again: *args\n")
    assert main(["config", "validate", str(path)]) == 1
    assert "vllm.engine_args.again" in capsys.readouterr().err
    assert main(["config", "show", str(path)]) == 1
    err = capsys.readouterr().err
    assert "refers to itself" in err and "Traceback" not in err


def test_a_cyclic_dict_from_python_is_refused() -> None:
    cyclic: dict = {"k": 1}
    cyclic["self"] = cyclic
    with pytest.raises(ConfigError, match="refers to itself"):
        ArcticRLConfig.from_dict({"vllm": {"engine_args": cyclic}})


def test_deep_nesting_is_a_message() -> None:
    ((where, message),) = _issues(None, ["++vllm.engine_args=" + "[" * 50_000])
    assert where == "override" and "nests too deeply" in message
    deep = "++vllm.engine_args=" + "[" * 40 + "]" * 40
    ((where, message),) = _issues(None, [deep])
    assert "nests more than 32 levels" in message


def test_a_non_utf8_file_is_a_message(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", "optimizer:\n  lr: 1.0e-6  # caf\xe9\n".encode("latin-1"))
    ((where, message),) = _issues(path)
    assert where == "file" and "not UTF-8 text (byte 0xe9" in message and "save the file as UTF-8" in message


def test_huge_inputs_are_refused_unread(tmp_path: Path) -> None:
    path = _write(tmp_path, "big.yaml", "# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    ((where, message),) = _issues(path)
    assert where == "file" and "more than a config file may be" in message
    ((where, message),) = _issues(None, ["model.name=" + "x" * 70_000])
    assert where == "override" and "more than an override may be" in message


def test_a_bad_override_and_the_schema_errors_are_listed_together() -> None:
    issues = _issues(None, ["no-equals-sign", "batch.nope=1", "optimizer.lr=-1", "~placement.colocate"])
    paths = [where for where, _ in issues]
    assert paths[:2] == ["override", "placement.colocate"]  # the two overrides that cannot apply
    assert "batch.nope" in paths and "optimizer.lr" in paths  # and what the schema says of the rest


# -- issue 32: values YAML would silently change ------------------------------------------------

SURPRISES = """\
vllm:
  engine_args:
    when: 2024-01-01
    stamp: 2024-01-01T10:00:00Z
    blob: !!binary aGVsbG8=
    things: !!set {a, b}
    bad_day: 2024-02-30
    kept: '2024-01-01'
optimizer:
  weight_decay: 1:2:3
"""


def test_dates_binary_sets_and_base_60_numbers_are_refused_naming_each_field(tmp_path: Path) -> None:
    """Before: dates and timestamps became date objects (then text in another spelling), `!!binary`
    bytes, `!!set` an unordered list, `1:2:3` the number 3723, and `2024-02-30` a traceback."""
    issues = _issues(_write(tmp_path, "c.yaml", SURPRISES))
    assert [where for where, _ in issues] == [
        "vllm.engine_args.when",
        "vllm.engine_args.stamp",
        "vllm.engine_args.blob",
        "vllm.engine_args.things",
        "vllm.engine_args.bad_day",
        "optimizer.weight_decay",
    ]
    messages = dict(issues)
    assert "YAML date/timestamp" in messages["vllm.engine_args.when"]
    assert "line 4" in messages["vllm.engine_args.stamp"]
    assert "!!binary" in messages["vllm.engine_args.blob"] and "!!set" in messages["vllm.engine_args.things"]
    assert "base-60 (sexagesimal) number 3723" in messages["optimizer.weight_decay"]
    assert all("Fix: " in message for message in messages.values())


def test_quoted_dates_stay_exactly_as_written(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", "vllm:\n  engine_args:\n    kept: '2024-01-01T10:00:00Z'\n")
    assert load_config(path).vllm.engine_args["kept"] == "2024-01-01T10:00:00Z"


def test_a_date_key_and_base_60_overrides_are_refused(tmp_path: Path) -> None:
    issues = _issues(_write(tmp_path, "c.yaml", "vllm:\n  engine_args:\n    2024-01-01: x\n"))
    assert [where for where, _ in issues] == ["vllm.engine_args.2024-01-01"]
    assert "the key is a YAML date" in issues[0][1]
    issues = _issues(None, ["optimizer.weight_decay=1:2:3", "++vllm.engine_args={a: 2024-01-01}"])
    assert [where for where, _ in issues] == ["optimizer.weight_decay", "vllm.engine_args.a"]


def test_config_validate_on_an_impossible_date_is_a_message_not_a_traceback(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, "c.yaml", "vllm:\n  engine_args:\n    when: 2024-02-30\n")
    assert main(["config", "validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "vllm.engine_args.when" in err and "quote it" in err
