"""`tests/shared/launcher_recorder.py`: a launcher's bash expanded into the Python commands it would run,
none of them run (the recorder behind both adapters' recorded example launchers)."""

from __future__ import annotations

from launcher_recorder import FIXED_DATE, record

SCRIPT = r"""#!/usr/bin/env bash
set -xeuo pipefail
ulimit -n 65536
source /opt/vendor/set_env.sh
DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)}
hf download some/dataset --local-dir "$HOME/data/x"
mkdir -p logs
python3 examples/data_preprocess/prep.py --local_dir "$HOME/data/x"
ARGS=(data.train_files="['$HOME/data/x/train.parquet']" trainer.device=${DEVICE})
uv run --frozen --extra vllm python3 -X faulthandler -m verl.trainer.main_ppo "${ARGS[@]}" \
    trainer.experiment_name=run_$(date +%Y%m%d_%H%M) trainer.default_local_dir="$PWD/ckpt" "$@"
ray job submit --no-wait -- python -m recipe.thing.main key=value
uv run --isolated --extra fsdp --env-file .env.x --with pkg -m skyrl.train.entrypoints.main_base a.b=1
"""


def test_a_launcher_is_expanded_without_running_anything(tmp_path):
    script = tmp_path / "examples" / "run.sh"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    recording = record(script, tmp_path, args=("extra=1",))
    assert recording.returncode == 0, recording.stderr_tail
    assert recording.invocations[0] == ["examples/data_preprocess/prep.py", "--local_dir", "$HOME/data/x"]
    # the torch_npu probe failed: the GPU branch; paths as placeholders; uv / ray options skipped
    assert recording.module_calls() == [
        (
            "verl.trainer.main_ppo",
            [
                "data.train_files=['$HOME/data/x/train.parquet']",
                "trainer.device=gpu",
                f"trainer.experiment_name=run_{FIXED_DATE}",
                "trainer.default_local_dir=$REPO/ckpt",
                "extra=1",
            ],
        ),
        ("recipe.thing.main", ["key=value"]),
        ("skyrl.train.entrypoints.main_base", ["a.b=1"]),  # uv's own `-m`, after its options
    ]
    assert (tmp_path / "logs").is_dir()  # the launcher ran in its working directory
