"""Config sources: YAML and TOML files, Hydra-style overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from arctic_rl_core.config import ConfigError, load_config
from arctic_rl_core.config.sources import apply_overrides, parse_override

YAML_TEXT = """\
backend:
  kind: reference
batch:
  prompts_per_step: 8
  rollouts_per_prompt: 2
optimizer:
  lr: 1e-5
  betas: [0.9, 0.95]
"""

TOML_TEXT = """\
[backend]
kind = "reference"

[batch]
prompts_per_step = 8
rollouts_per_prompt = 2

[optimizer]
lr = 1e-5
betas = [0.9, 0.95]
"""


@pytest.fixture
def yaml_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(YAML_TEXT)
    return path


def test_yaml_and_toml_give_the_same_config(yaml_file: Path, tmp_path: Path) -> None:
    toml_file = tmp_path / "run.toml"
    toml_file.write_text(TOML_TEXT)
    from_yaml = load_config(yaml_file)
    from_toml = load_config(toml_file)
    assert from_yaml == from_toml
    # YAML 1.1 would read 1e-5 as a string; it is a float here.
    assert from_yaml.optimizer.lr == 1e-5 and isinstance(from_yaml.optimizer.lr, float)
    assert from_yaml.optimizer.betas == (0.9, 0.95)
    assert from_yaml.shape.rows_per_step == 16


def test_no_file_means_schema_defaults() -> None:
    cfg = load_config(None, ["batch.epochs=3"])
    assert cfg.backend.kind == "reference" and cfg.batch.epochs == 3


def test_overrides_set_add_force_delete(yaml_file: Path) -> None:
    cfg = load_config(
        yaml_file,
        [
            "batch.prompts_per_step=4",  # set an existing key
            "+batch.epochs=2",  # add a key the file lacks
            "++optimizer.lr=3e-6",  # force-set
            "~optimizer.betas",  # remove: back to the schema default
            "optimizer.grad_clip=null",
            "vllm.engine_args={compilation_config:{cudagraph_mode:FULL},quantization:fp8}",
            "backend.reference.model_path=/data/models/tiny",
        ],
    )
    assert cfg.batch.prompts_per_step == 4 and cfg.batch.epochs == 2
    assert cfg.optimizer.lr == 3e-6
    assert cfg.optimizer.betas == (0.9, 0.999)
    assert cfg.optimizer.grad_clip is None
    assert cfg.vllm.engine_args == {"compilation_config": {"cudagraph_mode": "FULL"}, "quantization": "fp8"}
    assert cfg.backend.reference.model_path == "/data/models/tiny"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("a.b=1", 1),
        ("a.b=1.5", 1.5),
        ("a.b=1e-6", 1e-6),
        ("a.b=true", True),
        ("a.b=False", False),
        ("a.b=null", None),
        ("a.b=", ""),
        ("a.b=[1,2]", [1, 2]),
        ("a.b='007'", "007"),
        ("a.b=http://host:80/x", "http://host:80/x"),
        ("a.b={url:http://h:1/p,n:2}", {"url": "http://h:1/p", "n": 2}),
    ],
)
def test_override_values_parse_like_hydra(text: str, value: object) -> None:
    assert parse_override(text).value == value


def test_add_of_an_existing_key_is_an_error(yaml_file: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(yaml_file, ["+batch.prompts_per_step=4"])
    issue = caught.value.issues[0]
    assert (issue.path, issue.value) == ("batch.prompts_per_step", 8)
    assert "'++'" in issue.remedy
    assert caught.value.source == str(yaml_file)


def test_malformed_overrides_are_all_reported() -> None:
    with pytest.raises(ConfigError) as caught:
        apply_overrides(
            {"batch": {"epochs": 1}}, ["batch.epochs", "9x=1", "~batch.nothing", "batch.epochs.sub=1"]
        )
    problems = [(issue.path, issue.value) for issue in caught.value.issues]
    assert problems == [
        ("override", "batch.epochs"),
        ("override", "9x=1"),
        ("batch.nothing", None),
        ("batch.epochs", 1),
    ]


def test_unknown_override_key_gets_a_suggestion(yaml_file: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(yaml_file, ["batch.rollout_per_prompt=4"])
    assert caught.value.issues[0].remedy.startswith("did you mean 'batch.rollouts_per_prompt'")


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("bad.yaml", "batch: [1, 2", "cannot be parsed"),
        ("list.yaml", "- 1\n- 2\n", "not a mapping"),
        ("bad.toml", "batch = [", "cannot be parsed"),
        ("run.json", "{}", "unknown config format"),
    ],
)
def test_unreadable_files(tmp_path: Path, name: str, text: str, problem: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.issues[0].path == "file" and problem in caught.value.issues[0].problem


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.yaml")


def test_a_path_that_is_no_config_file_says_what_it_is(tmp_path: Path) -> None:
    """Before: a folder or /dev/null was "no such file"; a file of another format was "cannot be read:
    1 problem in the configuration: ... unknown config format. Fix: ... Fix: fix the value" (wrapped twice)."""
    (tmp_path / "shadow").write_text("root:x:0:0\n")
    for path, problem in [
        (tmp_path, "is a folder, not a file"),
        (Path("/dev/null"), "is not a regular file"),
        (tmp_path / "shadow", "unknown config format"),
    ]:
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert [(i.path, i.value, i.problem) for i in caught.value.issues] == [("file", str(path), problem)]


def test_empty_file_is_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n")
    assert load_config(path) == load_config(None)
