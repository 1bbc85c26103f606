"""Expand a framework's example launcher (a bash script) into the commands it runs, without running
them: the script runs under bash with fake `python3` / `python` / `uv` / `ray` / `date` on PATH, and
every Python invocation's argv is written down instead of executed.

- `python -m <module> args...` and `python <file.py> args...` are recorded and succeed;
- `python -c ...` fails (exit 1), so probes such as `python3 -c 'import torch_npu'` take the
  launcher's GPU branch, as on a machine without the probed package;
- `uv run ... python3 ...` and `ray job submit ... -- python3 ...` run the command after their own
  options (so it is recorded); `date` prints a fixed time (experiment names stay reproducible);
- `source` of a file that does not exist (vendor toolkits, e.g. /usr/local/Ascend/.../set_env.sh)
  is skipped, `ulimit` always succeeds, and the download and copy tools (`hf`, `huggingface-cli`,
  `wget`, `cp`) do nothing (a launcher's data and model preparation is not the training command).

The paths a launcher derives from `$HOME` and its working directory are written back as the
placeholders `$HOME` and `$REPO` (`placeholders`), so a recording holds no machine's paths.
Used by the launcher tests of both adapters (`tests/verl/launchers/record.py`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

HOME = "/launcher-home"  # the $HOME a launcher sees while recorded
FIXED_DATE = "20260101"  # what `date` prints for any format (a fixed, valid-looking stamp)

_FAKE_PYTHON = r"""#!/usr/bin/env bash
if [ "${1:-}" = "-c" ]; then exit 1; fi
"$LAUNCHER_RECORDER_PY" -c 'import json, os, sys
with open(os.environ["LAUNCHER_RECORD_FILE"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")' "$@"
"""

_FAKE_UV = r"""#!/usr/bin/env bash
# uv run [options] python3 args...: run the python command (recorded); uv run [options] -m module
# args... (uv's own python, SkyRL's launchers): the same as python3 -m module args...
while [ $# -gt 0 ]; do
  case "$1" in
    python|python3) exec "$@";;
    -m) exec python3 "$@";;
    --extra|--with|--env-file|--directory|--project|--python|--group|--index|--package|--with-requirements|-p) shift;;
  esac
  shift
done
exit 0
"""

_FAKE_RAY = r"""#!/usr/bin/env bash
# ray job submit [options] -- command...: run the command (recorded); anything else: nothing
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; exec "$@"; fi
  shift
done
exit 0
"""

_FAKE_DATE = f"""#!/usr/bin/env bash
echo {FIXED_DATE}
"""
_NOTHING = "#!/usr/bin/env bash\nexit 0\n"

# a function shadows the `source` builtin in the launcher's bash (exported through the environment)
_SOURCE_FUNCTION = '() {  if [ -e "$1" ]; then builtin source "$@"; fi\n}'
_ULIMIT_FUNCTION = "() {  return 0\n}"


@dataclass(frozen=True)
class Recording:
    """One launcher's Python invocations (argv after the interpreter), its exit status and stderr tail."""

    invocations: list[list[str]]
    returncode: int
    stderr_tail: str

    def module_calls(self) -> list[tuple[str, list[str]]]:
        """Every `python [interpreter options] -m <module> args...` as (module, args), in order."""
        calls = []
        for argv in self.invocations:
            if "-m" in argv[:-1]:
                at = argv.index("-m")
                calls.append((argv[at + 1], argv[at + 2 :]))
        return calls


def placeholders(value: str, repo: str) -> str:
    """`value` with the recording's home and working directory written as `$HOME` / `$REPO`."""
    return value.replace(repo, "$REPO").replace(HOME, "$HOME")


def record(
    script: Path, repo: Path, *, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> Recording:
    """Run `script` (a path inside `repo`, which is its working directory) with the fakes on PATH.
    `repo` should be a scratch copy: launchers create folders in their working directory."""
    with tempfile.TemporaryDirectory(prefix="launcher-recorder-") as scratch:
        bin_dir = Path(scratch) / "bin"
        bin_dir.mkdir()
        for name, text in (
            ("python3", _FAKE_PYTHON),
            ("python", _FAKE_PYTHON),
            ("uv", _FAKE_UV),
            ("ray", _FAKE_RAY),
            ("date", _FAKE_DATE),
            ("hf", _NOTHING),
            ("huggingface-cli", _NOTHING),
            ("wget", _NOTHING),
            ("cp", _NOTHING),
        ):
            path = bin_dir / name
            path.write_text(text)
            path.chmod(0o755)
        record_file = Path(scratch) / "calls.jsonl"
        record_file.touch()
        base = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "HOME": HOME,
            "LAUNCHER_RECORD_FILE": str(record_file),
            "LAUNCHER_RECORDER_PY": shutil.which("python3") or "/usr/bin/python3",
            "BASH_FUNC_source%%": _SOURCE_FUNCTION,
            "BASH_FUNC_ulimit%%": _ULIMIT_FUNCTION,
            "LANG": "C.UTF-8",
        }
        proc = subprocess.run(
            ["bash", str(script), *args],
            cwd=repo,
            env={**base, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
        )
        invocations = [json.loads(line) for line in record_file.read_text().splitlines() if line]
    return Recording(
        invocations=[[placeholders(a, str(repo)) for a in argv] for argv in invocations],
        returncode=proc.returncode,
        stderr_tail=proc.stderr[-2000:],
    )


def git_tree(git_dir: Path, commit: str, paths: list[str], into: Path) -> Path:
    """Check `paths` of `commit` out of the bare repository `git_dir` into `into` (a scratch working
    directory for `record`)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", commit, *paths], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "x", "-C", str(into)], input=archive, check=True)
    return into
