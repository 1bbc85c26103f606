"""The result a benchmark returns and how it is printed."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BenchResult:
    """Timings of one benchmark: the baseline and ours, measured in the same run."""

    title: str
    baseline_label: str
    baseline_seconds: float
    ours_label: str
    ours_seconds: float
    unit: str = "s"
    quantity: str = "time"  # what baseline_seconds / ours_seconds measure (e.g. "bytes": lower is better too)
    higher_is_better: bool = False  # e.g. an accuracy: the ratio is then ours / baseline
    notes: list[str] = field(default_factory=list)
    extra_rows: list[tuple[str, str]] = field(default_factory=list)
    # why this run's numbers do not measure what the benchmark is about (e.g. no idle core): the
    # last line then says so instead of giving a ratio
    unmet_conditions: str | None = None

    @property
    def ratio(self) -> float:
        if self.higher_is_better:
            if self.baseline_seconds <= 0:
                raise ValueError(f"benchmark {self.title!r} measured a non-positive baseline")
            return self.ours_seconds / self.baseline_seconds
        if self.ours_seconds <= 0:
            raise ValueError(f"benchmark {self.title!r} measured a non-positive time for ours")
        return self.baseline_seconds / self.ours_seconds


def print_result(result: BenchResult) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=result.title)
    table.add_column("variant")
    table.add_column(
        f"{result.quantity} ({result.unit})" if result.quantity != result.unit else result.unit,
        justify="right",
    )
    table.add_row(result.baseline_label, f"{result.baseline_seconds:.6g}")
    table.add_row(result.ours_label, f"{result.ours_seconds:.6g}")
    for label, value in result.extra_rows:
        table.add_row(label, value)
    console.print(table)
    for note in result.notes:
        console.print(note)
    # Plain print: the last line is machine-read, keep it free of markup and wrapping.
    if result.unmet_conditions is not None:
        print(f"measured under unmet conditions: {result.ratio:.2f}x (not a result)")
        print(f"ratio: not measured ({result.unmet_conditions})", flush=True)
        return
    print(f"ratio: {result.ratio:.2f}x", flush=True)
