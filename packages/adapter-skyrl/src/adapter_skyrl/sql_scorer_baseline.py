"""SkyRL-SQL's own reward, served to `arctic-rl bench bird-scoring` as its baseline.

SkyRL 0.4.0 scores a text2sql trajectory in skyrl-gym's `SQLEnv` (`skyrl_gym/envs/sql/env.py`): the
final step calls `compute_score_single` (`skyrl_gym/envs/sql/utils.py`), which checks the
`<think>` / `<solution>` format, then executes the predicted SQL and the gold SQL, each on a new
connection in a new thread with a time limit (`conn.interrupt()`), and compares the result sets. The
generator runs environment steps on a pool of `generator.max_env_workers` threads (default 32). This
module runs exactly that function on such a pool, with the benchmark's time limit in place of the
hard-coded 30 s (`calculate_reward_single(..., timeout=...)`, the function `compute_score_single`
calls), so that both scorers give a runaway query the same time.

Run in SkyRL's environment: `python -m adapter_skyrl.sql_scorer_baseline`. One JSON request per
stdin line, `{"rollouts": [[completion, gold_sql, db_file], ...], "timeout_s": T, "threads": N}`;
one JSON line back, `{"seconds": wall time of the batch, "rewards": [1.0 | 0.0 | -1.0, ...]}`.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from skyrl_gym.envs.sql.utils import calculate_reward_single


def score(pool: ThreadPoolExecutor, rollouts: list[list[str]], timeout_s: float) -> tuple[float, list[float]]:
    start = time.perf_counter()
    rewards = list(pool.map(lambda r: calculate_reward_single(r[0], r[1], r[2], timeout=timeout_s), rollouts))
    return time.perf_counter() - start, [float(reward) for reward in rewards]


def main() -> int:
    pools: dict[int, ThreadPoolExecutor] = {}  # the generator's pool lives as long as the generator
    try:
        for line in sys.stdin:
            request = json.loads(line)
            threads = int(request["threads"])
            if threads not in pools:
                pools[threads] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="skyrl-gym-env-")
            seconds, rewards = score(pools[threads], request["rollouts"], float(request["timeout_s"]))
            sys.stdout.write(json.dumps({"seconds": seconds, "rewards": rewards}) + "\n")
            sys.stdout.flush()
    finally:
        for pool in pools.values():
            pool.shutdown(wait=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
