"""Turn a pytest-benchmark JSON run of ``bench/`` into the markdown tables of ``RESULTS.md``.

    python -m pytest bench --benchmark-enable --benchmark-json=bench/.last.json
    python bench/report.py bench/.last.json                    # print the tables
    python bench/report.py bench/.last.json --write bench/RESULTS.md

``--write`` replaces the text between the ``<!-- report:begin -->`` and ``<!-- report:end -->``
markers of the file. Each benchmark carries ``extra_info`` (see ``bench/benchutil.py``): table,
row, impl (the column), scale and unit. A cell is the median time per unit of work (or
``extra_info["seconds"]`` when the figure was measured inside a subprocess); every non-tapejit
column X gets a ratio column ``tj ÷ X`` = first tapejit column / X (below 1: tapejit is faster).
``extra_info["also"]`` adds further columns to the same row.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}
ORDER = ("EAM", "DAG", "Captured", "Elementwise", "Per-call")  # table order by title prefix
UNTAGGED = "Other benchmarks, without report tags (µs per call)"
BEGIN, END = "<!-- report:begin -->", "<!-- report:end -->"


def fmt(v: float | None) -> str:
    """Three significant figures, no exponent for everyday magnitudes."""
    if v is None:
        return "–"
    if v >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}" if v >= 0.001 else f"{v:.2e}"


def tables(benchmarks: list[dict]) -> str:
    """The markdown tables, one per ``extra_info["table"]``, in the order the run met them."""
    order: dict[str, dict] = {}
    for b in benchmarks:
        info = b.get("extra_info", {})
        if "table" not in info:  # a benchmark without tags: one row per name, median in µs
            info = {"table": UNTAGGED, "row": b["fullname"], "impl": "median"}
        t = order.setdefault(info["table"], {"rows": {}, "cols": {}, "noise": []})
        scale, unit = float(info.get("scale", 1)), info.get("unit", "us")
        stats = b["stats"]
        seconds = info.get("seconds", stats["median"])
        t["rows"].setdefault(info["row"], {})[info["impl"]] = seconds / scale * UNITS[unit]
        t["cols"].setdefault(info["impl"], None)
        for impl, sec in info.get("also", {}).items():  # more figures of one measurement
            t["rows"][info["row"]][impl] = sec / scale * UNITS[unit]
            t["cols"].setdefault(impl, None)
        if "seconds" not in info and stats["rounds"] > 1 and stats["median"] > 0:
            t["noise"].append((stats["iqr"] / stats["median"], info["impl"], info["row"]))
    out = []
    rank = {t: next((i for i, p in enumerate(ORDER) if t.startswith(p)), len(ORDER)) for t in order}
    for title, t in sorted(order.items(), key=lambda item: rank[item[0]]):
        cols = list(t["cols"])
        base = next((c for c in cols if c.startswith("tapejit")), None)
        refs = [c for c in cols if not c.startswith("tapejit")] if base else []
        head = ["", *cols, *(f"tj ÷ {r}" for r in refs)]
        out += [f"#### {title}", "", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        for row, cells in t["rows"].items():
            vals = [fmt(cells.get(c)) for c in cols]
            ratios = [
                fmt(cells[base] / cells[r]) if base in cells and cells.get(r) else "–" for r in refs
            ]
            out.append("| " + " | ".join([row, *vals, *ratios]) + " |")
        if t["noise"]:
            worst = max(t["noise"])
            out.append("")
            out.append(
                f"Spread: largest IQR/median {worst[0]:.0%} ({worst[1]}, {worst[2]}); "
                f"median over cells {sorted(t['noise'])[len(t['noise']) // 2][0]:.0%}."
            )
        out.append("")
    return "\n".join(out)


def machine(data: dict) -> str:
    """The machine and versions the run recorded (``conftest.py`` adds ``tapejit_bench``)."""
    m = data.get("machine_info", {})
    info = m.get("tapejit_bench", {})
    commit = data.get("commit_info", {})
    dirty = " (uncommitted changes)" if commit.get("dirty") else ""
    run = (
        f"Run of {data.get('datetime', '?')[:19]} UTC on `{m.get('node', '?')}`: "
        f"{info.get('cpu', '?')}, {info.get('cores', '?')} cores ({info.get('cpu_flags', '')}); "
        f"commit {str(commit.get('id', '?'))[:10]}{dirty}."
    )
    versions = (
        f"Python {info.get('python', '?')}, numpy {info.get('numpy', '?')}, llvmlite "
        f"{info.get('llvmlite', '?')} (LLVM {info.get('llvm', '?')}), numba "
        f"{info.get('numba', '?')}, {info.get('gcc', 'gcc ?')}; "
        f"BLAS threads: {info.get('blas_threads', '?')}."
    )
    if info.get("cpu_features") or info.get("c_flags_extra"):
        versions += (
            f"\nCode generated with TAPEJIT_CPU_FEATURES={info.get('cpu_features') or '(host)'}; "
            f"C references built with the extra flags `{info.get('c_flags_extra') or '(none)'}`."
        )
    return f"{run}\n{versions}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", type=Path, help="output of --benchmark-json")
    p.add_argument("--write", type=Path, help="markdown file whose report markers to fill")
    ns = p.parse_args(argv)
    data = json.loads(ns.json.read_text())
    text = machine(data) + "\n\n" + tables(data["benchmarks"])
    if ns.write is None:
        print(text)
        return 0
    doc = ns.write.read_text()
    if BEGIN not in doc or END not in doc:
        print(f"{ns.write}: no {BEGIN} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = doc.split(BEGIN, 1)
    ns.write.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
