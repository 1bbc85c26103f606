"""`arctic-rl demo --server URL --colocate`: parsed, forwarded through the uv re-exec, checked, and
turned into the GRPO phase's core backend settings (the runs themselves: the adapter suites'
`test_demo_drives_an_arctic_server_through_the_real_client`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from arctic_rl_core.cli import main as cli_main
from arctic_rl_core.config import ArcticRLConfig
from arctic_rl_testbed.demo import launch
from arctic_rl_testbed.demo.backend import grpo_backend_settings
from arctic_rl_testbed.demo.options import DemoOptions
from arctic_rl_testbed.demo.run import resolve_options
from pydantic import ValidationError


def _options(argv: list[str], tmp_path: Path) -> DemoOptions:
    return resolve_options(cli_main.build_parser().parse_args(["demo", "--out", str(tmp_path), *argv]))


def test_the_flags_reach_the_driver_and_its_options(tmp_path):
    args = cli_main.build_parser().parse_args(["demo", "--server", "http://127.0.0.1:8123", "--colocate"])
    forwarded = launch.driver_args(
        framework="verl",
        task=None,
        steps=2,
        out=None,
        resume=None,
        extra={"--server": args.server, "--colocate": args.colocate},
    )
    assert forwarded == [
        "--framework",
        "verl",
        "--steps",
        "2",
        "--server",
        "http://127.0.0.1:8123",
        "--colocate",
    ]
    options = _options(["--server", "http://127.0.0.1:8123", "--colocate"], tmp_path)
    assert (options.server, options.colocate) == ("http://127.0.0.1:8123", True)
    default = _options([], tmp_path)
    assert (default.server, default.colocate) == (None, False)  # the in-process engine, not colocated
    assert "--colocate" not in launch.driver_args(
        framework="skyrl", task=None, steps=None, out=None, resume=None, extra={"--colocate": None}
    )


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "https://host:1", "http://host", "http://host:8000/api"])
def test_a_server_url_that_is_not_http_host_port_is_refused_naming_it(url, tmp_path):
    with pytest.raises(ValidationError, match=r"expected http://HOST:PORT"):
        DemoOptions(out=str(tmp_path), server=url)


def test_the_grpo_backend_settings_are_valid_core_settings(tmp_path):
    model = tmp_path / "warm_start" / "hf"
    local = grpo_backend_settings(DemoOptions(out=str(tmp_path), colocate=True), model_path=model)
    assert local == {
        "placement.colocate": True,
        "backend.kind": "reference",
        "backend.reference.model_path": str(model.resolve()),
    }
    remote = grpo_backend_settings(
        DemoOptions(out=str(tmp_path), server="http://10.0.0.5:8000", kl_loss_coef=0.1), model_path=model
    )
    assert remote == {
        "placement.colocate": False,
        "backend.kind": "http",
        "backend.host": "10.0.0.5",
        "backend.port": 8000,
        "checkpoint.path": str((tmp_path / "server_checkpoints").resolve()),
        "placement.log_prob_gpus": 1,  # the KL penalty's reference log-probs
    }
    data: dict = {"model": {"name": str(model)}, "loss": {"use_kl_loss": True, "kl_loss_coef": 0.1}}
    for key, value in remote.items():
        *groups, leaf = key.split(".")
        node = data
        for group in groups:
            node = node.setdefault(group, {})
        node[leaf] = value
    cfg = ArcticRLConfig.from_dict(data)
    assert (cfg.backend.kind, cfg.backend.host, cfg.backend.port, cfg.is_arctic) == (
        "http",
        "10.0.0.5",
        8000,
        True,
    )
