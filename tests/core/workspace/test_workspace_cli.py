"""The `arctic-rl` command: --version, --help, doctor."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version

import pytest
from arctic_rl_core.cli.main import main


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "arctic_rl_core.cli.main", *args],
        capture_output=True,
        text=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def test_version_matches_the_installed_distribution():
    result = _cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"arctic-rl {version('arctic-rl-core')}"


def test_help_lists_every_subcommand_with_a_description():
    result = _cli("--help")
    assert result.returncode == 0
    for command in ("doctor", "bench"):
        assert re.search(rf"^\s+{command}\s+\S", result.stdout, re.M), result.stdout


def test_no_subcommand_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage: arctic-rl" in capsys.readouterr().out


def test_unknown_subcommand_is_an_error():
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


def test_doctor_reports_each_stack_with_its_version_or_the_extra_to_install():
    result = _cli("doctor")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"Python {sys.version.split()[0]}" in out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") >= 4}
    assert version("torch") in rows["torch"]
    assert version("arctic-platform") in rows["arctic_platform"]
    # the core env has no framework and no GPU stack: each row names the extra to install
    assert "adapter-skyrl[cpu]" in rows["skyrl"]
    assert "adapter-verl[cpu]" in rows["verl"]
    assert "missing" in rows["vllm"] and "[gpu]" in rows["vllm"]
    assert re.search(r"^GPU: ", out, re.M)
