"""BIRD reward on a GRPO-shaped batch: `score_batch` vs the per-rollout seed approach.

The batch: `--prompts` questions x `--rollouts` responses on a generated sales database (a few
ms per query, like mid-sized BIRD databases). Each prompt's responses are drawn, with a fixed
seed, from the gold query, an equivalent rewrite, two wrong queries, a failing query and a
response without SQL (weights 5:3:3:2:2:1), each laid out in one of four ways (one line, several
lines, a trailing semicolon, a leading comment): the duplicate rate of a policy that has
started to converge, with the textual noise of sampling.

Baseline (the legacy integration's shape): for every rollout, the gold query and the predicted query are each
executed on a new connection in a new thread. Ours: `BirdScorer.score`, which executes each
distinct (database, SQL) once, golds once, on a warm pool of worker processes. Both use the
same read-only execution and verdict code; the verdicts must be identical or the run fails.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from arctic_rl_testbed.bench.report import BenchResult

NAME = "bird-scoring"
HELP = "BIRD reward on a GRPO batch: score_batch (dedup, gold cache, worker pool) vs per-rollout execution."

_CITIES = [f"City{i:02d}" for i in range(20)]
_SEGMENTS = ["consumer", "corporate", "home_office", "small_business"]
_STATUSES = ["delivered", "shipped", "returned", "cancelled"]
_WEIGHTS = (5, 3, 3, 2, 2, 1)  # gold, rewrite, wrong A, wrong B, failing, no SQL


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", type=int, default=16, help="prompts per batch (default 16)")
    parser.add_argument("--rollouts", type=int, default=16, help="responses per prompt (default 16)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes for score_batch (default 2)")
    parser.add_argument("--orders", type=int, default=60_000, help="rows in the orders table (default 60000)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed repeats; the fastest counts (default 3)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the database and the responses")


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


def _response(sql: str | None, formatted: bool) -> str:
    if sql is None:
        return "<think>I am not sure which table holds this.</think>\nI cannot answer."
    if formatted:
        return f"<think>Use the orders table.</think>\n<answer>\n```sql\n{sql}\n```\n</answer>"
    return f"The query is: {sql}"


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


def _build_batch(db_path: str, prompts: int, rollouts: int, rng: random.Random):
    from arctic_rl_core.envs.bird.reward import ScoreRequest

    requests: list[ScoreRequest] = []
    for k in range(prompts):
        sqls = _question_sqls(k, rng)
        gold = sqls[0]
        choices = rng.choices(range(6), weights=_WEIGHTS, k=rollouts)
        for choice in choices:
            sql = None if choice == 5 else _layout(sqls[choice], rng)
            formatted = rng.random() < 0.85 or sql is None
            requests.append(
                ScoreRequest(solution_str=_response(sql, formatted), gold_sql=gold, db_path=db_path)
            )
    return requests


def _baseline_execute(db_path: str, sql: str, max_rows: int, timeout_s: float):
    """One query on a new connection in a new thread (the legacy integration's per-query pattern)."""
    from arctic_rl_core.envs.bird import sql_worker
    from arctic_rl_core.envs.bird.executor import ExecutionResult

    box: list[tuple] = []
    thread = threading.Thread(
        target=lambda: box.append(sql_worker.run_query(db_path, sql, max_rows, timeout_s, True))
    )
    thread.start()
    thread.join()
    return ExecutionResult.from_outcome(box[0])


def _baseline_score(requests, max_rows: int, timeout_s: float):
    from arctic_rl_core.envs.bird.reward import judge
    from arctic_rl_core.envs.bird.sql_extract import extract_sql

    verdicts = []
    for request in requests:
        sql = extract_sql(request.solution_str).sql
        gold = _baseline_execute(request.db_path, request.gold_sql, max_rows, timeout_s)
        predicted = None if sql is None else _baseline_execute(request.db_path, sql, max_rows, timeout_s)
        verdicts.append(judge(request.solution_str, predicted, [gold]))
    return verdicts


def run(args: argparse.Namespace) -> BenchResult:
    from arctic_rl_core.envs.bird.executor import ExecutorSettings, SQLExecutor, SQLTask
    from arctic_rl_core.envs.bird.reward import BirdScorer, GoldCache

    for name in ("prompts", "rollouts", "workers", "orders", "repeats"):
        if getattr(args, name) < 1:
            raise SystemExit(
                f"arctic-rl bench {NAME}: --{name} must be at least 1, got {getattr(args, name)}"
            )
    load_before = os.getloadavg()[0]
    rng = random.Random(args.seed)
    settings = ExecutorSettings(num_workers=args.workers)
    with tempfile.TemporaryDirectory(prefix="arctic-rl-bird-bench-") as tmp:
        db_path = str(Path(tmp) / "sales.sqlite")
        _build_database(Path(db_path), args.orders, rng)
        requests = _build_batch(db_path, args.prompts, args.rollouts, rng)

        spawn_start = time.perf_counter()
        executor = SQLExecutor(settings)
        try:
            executor.run([SQLTask(db_path, "SELECT 1")] * args.workers)  # start the pool
            spawn_seconds = time.perf_counter() - spawn_start
            baseline_seconds = ours_seconds = cached_seconds = float("inf")
            # Interleaved repeats, fastest of each: robust to other load on a shared machine.
            for _ in range(args.repeats):
                start = time.perf_counter()
                baseline_verdicts = _baseline_score(requests, settings.max_rows, settings.timeout_s)
                baseline_seconds = min(baseline_seconds, time.perf_counter() - start)
                scorer = BirdScorer(executor=executor, gold_cache=GoldCache())  # cold gold cache
                start = time.perf_counter()
                batch = scorer.score(requests)
                ours_seconds = min(ours_seconds, time.perf_counter() - start)
                start = time.perf_counter()
                scorer.score(requests)  # the same batch again: every gold from the cache
                cached_seconds = min(cached_seconds, time.perf_counter() - start)
        finally:
            executor.close()

    if batch.verdicts != baseline_verdicts:
        mismatches = sum(a != b for a, b in zip(batch.verdicts, baseline_verdicts, strict=True))
        raise SystemExit(f"arctic-rl bench {NAME}: {mismatches} verdict(s) differ between baseline and ours")
    with_sql = sum(1 for v in batch.verdicts if v.error != "no_sql")
    scores = batch.scores
    return BenchResult(
        title=f"BIRD scoring: {args.prompts} prompts x {args.rollouts} rollouts, {args.workers} workers",
        baseline_label="per rollout: gold + prediction, new thread and connection per query",
        baseline_seconds=baseline_seconds,
        ours_label="score_batch: distinct SQL once, gold once, worker pool",
        ours_seconds=ours_seconds,
        extra_rows=[
            ("ours, same batch again (gold cached)", f"{cached_seconds:.6g}"),
            ("ours, one-time worker start", f"{spawn_seconds:.6g}"),
            ("queries run: baseline", str(len(requests) + with_sql)),
            (
                "queries run: ours (distinct predictions + golds)",
                str(batch.predicted_executed + batch.gold_executed),
            ),
            ("rollouts with SQL / distinct predicted SQL", f"{with_sql} / {batch.predicted_executed}"),
            ("mean reward", f"{sum(scores) / len(scores):.4f}"),
        ],
        notes=[
            f"verdicts identical for all {len(requests)} rollouts; errors {batch.error_counts}",
            f"fastest of {args.repeats} interleaved repeats each; database: {args.orders} orders",
            f"1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on "
            f"{os.cpu_count()} CPUs (other load takes CPU from the worker pool first)",
        ],
    )
