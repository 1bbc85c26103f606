"""Scoring from many threads at once (verl's reward loop does), and import lightness."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from arctic_rl_core.envs.bird.dataset import load_split
from arctic_rl_core.envs.bird.executor import ExecutorSettings
from arctic_rl_core.envs.bird.reward import BirdScorer, ScoreRequest


def test_threads_share_one_scorer(bird_sample: Path) -> None:
    split = load_split(bird_sample, "dev")
    requests = []
    for q in split.questions:
        db_path = str(split.databases[q.db_id].db_path)
        requests.append(ScoreRequest(f"```sql\n{q.sql}\n```", q.sql, db_path))
        requests.append(ScoreRequest("```sql\nSELECT -1\n```", q.sql, db_path))
    # a fixed pool: on a loaded machine a query past straggler_after_s would start a warm spare
    with BirdScorer(ExecutorSettings(num_workers=2, max_workers=2, timeout_s=5)) as scorer:
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda r: scorer.score([r]).verdicts[0], requests * 4))
        stats = scorer.executor.worker_stats()
    assert [v.score for v in results] == [1.0, 0.1] * (len(requests) // 2) * 4
    assert len(stats) == 2  # every worker went back to the pool


def test_light_imports() -> None:
    code = (
        "import sys\n"
        "import arctic_rl_core.envs.bird, arctic_rl_core.envs.bird.reward, arctic_rl_core.envs.gsm8k\n"
        "import arctic_rl_core.envs.bird.evaluate, arctic_rl_core.envs.bird.preprocess\n"
        "import arctic_rl_core.cli.commands.bird, arctic_rl_testbed.bench.bird_scoring\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'ray', 'pyarrow', 'vllm', 'verl', 'skyrl') "
        "if m in sys.modules)\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
