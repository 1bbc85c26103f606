"""What a demo run writes and shows: `metrics.jsonl` (one JSON object per record, appended, so a
resumed run continues the same file), the per-step table, and `reward_loss.png`."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "reward_loss.png"
SUMMARY_FILE = "summary.json"

STEP_TABLE_TITLE = "GRPO steps"
STEP_TABLE_CAPTION = (
    "EX%: rollouts scoring 1.0 (BIRD: result set equals the gold query's; GSM8K: exact answer); ver: weights version the sampler serves "
    "after the step's sync; turns: mean turns per rollout (--max-turns); seconds per phase: generate, log-probs, train, whole step (weight sync in metrics.jsonl)"
)
# The per-step table: (column title, record key, format).
STEP_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("step", "step", "{:d}"),
    ("reward", "reward_mean", "{:.3f}"),
    ("EX%", "rollout_ex", "{:.0f}"),
    ("loss", "loss", "{:+.3f}"),
    ("|grad|", "grad_norm", "{:.2f}"),
    ("ver", "weights_version", "{:d}"),
    ("turns", "turns_mean", "{:.2f}"),
    ("gen s", "seconds_generate", "{:.1f}"),
    ("lp s", "seconds_logprobs", "{:.1f}"),
    ("train s", "seconds_train", "{:.1f}"),
    ("step s", "seconds_step", "{:.1f}"),
)


class MetricsLog:
    """Append-only JSONL of a run's records; each has a `kind` (warm_start, eval, grpo_step, ...)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / METRICS_FILE

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one record, stamped with the wall-clock time (`time`, Unix seconds)."""

        record = {"kind": kind, "time": round(time.time(), 3), **fields}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        return record

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                if kind is None or record.get("kind") == kind:
                    out.append(record)
        return out

    def grpo_steps(self) -> list[dict[str, Any]]:
        """One record per GRPO step (the latest when a resumed run repeated a step), by step."""
        latest: dict[int, dict[str, Any]] = {}
        for record in self.records("grpo_step"):
            latest[int(record["step"])] = record
        return [latest[s] for s in sorted(latest)]


def format_cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if fmt.endswith("d}"):
        return fmt.format(int(value))
    return fmt.format(float(value))


def step_line(step: int, total: int, record: Mapping[str, Any]) -> str:
    """One finished GRPO step, as printed while the run goes."""
    return (
        f"step {step}/{total}  reward {format_cell(record.get('reward_mean'), '{:.3f}')}  "
        f"EX {format_cell(record.get('rollout_ex'), '{:.0f}')}%  loss {format_cell(record.get('loss'), '{:+.4f}')}  "
        f"|grad| {format_cell(record.get('grad_norm'), '{:.3f}')}  v{format_cell(record.get('weights_version'), '{:d}')}  "
        f"{format_cell(record.get('seconds_step'), '{:.1f}')}s"
    )


def step_table(steps: Iterable[Mapping[str, Any]], title: str = STEP_TABLE_TITLE):
    """A rich table with one row per GRPO step (see STEP_COLUMNS)."""

    table = Table(
        title=title, caption=STEP_TABLE_CAPTION, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False
    )
    for name, _key, _fmt in STEP_COLUMNS:
        table.add_column(name, justify="right", no_wrap=True)
    for record in steps:
        table.add_row(*(format_cell(record.get(key), fmt) for _name, key, fmt in STEP_COLUMNS))
    return table


def write_plot(steps: list[Mapping[str, Any]], path: str | Path, title: str) -> Path:
    """Reward mean and policy loss per GRPO step, one panel each (matplotlib, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [int(r["step"]) for r in steps]
    fig, (reward_ax, loss_ax) = plt.subplots(1, 2, figsize=(10, 4))
    reward_ax.plot(xs, [r["reward_mean"] for r in steps], marker="o", color="tab:green")
    reward_ax.set_title("reward mean per step")
    reward_ax.set_xlabel("GRPO step")
    reward_ax.set_ylabel("reward")
    loss_ax.plot(xs, [r["loss"] for r in steps], marker="o", color="tab:red")
    loss_ax.set_title("policy loss per step")
    loss_ax.set_xlabel("GRPO step")
    loss_ax.set_ylabel("loss")
    for ax in (reward_ax, loss_ax):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def rollout_ex(rewards: list[float]) -> float | None:
    """Percent of a step's rollouts scoring 1.0 (BIRD: result set equals the gold query's; GSM8K:
    exact answer); None without rollouts."""
    return 100.0 * sum(r == 1.0 for r in rewards) / len(rewards) if rewards else None


def phase_seconds(data: dict[str, Any], timings: dict[str, str]) -> dict[str, float | None]:
    """The demo's per-phase seconds (`timings`: demo name -> the framework's timing key)."""
    return {name: float(data[key]) if key in data else None for name, key in timings.items()}
