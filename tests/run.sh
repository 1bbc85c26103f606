#!/usr/bin/env bash
# The one test command: lock check, lint + format check + import rules, then every suite in its own environment.
#   bash tests/run.sh                 # everything: lint core skyrl verl parity wheels
#   bash tests/run.sh core skyrl      # a subset, in that order
# Environments are created under .venvs/ from uv.lock (--locked: a stale lock fails).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if python3 -m uv --version >/dev/null 2>&1; then
  uv=(python3 -m uv)
else
  echo "== installing uv (pip install uv)"
  python3 -m pip install --quiet uv || { echo "cannot install uv"; exit 1; }
  uv=(python3 -m uv)
fi
export UV_LINK_MODE=${UV_LINK_MODE:-hardlink}
# the uv binary, for tests that run uv themselves (tests/wheels)
ARCTIC_RL_TEST_UV=$(python3 -c 'import uv; print(uv.find_uv_bin())')
export ARCTIC_RL_TEST_UV

suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=(lint core skyrl verl parity wheels)
# tests/parity compares traces that the skyrl and verl suites write (under .test-results/parity/):
# in a run with all three, a missing trace fails instead of skipping.
if [[ " ${suites[*]} " == *" skyrl "* && " ${suites[*]} " == *" verl "* && " ${suites[*]} " == *" parity "* ]]; then
  export ARCTIC_RL_PARITY_REQUIRE_TRACES=1
fi

