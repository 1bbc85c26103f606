"""BIRD reward on a GRPO-shaped batch: `BirdScorer.score` against SkyRL-SQL's own scorer.

The batch: `--prompts` questions x `--rollouts` responses on a generated sales database (a few
ms per query, like mid-sized BIRD databases). Each prompt's responses are drawn, with a fixed
seed, from the gold query, an equivalent rewrite, two wrong queries, a failing query and a
response without SQL (weights 5:3:3:2:2:1), each laid out in one of four ways (one line, several
lines, a trailing semicolon, a leading comment): the duplicate rate of a policy that has
started to converge, with the textual noise of sampling. The hostile batch is the same batch with
`--runaways` more rollouts whose SQL never ends (distinct recursive queries), both scorers given
the same time limit (`--hostile-timeout`).

Baseline: SkyRL-SQL's scorer, the reward skyrl-gym's text2sql environment computes
(`adapter_skyrl.sql_scorer_baseline`: `calculate_reward_single` per rollout, the predicted and the
gold SQL each on a new connection in a new thread, on a pool of 32 threads as SkyRL's generator runs
environment steps), in SkyRL's environment (`--skyrl-python`, default `.venvs/skyrl` of the
repository), each rollout written in SkyRL-SQL's `<think>...</think><solution>SQL</solution>`
format with the statement our extraction finds in our response. Ours: `BirdScorer.score` (each distinct (database, SQL) once, golds once, on the worker
pool; a cold gold cache every repeat), each rollout in our `<answer>```sql ...```</answer>` format,
the same SQL. The verdicts must agree (SkyRL-SQL's reward 1 exactly where ours is correct) or the
run fails; a rollout whose verdicts differ (on a loaded machine a query can pass a short limit on
either side) is rescored alone by both with the GRPO batch's limit, and they must agree then. A third comparison puts the hostile batch against its physical limit: with equal time
limits it cannot end before its runaway queries' limits, spread over the most workers the scorer
runs at once, nor before the rest of its work (the GRPO batch alone, as ours scored it).

Both scorers run queries in parallel (worker processes; threads): the ratios need two free cores,
checked before and after (`bench.conditions`); without them the command says so instead of a ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from arctic_rl_testbed.bench.conditions import ParallelConditions
from arctic_rl_testbed.bench.report import BenchResult, Comparison

NAME = "bird-scoring"
HELP = (
    "BIRD reward on a GRPO batch and a hostile batch (runaway queries): score_batch vs SkyRL-SQL's own scorer "
    "(skyrl-gym text2sql, 32 threads), and the hostile batch vs its physical limit."
)

_CITIES = [f"City{i:02d}" for i in range(20)]
_SEGMENTS = ["consumer", "corporate", "home_office", "small_business"]
_STATUSES = ["delivered", "shipped", "returned", "cancelled"]
_WEIGHTS = (5, 3, 3, 2, 2, 1)  # gold, rewrite, wrong A, wrong B, failing, no SQL
SKYRL_ENV_WORKERS = 32  # SkyRL 0.4.0 generator.max_env_workers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", type=int, default=16, help="prompts per batch (default 16)")
    parser.add_argument("--rollouts", type=int, default=16, help="responses per prompt (default 16)")
    parser.add_argument(
        "--workers", type=int, default=2, help="persistent worker processes of ours (default 2)"
    )
    parser.add_argument("--orders", type=int, default=60_000, help="rows in the orders table (default 60000)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="per-query limit of the GRPO batch, both scorers (SkyRL's 30 s)",
    )
    parser.add_argument(
        "--runaways", type=int, default=4, help="runaway rollouts in the hostile batch (default 4)"
    )
    parser.add_argument(
        "--hostile-timeout",
        type=float,
        default=2.0,
        help="per-query limit of the hostile batch, both scorers (2 s)",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed repeats; the fastest counts (default 3)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the database and the responses")
    parser.add_argument(
        "--skyrl-python",
        default=None,
        help="the interpreter of a SkyRL 0.4.0 environment with adapter-skyrl (default: this one if it has "
        "skyrl-gym, else the repository's .venvs/skyrl)",
    )


def _build_database(path: Path, orders: int, rng: random.Random) -> None:
    connection = sqlite3.connect(path)
    try:
        connection.execute(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT, segment TEXT, signup_year INTEGER)"
        )
        connection.execute(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), "
            "amount REAL, status TEXT, year INTEGER, month INTEGER)"
        )
        customers = max(100, orders // 15)
        connection.executemany(
            "INSERT INTO customers VALUES (?, ?, ?, ?, ?)",
            [
                (i, f"Customer {i}", rng.choice(_CITIES), rng.choice(_SEGMENTS), rng.randint(2015, 2023))
                for i in range(1, customers + 1)
            ],
        )
        connection.executemany(
            "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    i,
                    rng.randint(1, customers),
                    round(rng.uniform(5, 500), 2),
                    rng.choice(_STATUSES),
                    rng.randint(2019, 2024),
                    rng.randint(1, 12),
                )
                for i in range(1, orders + 1)
            ],
        )
        connection.commit()
    finally:
        connection.close()


def _question_sqls(k: int, rng: random.Random) -> tuple[str, str, str, str, str]:
    """(gold, equivalent rewrite, wrong A, wrong B, failing) for prompt k."""
    status, year = rng.choice(_STATUSES), rng.randint(2019, 2024)
    city, segment = rng.choice(_CITIES), rng.choice(_SEGMENTS)
    join = "FROM orders AS T1 INNER JOIN customers AS T2 ON T1.customer_id = T2.id"
    templates = [
        (
            f"SELECT SUM(amount) FROM orders WHERE status = '{status}' AND year = {year}",
            f"SELECT SUM(T1.amount) FROM orders AS T1 WHERE T1.year = {year} AND T1.status = '{status}'",
            f"SELECT SUM(amount) FROM orders WHERE status = '{status}'",
            f"SELECT COUNT(amount) FROM orders WHERE status = '{status}' AND year = {year}",
            f"SELECT SUM(amount) FROM orders WHERE state = '{status}' AND year = {year}",
        ),
        (
            f"SELECT COUNT(DISTINCT T2.id) {join} WHERE T2.city = '{city}' AND T1.status = '{status}'",
            f"SELECT COUNT(*) FROM customers WHERE city = '{city}' AND id IN "
            f"(SELECT customer_id FROM orders WHERE status = '{status}')",
            f"SELECT COUNT(T2.id) {join} WHERE T2.city = '{city}' AND T1.status = '{status}'",
            f"SELECT COUNT(DISTINCT T2.id) {join} WHERE T2.city = '{city}'",
            f"SELECT COUNT(DISTINCT T2.id) {join} WHERE T2.town = '{city}'",
        ),
        (
            f"SELECT T2.name {join} WHERE T2.segment = '{segment}' AND T1.year = {year} "
            "GROUP BY T2.id ORDER BY SUM(T1.amount) DESC LIMIT 5",
            f"SELECT name FROM customers AS c JOIN (SELECT customer_id, SUM(amount) AS total FROM orders "
            f"WHERE year = {year} GROUP BY customer_id) AS s ON s.customer_id = c.id "
            f"WHERE c.segment = '{segment}' ORDER BY s.total DESC LIMIT 5",
            f"SELECT T2.name {join} WHERE T2.segment = '{segment}' GROUP BY T2.id ORDER BY SUM(T1.amount) DESC LIMIT 5",
            f"SELECT T2.name {join} WHERE T2.segment = '{segment}' AND T1.year = {year} "
            "GROUP BY T2.id ORDER BY COUNT(T1.id) DESC LIMIT 5",
            f"SELECT T2.name {join} WHERE T2.segment = '{segment}' AND T1.year = {year} "
            "GROUP BY T2.id ORDER BY SUM(T1.amount) DESC LIMIT 5;\nDROP TABLE orders",
        ),
        (
            f"SELECT T2.city, AVG(T1.amount) {join} WHERE T1.year = {year} GROUP BY T2.city",
            f"SELECT T2.city, SUM(T1.amount) / COUNT(T1.amount) {join} WHERE T1.year = {year} GROUP BY T2.city",
            f"SELECT T2.city, AVG(T1.amount) {join} GROUP BY T2.city",
            f"SELECT T2.city, MAX(T1.amount) {join} WHERE T1.year = {year} GROUP BY T2.city",
            f"SELECT T2.city, AVG(T1.amount) {join} WHERE T1.year = {year} GROUP T2.city",
        ),
    ]
    return templates[k % len(templates)]


def _layout(sql: str, rng: random.Random) -> str:
    """How a model happens to lay out the same query: one line, several lines, a trailing
    semicolon, a comment. Only the first two and the comment share an execution key."""
    style = rng.choices(range(4), weights=(4, 3, 2, 1))[0]
    if style == 1:
        for clause in (" FROM ", " WHERE ", " GROUP BY ", " ORDER BY ", " INNER JOIN "):
            sql = sql.replace(clause, "\n" + clause.strip() + " ")
    elif style == 2:
        sql += ";"
    elif style == 3:
        sql = "-- final query\n" + sql
    return sql


def _responses(sql: str | None, formatted: bool) -> tuple[str, str]:
    """(ours, SkyRL-SQL's): our response, and SkyRL-SQL's with the SQL our extraction takes from it
    in SkyRL-SQL's answer format (the same statement for both to judge)."""
    from arctic_rl_core.envs.bird.sql_extract import extract_sql  # noqa: PLC0415 - CLI start-up

    think = "<think>Use the orders table.</think>\n"
    if sql is None:
        ours = think + "I cannot answer."
    elif formatted:
        ours = f"{think}<answer>\n```sql\n{sql}\n```\n</answer>"
    else:
        ours = f"The query is: {sql}"
    extracted = extract_sql(ours).sql
    return ours, think + ("I cannot answer." if extracted is None else f"<solution>{extracted}</solution>")


@dataclass(frozen=True)
class Batch:
    requests: list  # ScoreRequest, ours
    skyrl: list[list[str]]  # [completion, gold_sql, db_file], SkyRL-SQL's


def _build_batch(db_path: str, prompts: int, rollouts: int, rng: random.Random) -> Batch:
    from arctic_rl_core.envs.bird.reward import ScoreRequest  # noqa: PLC0415 - CLI start-up

    requests, skyrl = [], []
    for k in range(prompts):
        sqls = _question_sqls(k, rng)
        gold = sqls[0]
        choices = rng.choices(range(6), weights=_WEIGHTS, k=rollouts)
        for choice in choices:
            sql = None if choice == 5 else _layout(sqls[choice], rng)
            ours, theirs = _responses(sql, rng.random() < 0.85 or sql is None)
            requests.append(ScoreRequest(solution_str=ours, gold_sql=gold, db_path=db_path))
            skyrl.append([theirs, gold, db_path])
    return Batch(requests, skyrl)


def _runaway(k: int) -> str:
    """A recursive query with no end (distinct per k, so that each runs: a model's missing stop)."""
    return f"WITH RECURSIVE r(x) AS (SELECT {k + 1} UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


def _hostile(batch: Batch, db_path: str, runaways: int, rng: random.Random) -> Batch:
    """The batch with `runaways` rollouts whose SQL never ends, at random places."""
    from arctic_rl_core.envs.bird.reward import ScoreRequest  # noqa: PLC0415 - CLI start-up

    requests, skyrl = list(batch.requests), list(batch.skyrl)
    for k in range(runaways):
        at = rng.randrange(len(requests) + 1)
        gold = batch.requests[at % len(batch.requests)].gold_sql
        ours, theirs = _responses(_runaway(k), True)
        requests.insert(at, ScoreRequest(solution_str=ours, gold_sql=gold, db_path=db_path))
        skyrl.insert(at, [theirs, gold, db_path])
    return Batch(requests, skyrl)


def skyrl_python(given: str | None) -> str | None:
    """The interpreter of SkyRL's environment (with adapter-skyrl), or None when there is none."""

    if given:
        return given
    if importlib.util.find_spec("skyrl_gym") and importlib.util.find_spec("adapter_skyrl"):
        return sys.executable
    try:
        from arctic_rl_testbed.demo.launch import LaunchError, find_repo_root  # noqa: PLC0415 - CLI start-up

        candidate = find_repo_root() / ".venvs" / "skyrl" / "bin" / "python"
    except LaunchError:
        return None
    return str(candidate) if candidate.is_file() else None


class SkyRLScorer:
    """SkyRL-SQL's scorer in SkyRL's environment (`adapter_skyrl.sql_scorer_baseline`), one process
    kept for the whole run so its thread pool stays warm as in SkyRL's generator."""

    def __init__(self, python: str) -> None:
        self.process = subprocess.Popen(
            [python, "-m", "adapter_skyrl.sql_scorer_baseline"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def score(self, rollouts: list[list[str]], timeout_s: float) -> tuple[float, list[float]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        request = {"rollouts": rollouts, "timeout_s": timeout_s, "threads": SKYRL_ENV_WORKERS}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(
                f"SkyRL-SQL's scorer exited (code {self.process.wait()}); see its stderr above"
            )
        reply = json.loads(line)
        return reply["seconds"], reply["rewards"]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)


def _disagreements(verdicts: list, rewards: list[float]) -> list[int]:
    """Rollouts where SkyRL-SQL's reward is not 1 exactly where our verdict is correct (its -1 / 0 are
    our 0.1 / 0 tiers, in another format; what both judge is the execution match)."""
    return [i for i, (v, r) in enumerate(zip(verdicts, rewards, strict=True)) if v.correct != (r == 1.0)]


def _recheck(batch: Batch, first: dict, label: str, executor, skyrl: SkyRLScorer, timeout_s: float) -> str:
    """Rescore the rollouts whose verdicts differed, alone, with the GRPO batch's limit: a query that
    ran past a short limit on a loaded machine (on either side) then finishes, and both must agree.
    Returns the note saying on which side the verdicts changed; exits when they still differ."""
    from arctic_rl_core.envs.bird.reward import BirdScorer, GoldCache  # noqa: PLC0415 - CLI start-up

    indices = sorted(first)  # the rollouts that differed, each with our verdict when it first did
    requests = [batch.requests[i] for i in indices]
    verdicts = BirdScorer(executor=executor, gold_cache=GoldCache()).score(requests).verdicts
    _, rewards = skyrl.score([batch.skyrl[i] for i in indices], timeout_s)
    still = [indices[k] for k in _disagreements(verdicts, rewards)]
    ours_changed = sum(1 for k, i in enumerate(indices) if verdicts[k].correct != first[i].correct)
    if still:
        raise SystemExit(
            f"arctic-rl bench {NAME}: {len(still)} {label} verdict(s) differ from SkyRL-SQL's "
            f"(rollouts {still[:10]})"
        )
    return (
        f"{label}: {len(indices)} verdict(s) differed under the short limit on this machine and agree when "
        f"rescored alone with a {timeout_s:g} s limit (rollouts {indices[:10]}: a query past the limit under load; "
        f"ours had changed {ours_changed}, SkyRL-SQL's {len(indices) - ours_changed})"
    )


def _timed_ours(executor, requests):
    from arctic_rl_core.envs.bird.reward import BirdScorer, GoldCache  # noqa: PLC0415 - CLI start-up

    scorer = BirdScorer(executor=executor, gold_cache=GoldCache())  # a cold gold cache: SkyRL has none
    start = time.perf_counter()
    batch = scorer.score(requests)
    return time.perf_counter() - start, batch, scorer


def hostile_timeline(events: list, straggler_after_s: float) -> str:
    """Where one hostile batch's time went, from its executor's schedule (`ScheduleEvent`s), in seconds
    from its start: when each query that timed out (the runaways) was sent, when the last other query
    ended, the end, and the straggler threshold then. Meaningful under load, unlike a wall-clock ratio:
    the batch ends at its last runaway's send + its limit, so the sends are what scheduling decides."""
    start = events[0].at
    sent = {e.task: e.at - start for e in events if e.kind == "sent"}
    results = [e for e in events if e.kind in ("result", "killed")]
    runaways = sorted(sent[e.task] for e in results if e.kind == "killed" or e.detail == "timeout")
    others = [e.at - start for e in results if e.kind == "result" and e.detail != "timeout"]
    spawned = sum(1 for e in events if e.kind == "spawned" and e.at >= start)
    return (
        f"runaways sent at {', '.join(f'{t:.3f}' for t in runaways)}; last other query ended at "
        f"{max(others, default=0.0):.3f}; end {results[-1].at - start:.3f}; straggler threshold "
        f"{straggler_after_s:.3f} s; {spawned} worker(s) started during the batch"
    )


def run(args: argparse.Namespace) -> BenchResult:
    from arctic_rl_core.envs.bird.executor import ExecutorSettings, SQLExecutor, SQLTask  # noqa: PLC0415 - CLI start-up

    for name in ("prompts", "rollouts", "workers", "orders", "repeats", "runaways"):
        if getattr(args, name) < 1:
            raise SystemExit(
                f"arctic-rl bench {NAME}: --{name} must be at least 1, got {getattr(args, name)}"
            )
    python = skyrl_python(args.skyrl_python)
    rng = random.Random(args.seed)
    settings = ExecutorSettings(num_workers=args.workers, timeout_s=args.timeout)
    hostile_settings = ExecutorSettings(num_workers=args.workers, timeout_s=args.hostile_timeout)
    best = {
        "ours": math.inf,
        "cached": math.inf,
        "skyrl": math.inf,
        "ours_hostile": math.inf,
        "skyrl_hostile": math.inf,
    }
    differ: dict[str, dict] = {"GRPO batch": {}, "hostile batch": {}}  # rollout -> our verdict then
    rechecked: list[str] = []
    with tempfile.TemporaryDirectory(prefix="arctic-rl-bird-bench-") as tmp, ParallelConditions() as machine:
        db_path = str(Path(tmp) / "sales.sqlite")
        _build_database(Path(db_path), args.orders, rng)
        batch = _build_batch(db_path, args.prompts, args.rollouts, rng)
        hostile = _hostile(batch, db_path, args.runaways, rng)
        skyrl = SkyRLScorer(python) if python else None
        events: list = []  # the hostile executor's schedule, for the fastest hostile repeat's timeline
        timeline = ""
        executor, hostile_executor = (
            SQLExecutor(settings),
            SQLExecutor(hostile_settings, on_event=events.append),
        )
        try:
            for pool in (executor, hostile_executor):
                pool.run([SQLTask(db_path, "SELECT 1")] * args.workers)  # start the pools
            if skyrl is not None:
                skyrl.score(batch.skyrl[:4], args.timeout)  # its threads and imports, untimed
            # Interleaved repeats, fastest of each: robust to other load on a shared machine.
            for _ in range(args.repeats):
                seconds, ours_batch, scorer = _timed_ours(executor, batch.requests)
                best["ours"] = min(best["ours"], seconds)
                start = time.perf_counter()
                scorer.score(batch.requests)  # the same batch again: every gold from the cache
                best["cached"] = min(best["cached"], time.perf_counter() - start)
                events.clear()
                seconds, ours_hostile, _ = _timed_ours(hostile_executor, hostile.requests)
                if seconds < best["ours_hostile"]:
                    timeline = hostile_timeline(events, hostile_executor.straggler_after_s())
                best["ours_hostile"] = min(best["ours_hostile"], seconds)
                if skyrl is not None:
                    seconds, rewards = skyrl.score(batch.skyrl, args.timeout)
                    best["skyrl"] = min(best["skyrl"], seconds)
                    for i in _disagreements(ours_batch.verdicts, rewards):
                        differ["GRPO batch"].setdefault(i, ours_batch.verdicts[i])
                    seconds, hostile_rewards = skyrl.score(hostile.skyrl, args.hostile_timeout)
                    best["skyrl_hostile"] = min(best["skyrl_hostile"], seconds)
                    for i in _disagreements(ours_hostile.verdicts, hostile_rewards):
                        differ["hostile batch"].setdefault(i, ours_hostile.verdicts[i])
            if skyrl is not None:
                for label, which in (("GRPO batch", batch), ("hostile batch", hostile)):
                    if differ[label]:
                        rechecked.append(_recheck(which, differ[label], label, executor, skyrl, args.timeout))
        finally:
            executor.close()
            hostile_executor.close()
            if skyrl is not None:
                skyrl.close()

    unmet = machine.result.unmet
    no_skyrl = (
        None
        if skyrl is not None
        else "no SkyRL environment: create it (UV_PROJECT_ENVIRONMENT=.venvs/skyrl uv sync --package adapter-skyrl "
        "--extra cpu) or pass --skyrl-python"
    )
    most_workers = hostile_settings.effective_max_workers
    runaway_limit = math.ceil(args.runaways / most_workers) * args.hostile_timeout
    # nor before the rest of its work: the GRPO batch alone, as fast as ours ran it
    limit = max(runaway_limit, best["ours"])
    limit_pool = math.ceil(args.runaways / args.workers) * args.hostile_timeout
    with_sql = sum(1 for v in ours_batch.verdicts if v.error != "no_sql")
    ours_label = f"score_batch ({args.workers} workers; distinct SQL once, gold once)"
    skyrl_label = f"SkyRL-SQL's scorer (skyrl-gym text2sql reward, {SKYRL_ENV_WORKERS} threads)"
    scores = ours_batch.scores
    return BenchResult(
        title=(
            f"BIRD scoring: {args.prompts} prompts x {args.rollouts} rollouts, {args.workers} workers; hostile: "
            f"+{args.runaways} runaway queries, {args.hostile_timeout:g} s limit"
        ),
        baseline_label=f"{skyrl_label}, GRPO batch",
        baseline_seconds=best["skyrl"] if skyrl is not None else math.inf,
        ours_label=f"{ours_label}, GRPO batch",
        ours_seconds=best["ours"],
        extra_rows=[
            ("ours, same batch again (gold cached)", f"{best['cached']:.6g}"),
            (f"{skyrl_label}, hostile batch", f"{best['skyrl_hostile']:.6g}"),
            (f"{ours_label}, hostile batch", f"{best['ours_hostile']:.6g}"),
            (
                f"physical limit of the hostile batch: the larger of {args.runaways} runaways x "
                f"{args.hostile_timeout:g} s over at most {most_workers} workers ({runaway_limit:g} s; over "
                f"{args.workers}: {limit_pool:g} s) and the GRPO batch alone",
                f"{limit:.6g}",
            ),
            (
                "queries run: SkyRL-SQL's (prediction + gold per rollout); ours (distinct predictions + golds)",
                f"{with_sql + len(batch.requests)}; {ours_batch.predicted_executed + ours_batch.gold_executed}",
            ),
            ("mean reward (ours)", f"{sum(scores) / len(scores):.4f}"),
            ("hostile batch, fastest repeat (s from its start)", timeline),
        ],
        notes=[
            f"verdicts agree with SkyRL-SQL's for all {len(batch.requests)} + {len(hostile.requests)} rollouts"
            + (" (some only when rescored alone: below)" if rechecked else "")
            if skyrl is not None
            else "SkyRL-SQL's scorer was not run",
            *rechecked,
            f"fastest of {args.repeats} interleaved repeats each; database: {args.orders} orders",
        ],
        conditions=machine.result.describe(),
        unmet_conditions=no_skyrl or unmet,
        goal=">= 5x",
        more=[
            Comparison(
                f"{skyrl_label}, hostile batch",
                best["skyrl_hostile"] if skyrl is not None else math.inf,
                f"{ours_label}, hostile batch",
                best["ours_hostile"],
                goal=">= 1x",
                unmet=no_skyrl or unmet,
            ),
            Comparison(
                f"physical limit of the hostile batch (the larger of {args.runaways} x {args.hostile_timeout:g} s over "
                f"{most_workers} workers and the GRPO batch alone)",
                limit,
                f"{ours_label}, hostile batch",
                best["ours_hostile"],
                goal=">= 0.83x (within 1.2x)",
                unmet=unmet,
            ),
        ],
    )
