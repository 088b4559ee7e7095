"""Plot the benchmark ratios of bench/RESULTS.md: tapejit's time divided by each reference's.

    python bench/plot.py [RESULTS.md] [-o docs/img/benchmarks.png]

Reads the tables between the ``report:begin``/``report:end`` markers (written by
``bench/report.py``): every column headed ``tj ÷ X`` holds tapejit's figure divided by column X's.
Draws one horizontal bar per (row, reference), one panel per table, on a log scale with a line
at 1.0 — bars left of the line are workloads where tapejit takes less time. Tables without
ratio columns (compile times) are left out. matplotlib is needed only here (``pip install
-e '.[docs]'``).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATIO = "tj ÷ "
SEED = re.compile(r"\s*\(seed \d+\)")  # benchmark tags that mean nothing to a reader


@dataclass
class Table:
    title: str
    bars: list[tuple[str, float]] = field(default_factory=list)  # (label, ratio)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _number(cell: str) -> float:
    return float(cell.replace(",", "").replace("×", ""))


def parse(text: str) -> tuple[str, list[Table]]:
    """The report's header line and its tables that have ratio columns."""
    try:
        body = text.split("<!-- report:begin -->", 1)[1].split("<!-- report:end -->", 1)[0]
    except IndexError:
        raise ValueError("no <!-- report:begin --> ... <!-- report:end --> section") from None
    header = next((ln.strip() for ln in body.splitlines() if ln.startswith("Run of")), "")
    tables: list[Table] = []
    title = None
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#### "):
            title = SEED.sub("", line[5:].strip())
        elif line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            cols = _cells(line)
            ratio_cols = [k for k, c in enumerate(cols) if c.startswith(RATIO)]
            table = Table(title or "?")
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                row = _cells(lines[i])
                for k in ratio_cols:
                    try:
                        ratio = _number(row[k])
                    except (IndexError, ValueError):
                        continue
                    table.bars.append((f"{row[0]} · vs {cols[k][len(RATIO) :]}", ratio))
                i += 1
            if table.bars:
                tables.append(table)
            continue
        i += 1
    return header, tables


def plot(header: str, tables: list[Table], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heights = [len(t.bars) for t in tables]
    fig, axes = plt.subplots(
        len(tables),
        1,
        figsize=(10, 0.2 * sum(heights) + 0.5 * len(tables) + 1.2),
        gridspec_kw={"height_ratios": heights},
        sharex=True,
        layout="constrained",
    )
    axes = list(axes) if len(tables) > 1 else [axes]
    ratios = [r for t in tables for _, r in t.bars]
    lo, hi = min(ratios + [0.5]) / 1.5, max(ratios + [2.0]) * 1.5
    for ax, table in zip(axes, tables):
        labels = [lab for lab, _ in table.bars]
        values = [r for _, r in table.bars]
        ys = range(len(values))
        colours = ["#2a7ab0" if v <= 1.0 else "#d9822b" for v in values]
        ax.barh(ys, values, color=colours, height=0.7)
        ax.set_yticks(list(ys), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_title(table.title, fontsize=8, loc="left")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", which="major", linewidth=0.4, alpha=0.5)
        for y, v in zip(ys, values):
            ax.text(v * 1.08, y, f"{v:.3g}", va="center", fontsize=6)
    axes[-1].set_xlabel(
        "tapejit time ÷ reference time (log scale; below 1 = tapejit faster)", fontsize=8
    )
    fig.suptitle(
        "tapejit benchmarks: time relative to each reference\n" + header.replace("`", ""),
        fontsize=9,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="?", default=ROOT / "bench" / "RESULTS.md", type=Path)
    p.add_argument("-o", "--out", default=ROOT / "docs" / "img" / "benchmarks.png", type=Path)
    ns = p.parse_args(argv)
    header, tables = parse(ns.results.read_text(encoding="utf-8"))
    if not tables:
        print(f"{ns.results}: no table with a 'tj ÷' column", file=sys.stderr)
        return 1
    plot(header, tables, ns.out)
    n = sum(len(t.bars) for t in tables)
    print(f"wrote {ns.out} ({len(tables)} tables, {n} ratios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
