"""Every recorded GRPO-family example launcher of verl (tests/verl/launchers/recorded.json: the Hydra
overrides each script passes, expanded by its own bash) through `python -m adapter_verl.main --dry-run`'s
check, with only the entry point switched, as a new user would run it: each must end as
tests/verl/launchers/expected.yaml says, a pass or a refusal of exactly the fields listed there (each
one something the Arctic stack cannot do, of a kind the package README lists with its reason). In
process, no Ray; each launcher is composed and checked once (`outcome` is cached: the figure test reuses
the per-launcher results), verl's default config once for all. The README's figure is the one computed
here."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent / "launchers"
README = Path(__file__).resolve().parents[2] / "packages" / "adapter-verl" / "README.md"
RECORDED = json.loads((HERE / "recorded.json").read_text())
EXPECTED = yaml.safe_load((HERE / "expected.yaml").read_text())
LAUNCHERS = sorted(k for k, v in RECORDED["launchers"].items() if v.get("entry"))
_FIELD = re.compile(r"^[\w.@-]+")


def argv_of(key: str, home: Path) -> list[str]:
    return [
        a.replace("$HOME", str(home)).replace("$REPO", str(home / "repo"))
        for a in RECORDED["launchers"][key]["overrides"]
    ]


@cache
def outcome(key: str, home: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the fields of the problems, the problems) `--dry-run` reports for launcher `key`."""
    from adapter_verl.main import check

    result = check(argv_of(key, Path(home)))
    fields = tuple(sorted({_FIELD.match(p).group(0) for p in result.problems}))
    return fields, tuple(result.problems)


def expected_fields(key: str) -> tuple[str, ...]:
    """What the dry run reports today: the expected refusals, plus the known gaps (problems that are
    not an Arctic limit: the launcher then does not count as ending as it should)."""
    spec = EXPECTED["launchers"][key]
    fields = set() if spec == "pass" else set(spec)
    return tuple(sorted(fields | set(EXPECTED["gaps"].get(key, {}))))


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("home"))


def test_every_recorded_launcher_has_an_expected_outcome_of_a_listed_kind():
    assert set(LAUNCHERS) == set(EXPECTED["launchers"])
    kinds = set(EXPECTED["kinds"])
    for key, spec in EXPECTED["launchers"].items():
        assert spec == "pass" or (isinstance(spec, dict) and set(spec.values()) <= kinds), (key, spec)
    assert set(EXPECTED["gaps"]) <= set(LAUNCHERS)


@pytest.mark.parametrize("key", LAUNCHERS)
def test_the_launcher_ends_as_it_should(key, home, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing is downloaded by a dry run
    fields, problems = outcome(key, home)
    assert fields == expected_fields(key), "\n".join(problems)
    for (
        problem
    ) in problems:  # 'field=value: why. Fix: ...' (the table's rows) or 'field=value: why: fix' (its rules)
        assert "Fix: " in problem or problem.count(": ") >= 2, problem


def test_the_readme_states_the_figure(home, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    correct = [
        key
        for key in LAUNCHERS
        if key not in EXPECTED["gaps"] and outcome(key, home)[0] == expected_fields(key)
    ]
    passes = sum(EXPECTED["launchers"][key] == "pass" for key in correct)
    assert len(correct) / len(LAUNCHERS) >= 0.9
    text = " ".join(README.read_text().split())
    assert (
        f"{len(correct)} of the {len(LAUNCHERS)} recorded launchers end as they should: {passes} pass, "
        f"{len(correct) - passes} are refused"
    ) in text
