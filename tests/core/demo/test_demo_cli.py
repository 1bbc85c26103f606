"""`arctic-rl demo`: the subcommand's flags, the uv re-exec into the framework's locked environment,
options on new and resumed runs, and the light-import rule."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from arctic_rl_core.cli import main as cli_main
from arctic_rl_testbed.cli import demo as demo_command
from arctic_rl_testbed.demo import launch
from arctic_rl_testbed.demo.options import DemoOptions
from arctic_rl_testbed.demo.run import default_out, resolve_options, write_config


def _parse(argv: list[str]) -> argparse.Namespace:
    return cli_main.build_parser().parse_args(["demo", *argv])


def test_demo_is_a_subcommand_with_its_flags():
    args = _parse(["--task", "gsm8k", "--steps", "3", "--out", "runs/x", "--framework", "skyrl"])
    assert args.func is demo_command.run
    assert (args.task, args.steps, args.out, args.framework, args.resume) == (
        "gsm8k",
        3,
        "runs/x",
        "skyrl",
        None,
    )
    with pytest.raises(SystemExit):
        _parse(["--task", "spider"])


def test_uv_launch_runs_the_driver_in_the_frameworks_locked_cpu_environment(tmp_path):
    forwarded = launch.driver_args(
        framework="skyrl",
        task="bird",
        steps=2,
        out="rel/run",
        resume=None,
        extra={"--threads": 1, "--x": None},
    )
    assert forwarded == ["--framework", "skyrl", "--task", "bird", "--steps", "2", "--out",
                         str(Path("rel/run").resolve()), "--threads", "1"]  # fmt: skip
    command = launch.uv_launch("skyrl", forwarded, tmp_path, ["/bin/uv"])
    assert command.argv[:10] == [
        "/bin/uv", "run", "--locked", "--package", "adapter-skyrl", "--extra", "cpu", "python", "-m",
        "arctic_rl_testbed.demo.run",
    ]  # fmt: skip
    assert command.argv[10:] == forwarded
    assert command.env == {"UV_PROJECT_ENVIRONMENT": str(tmp_path / ".venvs" / "skyrl")}
    assert command.cwd == tmp_path
    assert launch.uv_launch("verl", [], tmp_path, ["uv"]).argv[4] == "adapter-verl"
    with pytest.raises(launch.LaunchError, match="framework='jax'"):
        launch.uv_launch("jax", [], tmp_path, ["uv"])


def test_the_uv_that_runs_us_is_preferred(monkeypatch, tmp_path):
    uv_binary = tmp_path / "uv"
    uv_binary.write_text("")
    monkeypatch.setenv("UV", str(uv_binary))
    monkeypatch.setattr(launch.shutil, "which", lambda name: "/elsewhere/uv")
    assert launch.find_uv() == [str(uv_binary)]
    monkeypatch.setenv("UV", str(tmp_path / "gone"))
    assert launch.find_uv() == ["/elsewhere/uv"]


def test_missing_uv_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("UV", raising=False)
    monkeypatch.setattr(launch.shutil, "which", lambda name: None)
    real_find_spec = launch.importlib.util.find_spec
    monkeypatch.setattr(
        launch.importlib.util, "find_spec", lambda n: None if n == "uv" else real_find_spec(n)
    )
    with pytest.raises(launch.LaunchError, match=r"uv is not installed.*pip install uv"):
        launch.find_uv()
    monkeypatch.setattr(launch.shutil, "which", lambda name: "/opt/uv")
    assert launch.find_uv() == ["/opt/uv"]


def test_repo_root_is_found_from_a_subdirectory():
    root = launch.find_repo_root(Path(__file__).parent)
    assert (root / "uv.lock").is_file() and (root / "packages" / "adapter-skyrl").is_dir()


def test_without_the_framework_the_command_reexecutes_with_uv(monkeypatch, tmp_path, capsys):
    launched: list[launch.Launch] = []
    monkeypatch.setattr(launch, "framework_importable", lambda framework: False)
    monkeypatch.setattr(launch, "find_uv", lambda: ["uv"])
    monkeypatch.setattr(launch, "run_launch", lambda command: launched.append(command) or 7)
    args = _parse(["--steps", "5", "--resume", str(tmp_path)])
    assert args.func(args) == 7  # the child's exit code
    (command,) = launched
    assert command.argv[:7] == ["uv", "run", "--locked", "--package", "adapter-skyrl", "--extra", "cpu"]
    assert command.argv[10:] == ["--framework", "skyrl", "--steps", "5", "--resume", str(tmp_path.resolve())]
    assert command.env["UV_PROJECT_ENVIRONMENT"].endswith(".venvs/skyrl")
    assert "running in the skyrl environment" in capsys.readouterr().err


def test_a_missing_uv_ends_with_a_message_not_a_traceback(monkeypatch, capsys):
    monkeypatch.setattr(launch, "framework_importable", lambda framework: False)

    def no_uv() -> list[str]:
        raise launch.LaunchError("uv is not installed: ...")

    monkeypatch.setattr(launch, "find_uv", no_uv)
    args = _parse([])
    assert args.func(args) == 2
    assert "arctic-rl demo: uv is not installed" in capsys.readouterr().err


def test_every_flag_given_to_arctic_rl_demo_reaches_the_driver(monkeypatch, tmp_path):
    """Each flag of the driver given to `arctic-rl demo` (a value other than its default) is in the
    driver's command line and parses there to the same value: none is dropped on the way (as
    `--max-turns` once was)."""
    from arctic_rl_testbed.demo.run import add_arguments

    given = {
        "--framework": "verl", "--task": "gsm8k", "--steps": "3", "--out": str(tmp_path / "o"),
        "--resume": str(tmp_path / "r"), "--seed": "7", "--warm-start-steps": "5", "--prompts-per-step": "2",
        "--rollouts-per-prompt": "3", "--lr": "0.002", "--eval-samples": "1", "--threads": "1",
        "--server": "http://127.0.0.1:9", "--backend": "cortex", "--colocate": None, "--max-turns": "3",
        "--trainer": "deepspeed", "--async": "1",
    }  # fmt: skip
    driver = argparse.ArgumentParser()
    flags = [action.option_strings[0] for action in add_arguments(driver)]
    assert sorted(flags) == sorted(given)  # a new flag must be added here, with a value to forward
    monkeypatch.setattr(launch, "framework_importable", lambda framework: False)
    monkeypatch.setattr(launch, "find_uv", lambda: ["uv"])
    launched = []
    monkeypatch.setattr(launch, "run_launch", lambda command: launched.append(command) or 0)
    args = _parse([x for flag, value in given.items() for x in (flag, value) if x is not None])
    assert args.func(args) == 0
    (command,) = launched
    received = driver.parse_args(command.argv[10:])
    expected = driver.parse_args([x for flag, value in given.items() for x in (flag, value) if x is not None])
    assert vars(received) == vars(expected) and received.max_turns == 3


def test_verl_runs_in_the_verl_environment(monkeypatch, capsys):
    monkeypatch.setattr(launch, "framework_importable", lambda framework: False)
    monkeypatch.setattr(launch, "find_uv", lambda: ["/usr/bin/uv"])
    launched = []
    monkeypatch.setattr(launch, "run_launch", lambda command: launched.append(command) or 0)
    args = _parse(["--framework", "verl", "--steps", "2", "--lr", "3e-5", "--eval-samples", "4"])
    assert args.func(args) == 0
    (command,) = launched
    assert command.argv[-4:] == ["--lr", "3e-05", "--eval-samples", "4"]  # forwarded to the driver
    assert command.argv[:9] == ["/usr/bin/uv", "run", "--locked", "--package", "adapter-verl", "--extra", "cpu",
                                "python", "-m"]  # fmt: skip
    assert command.argv[10:14] == ["--framework", "verl", "--steps", "2"]
    assert command.env["UV_PROJECT_ENVIRONMENT"].endswith(".venvs/verl")
    assert "running in the verl environment" in capsys.readouterr().err


def test_new_run_options_and_the_default_run_directory():
    options = resolve_options(_parse(["--steps", "3", "--warm-start-steps", "5", "--lr", "3e-5"]))
    assert options.steps == 3 and options.warm_start_steps == 5 and options.framework == "skyrl"
    assert options.lr == 3e-5 and options.eval_samples == 8
    assert Path(options.out).parent == Path("runs") and Path(options.out).name.startswith("demo-")
    from datetime import UTC, datetime

    assert default_out(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == str(Path("runs/demo-20260102-030405"))


def test_resume_reads_the_saved_config_and_only_steps_may_change(tmp_path):
    run_dir = tmp_path / "run"
    write_config(DemoOptions(out=str(run_dir), task="gsm8k", steps=2, prompts_per_step=2), {"note": 1})
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["demo"]["task"] == "gsm8k" and saved["note"] == 1
    resumed = resolve_options(_parse(["--resume", str(run_dir), "--steps", "6"]))
    assert (resumed.task, resumed.steps, resumed.prompts_per_step, resumed.out) == (
        "gsm8k",
        6,
        2,
        str(run_dir),
    )
    with pytest.raises(SystemExit, match="task='bird' differs from the run's task='gsm8k'"):
        resolve_options(_parse(["--resume", str(run_dir), "--task", "bird"]))
    with pytest.raises(SystemExit, match=r"no config\.yaml there"):
        resolve_options(_parse(["--resume", str(tmp_path / "nothing")]))
    with pytest.raises(SystemExit, match="a resumed run writes to its own directory"):
        resolve_options(_parse(["--resume", str(run_dir), "--out", str(tmp_path / "other")]))


def test_options_reject_bad_values_naming_the_field():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="rollouts_per_prompt"):
        DemoOptions(out="x", rollouts_per_prompt=1)
    with pytest.raises(ValidationError, match="warm_starts"):
        DemoOptions(out="x", warm_starts=3)


def test_bad_flag_values_are_one_message_naming_each_flag(tmp_path):
    """Before: pydantic's traceback (`--steps -1`, `--async 1 --colocate`, ...)."""
    with pytest.raises(SystemExit) as raised:
        resolve_options(_parse(["--steps", "0", "--lr", "-1", "--threads", "0"]))
    assert str(raised.value) == (
        "arctic-rl demo: --steps 0: must be greater than or equal to 1; --lr -1.0: must be greater than 0; "
        "--threads 0: must be greater than or equal to 1"
    )
    with pytest.raises(SystemExit, match=r"^arctic-rl demo: --async 1 with --colocate: .*drop --colocate"):
        resolve_options(_parse(["--async", "1", "--colocate"]))
    run_dir = tmp_path / "run"  # a resumed run's config.yaml edited by hand: its field is named
    write_config(DemoOptions(out=str(run_dir), steps=2))
    config = run_dir / "config.yaml"
    config.write_text(config.read_text().replace("prompts_per_step: 4", "prompts_per_step: -4"))
    with pytest.raises(SystemExit, match=rf"^arctic-rl demo: {config}: demo.prompts_per_step -4: must be"):
        resolve_options(_parse(["--resume", str(run_dir)]))


def test_the_command_and_the_light_demo_modules_import_no_heavy_package():
    code = (
        "import sys, arctic_rl_core.cli.main as m; m.build_parser(); "
        "import arctic_rl_testbed.demo.run, arctic_rl_testbed.demo.launch, arctic_rl_testbed.demo.tasks, "
        "arctic_rl_testbed.demo.warm_start, arctic_rl_testbed.demo.evaluation, arctic_rl_testbed.demo.drivers; "
        "print(sorted(n for n in ('torch', 'ray', 'skyrl', 'verl', 'transformers', 'matplotlib') if n in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
