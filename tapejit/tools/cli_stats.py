"""``tapejit stats``: ``grad.stats`` as an aligned table for people (:func:`format_stats`), at most
:data:`WIDTH` columns wide.

May import: anything of tapejit (as :mod:`tapejit.tools`).
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

#: The widest line :func:`format_stats` prints (a value or a note that would pass it wraps).
WIDTH = 100
#: Values up to this many characters are numbers of a column, right-aligned; longer ones (a
#: pass's dict of counts, an unknown key's JSON) are wrapped text.
SHORT = 12


def _wrapped(head: str, text: str, tail: str = "") -> list[str]:
    """``head`` followed by ``text`` wrapped to :data:`WIDTH` (continuation lines indented to
    where ``text`` starts, or by four spaces when ``head`` leaves too little room), then
    ``tail`` (a note) after the last line if it fits there, else on a line of its own."""
    room = WIDTH - len(head)
    if room < 30:
        out, indent = [head.rstrip()], " " * 4
        room = WIDTH - len(indent)
    else:
        out, indent = [], " " * len(head)
    parts = textwrap.wrap(text, room, break_on_hyphens=False) or [""]
    for k, part in enumerate(parts):
        out.append((head if not out else indent) + part)
    if tail:
        if len(out[-1]) + len(tail) <= WIDTH:
            out[-1] += tail
        else:
            out += [indent + part for part in textwrap.wrap(tail.strip(), WIDTH - len(indent))]
    return out


def _ms(seconds: Any) -> str:
    try:
        return f"{float(seconds) * 1e3:.2f}"
    except (TypeError, ValueError):
        return str(seconds)


def _plain(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {_plain(x)}" for k, x in v.items()) or "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def format_stats(stats: dict, title: str = "") -> str:
    """``grad.stats`` as an aligned table for people (``tapejit stats``; ``--json`` prints the
    dict itself): node counts per stage, the plan's figures, the cache, what each pass did and
    the time each compile stage took, in milliseconds. Keys it does not know are listed at the
    end, so nothing in the dict is left out."""
    known = {"nodes", "passes", "timings"}
    # sections of (label, value, note) rows, printed with one label and one value column
    sections: list[tuple[str, list[tuple[str, str, str]]]] = []
    nodes = stats.get("nodes")
    if isinstance(nodes, dict):
        sections.append(("nodes per stage", [(k, _plain(v), "") for k, v in nodes.items()]))
    heading, plan = "plan", []
    for key, label, note in (
        ("kernels", "kernels", "loop kernels (fused loops, own loop nests, copies)"),
        ("loops", "loop nodes", "fori_loop / scan / while_loop, forward and backward"),
        ("buffers", "buffers", "arrays in the workspace"),
        ("recomputed", "recomputed", "values recomputed rather than stored"),
        ("work", "work", "operations per call"),
        ("convert", "converted", "loops and branches converted from the source; kept as written"),
        ("reroll", "re-rolled", "Python loop iterations -> loop nodes"),
        ("columns", "columns", "sums over 3-vectors split into columns"),
        (None, "memory", ""),
        ("workspace_bytes", "workspace bytes", "one workspace, reused by liveness"),
        ("constants_bytes", "constants bytes", "captured arrays, passed by pointer"),
        (None, "code", ""),
        ("cache", "cache", "on-disk cache of machine code: hit, miss or off"),
        ("releases_gil", "releases the GIL", "the fast path runs the kernel without the GIL"),
        ("fast_slots", "fast-path workspaces", "threads the fast path serves at once"),
    ):
        if key is None:
            if plan:
                sections.append((heading, plan))
            heading, plan = label, []
        elif key in stats:
            known.add(key)
            plan.append((label, _plain(stats[key]), note))
    if plan:
        sections.append((heading, plan))
    timings = stats.get("timings")
    timing_rows = []
    if isinstance(timings, dict):
        timing_rows = [(k, _ms(v), "") for k, v in timings.items()]
        try:
            timing_rows.append(("total", _ms(sum(float(v) for v in timings.values())), ""))
        except (TypeError, ValueError):
            pass
    other = [(k, json.dumps(stats[k], default=str), "") for k in stats if k not in known]
    rows = [r for _, rs in sections for r in rs] + timing_rows + other
    lw = max([len(r[0]) for r in rows] + [16]) + 2
    vw = max([len(r[1]) for r in rows if len(r[1]) <= SHORT] + [6])

    def block(name: str, rs: list[tuple[str, str, str]]) -> list[str]:
        out = [name]
        for label, value, note in rs:
            head, tail = f"  {label:<{lw}}", f"   {note}" if note else ""
            if len(value) <= vw:
                out += _wrapped(f"{head}{value:>{vw}}   ", note) if note else [head + value.rjust(vw)]
            else:
                out += _wrapped(head, value, tail)
        return out

    out = textwrap.wrap(title, WIDTH, subsequent_indent="  ", break_long_words=False) + [""]
    out = out if title else []
    for name, rs in sections:
        out += block(name, rs)
    passes = stats.get("passes")
    if isinstance(passes, dict) and passes:
        table = [("pass", "nodes in", "out", "ms", "what it did")]
        for name, d in passes.items():
            if not isinstance(d, dict):
                table.append((name, "", "", "", _plain(d)))
                continue
            rest = {
                k: v
                for k, v in d.items()
                if k not in ("nodes_before", "nodes_after", "seconds", "skipped")
            }
            what = (
                "skipped"
                if d.get("skipped")
                else "; ".join(
                    f"{k}: {_plain(v)}" if isinstance(v, dict) else f"{k} {_plain(v)}"
                    for k, v in rest.items()
                )
            )
            seconds = _ms(d["seconds"]) if "seconds" in d else ""
            before, after = str(d.get("nodes_before", "")), str(d.get("nodes_after", ""))
            table.append((name, before, after, seconds, what))
        w = [max(len(r[c]) for r in table) for c in range(4)]
        out.append("passes")
        for r in table:
            line = f"  {r[0]:<{max(w[0], lw - 2)}}  {r[1]:>{w[1]}}  {r[2]:>{w[2]}}  {r[3]:>{w[3]}}"
            out += _wrapped(f"{line}   ", r[4]) if r[4] else [line.rstrip()]
    if timing_rows:
        out += block("timings (ms)", timing_rows)
    if other:
        out += block("other", other)
    return "\n".join(out)