results_dir="$root/.test-results"
mkdir -p "$results_dir" && rm -f "$results_dir"/*.xml "$results_dir/.verl-synced"
# a full run writes fresh traces: never compare leftovers from an earlier run
[ "${ARCTIC_RL_PARITY_REQUIRE_TRACES:-}" = 1 ] && rm -rf "$results_dir/parity"
failed=()
start_all=$(date +%s)

# --compile-bytecode: the installed packages' .pyc files are written once, at install (~1 min per
# environment; a later sync compiles nothing new). Without them, where PYTHONDONTWRITEBYTECODE=1 is
# set (as on our CI machines) every new interpreter compiles what it imports: ~21 s of CPU to import
# ray + verl's trainer against ~8 s compiled, paid by every Ray worker, server and demo subprocess.
sync_env() {  # name, uv sync arguments...
  local name=$1; shift
  echo "== environment .venvs/$name: uv sync --locked --compile-bytecode $*"
  UV_PROJECT_ENVIRONMENT="$root/.venvs/$name" "${uv[@]}" sync --locked --quiet --compile-bytecode "$@"
}

run_suite() {  # suite, env, test dir [more pytest arguments: the files to run or --ignore=...]
  local suite=$1 env=$2 dir=$3; shift 3
  if [ -z "$(find "$dir" -name 'test_*.py' 2>/dev/null)" ]; then
    echo "== suite $suite: EMPTY at this stage (no test files in $dir)"
    return 0
  fi
  local targets=("$@"); [ ${#targets[@]} -eq 0 ] && targets=("$dir")
  echo "== suite $suite (${targets[*]}, environment .venvs/$env)"
  local t0=$(date +%s)
  # --durations: the slowest tests in every log, where the 30-minute budget is spent
  "$root/.venvs/$env/bin/python" -m pytest "${targets[@]}" -q -p no:cacheprovider --durations=15 \
    --junitxml="$results_dir/$suite.xml" -o junit_suite_name="$suite"
  local rc=$?
  echo "== suite $suite: exit $rc in $(( $(date +%s) - t0 )) s"
  if [ $rc -ne 0 ]; then failed+=("$suite"); fi
}

run_one() {  # suite: its environment, then its tests; appends to failed
  local suite=$1
  case "$suite" in
    lint)
      echo "== uv lock --check"
      "${uv[@]}" lock --check || failed+=("lock")
      sync_env core --extra core || { failed+=("sync-core"); return; }
      echo "== ruff check + ruff format --check"
      .venvs/core/bin/ruff check packages tests recipes || failed+=("ruff-check")
      .venvs/core/bin/ruff format --check packages tests recipes || failed+=("ruff-format")
      echo "== import rules (lint-imports; contracts in pyproject.toml [tool.importlinter])"
      PYTHONPATH="$root/packages/arctic-rl-core/src:$root/packages/arctic-rl-losses/src:$root/packages/arctic-rl-testbed/src:$root/packages/adapter-skyrl/src:$root/packages/adapter-verl/src" \
        .venvs/core/bin/lint-imports --no-cache || failed+=("import-rules")
      ;;
    core)
      sync_env core --extra core || { failed+=("sync-core"); return; }
      run_suite core core tests/core ;;
    skyrl)
      sync_env skyrl --package adapter-skyrl --extra cpu || { failed+=("sync-skyrl"); return; }
      run_suite skyrl skyrl tests/skyrl ;;
    verl)
      sync_env verl --package adapter-verl --extra cpu || { failed+=("sync-verl"); return; }
      run_suite verl verl tests/verl ;;
    verl-a)  # the verl suite less verl_lane_b (two lanes only)
      sync_env verl --package adapter-verl --extra cpu; echo $? > "$results_dir/.verl-synced"
      [ "$(cat "$results_dir/.verl-synced")" = 0 ] || { failed+=("sync-verl"); return; }
      run_suite verl verl tests/verl tests/verl "${verl_lane_b[@]/#/--ignore=}" ;;
    verl-b)  # verl_lane_b, in the other lane (two lanes only): waits for verl-a's environment sync
      while [ ! -s "$results_dir/.verl-synced" ]; do sleep 2; done
      [ "$(cat "$results_dir/.verl-synced")" = 0 ] || return
      run_suite verl-b verl tests/verl "${verl_lane_b[@]}" ;;
    parity)
      sync_env core --extra core || { failed+=("sync-core"); return; }
      run_suite parity core tests/parity ;;
    wheels)  # wheels built from the checkout, installed into stock SkyRL / verl outside the workspace
      sync_env core --extra core || { failed+=("sync-core"); return; }
      run_suite wheels core tests/wheels ;;
    *) echo "unknown suite '$suite' (lint, core, skyrl, verl, parity, wheels)"; exit 2 ;;
  esac
}

# Two lanes on a machine with two or more cores: verl's suite (mostly waiting on Ray, TransferQueue
# and verl's actors starting) runs beside core, skyrl and wheels; lint first, parity last (it reads the
# traces the skyrl and verl suites write). ARCTIC_RL_TEST_LANES=1 runs everything one after the other.
# verl's suite alone (~24 min on 2 cores) is longer than core, skyrl and wheels together (~12 min), so
# with all of them in the run, these verl files (each with its own Ray session and server, ~9 min
# together) run in the main lane after the others: the two lanes then end within a few minutes.
verl_lane_b=(tests/verl/test_verl_async_wire.py tests/verl/test_verl_cortex.py tests/verl/test_verl_tool_agent_wire.py)
lanes=${ARCTIC_RL_TEST_LANES:-$([ "$(nproc)" -ge 2 ] && echo 2 || echo 1)}
side=() main_lane=() last=()
split_verl=0
if [ "$lanes" -ge 2 ] && [[ " ${suites[*]} " == *" verl "* ]] && [[ " ${suites[*]} " =~ \ (core|skyrl|wheels)\  ]]; then
  split_verl=1
fi
for suite in "${suites[@]}"; do
  case "$suite" in
    verl) if [ $split_verl = 1 ]; then side+=(verl-a); else side+=("$suite"); fi ;;
    lint) run_one lint ;;
    parity) last+=("$suite") ;;
    *) main_lane+=("$suite") ;;
  esac
done
[ $split_verl = 1 ] && main_lane+=(verl-b)
if [ "$lanes" -ge 2 ] && [ ${#side[@]} -gt 0 ] && [ ${#main_lane[@]} -gt 0 ]; then
  side_log="$results_dir/lane-verl.log"
  echo "== lanes: [${side[*]}] beside [${main_lane[*]}] (the verl lane's output: $side_log, printed when it ends)"
  ( failed=(); for suite in "${side[@]}"; do run_one "$suite"; done
    printf '%s\n' "${failed[@]}" > "$side_log.failed" ) > "$side_log" 2>&1 &
  side_pid=$!
  trap 'kill -- "$side_pid" 2>/dev/null' EXIT
  for suite in "${main_lane[@]}"; do run_one "$suite"; done
  wait "$side_pid"
  trap - EXIT
  echo "== lane [${side[*]}] output"
  cat "$side_log"
  while read -r f; do [ -n "$f" ] && failed+=("$f"); done < "$side_log.failed"
else
  for suite in "${main_lane[@]}" "${side[@]}"; do run_one "$suite"; done
fi
for suite in "${last[@]}"; do run_one "$suite"; done

echo
echo "== summary ($(( $(date +%s) - start_all )) s)"
python3 - "$results_dir" <<'PY'
import pathlib, sys, xml.etree.ElementTree as ET
totals = {"passed": 0, "failed": 0, "skipped": 0}
for xml in sorted(pathlib.Path(sys.argv[1]).glob("*.xml")):
    for suite in ET.parse(xml).getroot().iter("testsuite"):
        tests, fail = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skip = int(suite.get("skipped", 0))
        print(f"   {xml.stem:8s} {tests - fail - skip} passed, {fail} failed, {skip} skipped, {float(suite.get('time', 0)):.0f} s")
        totals["passed"] += tests - fail - skip; totals["failed"] += fail; totals["skipped"] += skip
print(f"total: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
PY
if [ ${#failed[@]} -ne 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "OK"
