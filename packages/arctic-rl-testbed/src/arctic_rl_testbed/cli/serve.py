"""`arctic-rl serve --reference`: the CPU reference engine behind the Arctic on-prem HTTP API, so the
real arctic-platform client (or any adapter) can drive it. Binds to loopback unless told otherwise;
a non-loopback address needs a bearer token. Files are read and written under --file-root only
(default: a temporary folder of this run, removed when the server stops)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from pydantic import ValidationError


def _port(text: str) -> int:
    """A TCP port, 0-65535 (was: the socket's OverflowError as a traceback)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number; give a port 0-65535 (0 picks a free one)"
        ) from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port; give one in 0-65535 (0 picks a free one)")
    return port


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="Serve the reference backend over the Arctic on-prem HTTP API.",
        description=(
            "Serve the reference backend (tiny CPU model) with the Arctic on-prem server's routes. Jobs name the "
            "model 'arctic-rl/reference-tiny' (or a local model directory). --port 0 picks a free port; the "
            "'listening on' line says which."
        ),
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="serve the reference backend (the only server this command runs)",
    )
    parser.add_argument(
        "--api",
        choices=("onprem", "cortex"),
        default="onprem",
        help="the REST surface: the Arctic on-prem server's (default), or 'cortex': a Snowflake Cortex "
        "(SnowAPI cortex-training) emulator for arctic-platform 0.1.4's CortexTransport, under "
        "/api/v2/databases/{database}/schemas/{schema}/cortex-training; every call needs the PAT from "
        "$ARCTIC_CORTEX_PAT",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="with --api cortex: serve https with a self-signed certificate written to "
        "<file-root>/cortex-tls/cert.pem, so arctic-platform 0.1.4's CortexTransport can use its host + PAT "
        "path unmodified (trust the certificate with REQUESTS_CA_BUNDLE and SSL_CERT_FILE)",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, loopback only)"
    )
    parser.add_argument(
        "--port", type=_port, default=8000, help="port to bind; 0 picks a free one (default: 8000)"
    )
    parser.add_argument(
        "--file-root",
        default=None,
        help=(
            "the only folder clients' checkpoint paths may name; relative paths resolve from it "
            "(default: a new temporary folder for this run, removed when the server stops; give a folder "
            "to keep what clients save)"
        ),
    )
    parser.add_argument(
        "--token",
        default=None,
        help=(
            "bearer token every request but /health must send (default: $ARCTIC_RL_SERVE_TOKEN); required "
            "with a non-loopback --host. arctic-platform 0.1.4's HTTP client cannot send one"
        ),
    )
    parser.add_argument(
        "--config", default=None, help="an arctic-rl config file (YAML/TOML) for the engine settings"
    )
    parser.add_argument(
        "--dp-size", type=int, default=None, help="simulated data-parallel ranks (overrides the config)"
    )
    parser.add_argument(
        "--num-threads", type=int, default=None, help="torch CPU threads of the server process"
    )
    parser.add_argument(
        "--colocate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="trainer and sampler share the devices, sleep/wake apply (the real server's --colocate); "
        "default: the engine settings' value (colocated)",
    )
    parser.add_argument(
        "--sampler-process",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the engine's sampler in its own forked process (weights in shared memory, generate calls "
        "over a pipe: the same tokens and log-probs as the thread) instead of a thread of the server process, "
        "so that generation and training overlapping (asynchronous GRPO, --no-colocate) do not share one "
        "GIL; default: a thread (the engine settings' value)",
    )
    parser.add_argument(
        "--trainer",
        choices=("torch", "deepspeed"),
        default=None,
        help="who trains: the engine's own torch trainer (default), or 'deepspeed': arctic-platform 0.1.4's own "
        "server code and DeepSpeedWorkers on the CPU, one process per rank, started by each training and "
        "log-prob job's /initialize with the client's ds_config (needs arctic-rl-testbed[deepspeed]); the "
        "sampler stays the engine's and receives the workers' weights at every sync",
    )
    parser.add_argument(
        "--profile",
        choices=("arctic-0.1.4", "strict"),
        default="arctic-0.1.4",
        help="answer as arctic-platform 0.1.4's server does where a stricter double would refuse (default), "
        "or 'strict': refuse unknown keys, ignored fields and what 0.1.4 mis-handles, with a 4xx naming them",
    )
    parser.add_argument(
        "--state-guard",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="refuse (409) what the real server would do silently wrong in the current sleep/wake state: "
        "sync into a sleeping sampler, generate while asleep (default: on; --no-state-guard behaves as 0.1.4)",
    )
    parser.add_argument(
        "--request-log",
        default=None,
        metavar="PATH",
        help="append one JSON line per request received (route, job id, control fields) to PATH",
    )
    parser.add_argument(
        "--parity-trace",
        default=None,
        metavar="PATH",
        help="record every forward / forward-backward payload as this server decodes it, every optimizer "
        "step and, when the training job is destroyed, the trainer weights' digest, as the parity trace "
        "PATH (one run; the parity suite compares two frameworks' traces)",
    )
    parser.add_argument(
        "--fixed-rollouts",
        default=None,
        metavar="FILE",
        help="answer /generate with the completions in FILE (JSON, format arctic-rl-fixed-rollouts/1: per "
        "prompt text, its completions' token ids, served in order of arrival) instead of sampling: a "
        "documented difference from the real server, so that two trainers see the same rollouts (parity)",
    )
    parser.add_argument(
        "overrides", nargs="*", default=[], help="config overrides, key=value (with --config or alone)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.reference:
        print(
            "arctic-rl serve: only --reference is implemented (the Arctic server itself is "
            "`python -m arctic_platform.common.http_server` on a GPU node)",
            file=sys.stderr,
        )
        return 2

    from arctic_rl_testbed.reference.file_root import FileRoot  # noqa: PLC0415 - CLI start-up
    from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME, serve  # noqa: PLC0415 - CLI start-up
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings  # noqa: PLC0415 - CLI start-up

    if args.config is not None or args.overrides:
        from arctic_rl_core.config import ConfigError, load_config  # noqa: PLC0415 - CLI start-up

        try:
            settings = ReferenceEngineSettings.from_config(load_config(args.config, args.overrides))
        except ConfigError as err:
            print(f"arctic-rl serve: {err}", file=sys.stderr)
            return 2
    else:
        settings = ReferenceEngineSettings()
    update = {}
    if args.dp_size is not None:
        update["dp_size"] = args.dp_size
    if args.num_threads is not None:
        update["num_threads"] = args.num_threads
    if args.colocate is not None:
        update["colocated"] = args.colocate
    if args.sampler_process is not None:
        update["sampler_process"] = args.sampler_process
    if args.trainer is not None:
        update["trainer"] = args.trainer

    try:
        settings = ReferenceEngineSettings.model_validate({**settings.model_dump(), **update})
    except ValidationError as err:  # e.g. --sampler-process with a GPU model
        problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors(include_url=False))
        print(f"arctic-rl serve: {problems}", file=sys.stderr)
        return 2
    if args.api == "cortex" and args.fixed_rollouts is not None:
        print(
            "arctic-rl serve: --fixed-rollouts applies to the on-prem API only, not --api cortex",
            file=sys.stderr,
        )
        return 2
    if args.api == "cortex" and settings.trainer == "deepspeed":
        print(
            "arctic-rl serve: --trainer deepspeed applies to the on-prem API only, not --api cortex",
            file=sys.stderr,
        )
        return 2
    if args.api == "cortex":
        return _run_cortex(args, settings)
    if args.tls:
        print("arctic-rl serve: --tls applies to --api cortex only", file=sys.stderr)
        return 2

    def ready(host: str, port: int) -> None:
        print(
            f"arctic-rl reference server ({REFERENCE_MODEL_NAME}) listening on http://{host}:{port}",
            flush=True,
        )

    from arctic_rl_testbed.reference.fidelity import Fidelity, ServerProfile  # noqa: PLC0415 - CLI start-up
    from arctic_rl_testbed.reference.http_auth import TOKEN_ENV, BindRefused, check_bind  # noqa: PLC0415 - CLI start-up

    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        check_bind(args.host, token)
    except BindRefused as err:
        print(f"arctic-rl serve: {err}", file=sys.stderr)
        return 2
    request_log = None if args.request_log is None else Path(args.request_log)
    parity_trace = None if args.parity_trace is None else Path(args.parity_trace)
    fidelity = Fidelity(profile=ServerProfile(args.profile), state_guard=args.state_guard)
    fixed_rollouts = None
    if args.fixed_rollouts is not None:
        from arctic_rl_testbed.reference.fixed_rollouts import FixedRollouts, FixedRolloutsError  # noqa: PLC0415 - CLI start-up

        try:
            fixed_rollouts = FixedRollouts.load(args.fixed_rollouts)
        except FixedRolloutsError as err:
            print(f"arctic-rl serve: {err}", file=sys.stderr)
            return 2
    files = FileRoot(args.file_root)
    print(f"arctic-rl serve: {files.describe()}", flush=True)
    return _serve_until_stopped(
        files,
        serve(
            settings,
            args.host,
            args.port,
            on_ready=ready,
            request_log=request_log,
            parity_trace=parity_trace,
            fixed_rollouts=fixed_rollouts,
            fidelity=fidelity,
            file_root=files,
            token=token,
        ),
    )


def _serve_until_stopped(files, server) -> int:
    """Run the `server` coroutine to its end; a temporary file root goes with it (the server removes it
    on a clean stop; this covers a failed start: port in use, ...)."""

    try:
        asyncio.run(server)
    finally:
        files.remove_temporary()
    return 0


def _run_cortex(args: argparse.Namespace, settings) -> int:
    """`--api cortex`: the Cortex emulator. The PAT comes from the environment only (a command-line
    value would show in the process list); it is never printed."""

    from arctic_rl_testbed.reference.cortex_server import ENDPOINT, PAT_ENV, PREFIX, serve  # noqa: PLC0415 - CLI start-up
    from arctic_rl_testbed.reference.fidelity import Fidelity, ServerProfile  # noqa: PLC0415 - CLI start-up
    from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME  # noqa: PLC0415 - CLI start-up

    refused = [
        flag
        for flag, given in (
            ("--token", args.token is not None),
            ("--request-log", args.request_log is not None),
            ("--colocate", bool(args.colocate)),
            ("--no-state-guard", not args.state_guard),
        )
        if given
    ]
    if refused:
        print(
            f"arctic-rl serve --api cortex: {', '.join(refused)} do not apply: the PAT comes from ${PAT_ENV}, "
            "and Cortex never colocates training and sampling",
            file=sys.stderr,
        )
        return 2
    token = os.environ.get(PAT_ENV, "")
    if not token:
        print(
            f"arctic-rl serve --api cortex: export {PAT_ENV} (the programmatic access token every call must "
            "send as 'Authorization: Bearer <PAT>')",
            file=sys.stderr,
        )
        return 2
    settings = settings.model_copy(update={"colocated": False})
    from arctic_rl_testbed.reference.file_root import FileRoot  # noqa: PLC0415 - CLI start-up

    files = FileRoot(args.file_root)
    print(f"arctic-rl Cortex emulator: {files.describe()}", flush=True)
    scheme, ssl_context = "http", None
    if args.tls:
        from arctic_rl_testbed.reference.cortex_tls import self_signed  # noqa: PLC0415 - CLI start-up

        tls = self_signed(files.root / "cortex-tls", args.host)
        scheme, ssl_context = "https", tls.server_context()
        print(
            f"arctic-rl Cortex emulator: TLS certificate {tls.cert} (clients: REQUESTS_CA_BUNDLE={tls.cert} "
            f"SSL_CERT_FILE={tls.cert}; CortexConfig host=HOST:PORT with the PAT)",
            flush=True,
        )

    def ready(host: str, port: int) -> None:
        prefix = PREFIX.replace("{endpoint}", ENDPOINT)
        print(
            f"arctic-rl Cortex emulator ({REFERENCE_MODEL_NAME}; routes under {prefix}) listening on "
            f"{scheme}://{host}:{port}",
            flush=True,
        )

    fidelity = Fidelity(profile=ServerProfile(args.profile))
    return _serve_until_stopped(
        files,
        serve(
            settings,
            args.host,
            args.port,
            token=token,
            file_root=files,
            on_ready=ready,
            fidelity=fidelity,
            ssl_context=ssl_context,
        ),
    )
