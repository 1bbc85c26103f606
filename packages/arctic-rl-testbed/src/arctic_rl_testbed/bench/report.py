"""The result a benchmark returns, how it is printed, and the one table of all of them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Comparison:
    """Ours against one named baseline, measured in the same run."""

    baseline: str
    baseline_value: float
    ours: str
    ours_value: float
    unit: str = "s"
    higher_is_better: bool = False  # e.g. an accuracy: the ratio is then ours / baseline
    goal: str = ""  # e.g. ">= 5x"
    # why this run's numbers do not measure what the comparison is about (e.g. no free core): the
    # ratio is then not a result
    unmet: str | None = None

    @property
    def ratio(self) -> float:
        """How many times better ours is: baseline / ours (ours / baseline when higher is better)."""
        if self.higher_is_better:
            if self.baseline_value <= 0:
                raise ValueError(f"comparison with {self.baseline!r} measured a non-positive baseline")
            return self.ours_value / self.baseline_value
        if self.ours_value <= 0:
            raise ValueError(f"comparison with {self.baseline!r} measured a non-positive value for ours")
        return self.baseline_value / self.ours_value

    def ratio_text(self) -> str:
        if self.unmet is not None:
            return f"not measured ({self.unmet}; {self.ratio:.2f}x under them, not a result)"
        return f"{self.ratio:.2f}x"


@dataclass(frozen=True)
class BenchResult:
    """Timings of one benchmark: the baseline and ours, measured in the same run.

    The first comparison (`baseline_*` / `ours_*`) is against the strongest simple alternative; `more`
    holds the others (a framework's own mechanism, a physical limit), each with its own baseline."""

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
    conditions: str = ""  # what the machine was doing (load, cores, checks), for the summary table
    goal: str = ""  # of the first comparison, e.g. ">= 5x"
    more: list[Comparison] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.primary.ratio

    @property
    def primary(self) -> Comparison:
        return Comparison(
            baseline=self.baseline_label,
            baseline_value=self.baseline_seconds,
            ours=self.ours_label,
            ours_value=self.ours_seconds,
            unit=self.unit,
            higher_is_better=self.higher_is_better,
            goal=self.goal,
            unmet=self.unmet_conditions,
        )

    @property
    def comparisons(self) -> list[Comparison]:
        return [self.primary, *self.more]


def _value(value: float, unit: str) -> str:
    return f"{value:.4g} {unit}"


def print_result(result: BenchResult) -> None:
    from rich.console import Console  # noqa: PLC0415 - CLI start-up
    from rich.table import Table  # noqa: PLC0415 - CLI start-up

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
    if result.more:
        Console(width=max(console.width, 160)).print(
            summary_table([("", result)], title="against each baseline")
        )
    for note in result.notes:
        console.print(note)
    if result.conditions:
        console.print(f"conditions: {result.conditions}")
    # Plain print: the last line is machine-read, keep it free of markup and wrapping.
    if result.unmet_conditions is not None:
        print(f"measured under unmet conditions: {result.ratio:.2f}x (not a result)")
        print(f"ratio: not measured ({result.unmet_conditions})", flush=True)
        return
    print(f"ratio: {result.ratio:.2f}x", flush=True)


def summary_table(results: list[tuple[str, BenchResult | str]], title: str = "arctic-rl bench"):
    """One row per comparison of every benchmark: (name, result), or (name, why it has no result).
    A benchmark's first row names ours; its later rows give our value only."""
    from rich.table import Table  # noqa: PLC0415 - CLI start-up

    table = Table(title=title, show_lines=True)
    for column in ("benchmark", "baseline", "ours", "ratio", "goal", "conditions"):
        table.add_column(column, overflow="fold")
    for name, result in results:
        if isinstance(result, str):
            table.add_row(name, "", "", "not measured", "", result)
            continue
        for k, comparison in enumerate(result.comparisons):
            ours = _value(comparison.ours_value, comparison.unit)
            if k == 0 or comparison.ours != result.ours_label:
                ours = f"{comparison.ours}: {ours}"
            table.add_row(
                name if k == 0 else "",
                f"{comparison.baseline}: {_value(comparison.baseline_value, comparison.unit)}",
                ours,
                comparison.ratio_text(),
                comparison.goal,
                result.conditions if k == 0 else "",
            )
    return table
