"""Random numpy programs for the differential fuzzer (tests/test_fuzz.py).

A program is Python source: ``def f(x, y): ...`` built statement by statement from a random
stream of choices (a Hypothesis ``data`` object, so failures shrink and replay). Every
statement keeps the values in a safe range — arguments of ``log``/``sqrt`` are made positive,
exponents bounded, divisions kept away from zero — so the numpy value is finite and the function
smooth except at a few kinks (``maximum``, ``max``, ``where`` and guarded branches), which the
checker recognises by a finite difference that depends on its step.

The generator tracks each variable's shape, so every expression is valid numpy: elementwise ops
on broadcastable shapes, reductions with ``axis``/``keepdims``, basic and integer-array
indexing, in-place updates of arrays made with ``zeros_like``/``copy``, ``@`` on aligned shapes,
``tj.where``, Python ``if`` on a reduction (a guard), Python loops over elements (with a
branch on each element: a guard per iteration, which re-rolling rolls), and
``fori_loop``/``scan``/``while_loop``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from hypothesis import strategies as st

UNARY = [
    "np.exp(np.tanh({a}))",
    "np.log({a} * {a} + 0.5)",
    "np.sqrt({a} * {a} + 0.1)",
    "np.sin({a})",
    "np.cos({a})",
    "np.tanh({a})",
    "np.log1p({a} * {a})",
    "np.expm1(np.tanh({a}))",
    "{a} ** 2",
    "{a} ** 3 * 0.1",
    "-{a}",
    "np.square({a})",
    "1.0 / ({a} * {a} + 1.0)",
    "np.arctanh(np.tanh({a}) * 0.5)",
    "np.sinh(np.tanh({a}))",
    "np.hypot({a}, 0.5)",
    "np.logaddexp({a}, 0.3)",
    "np.cumsum({a}) * 0.1",
]
KINKED_UNARY = ["np.abs({a})", "np.maximum({a}, 0.1)", "np.clip({a}, -0.5, 0.8)"]
BINARY = [
    "{a} + {b}",
    "{a} - {b}",
    "{a} * {b}",
    "{a} / ({b} * {b} + 0.5)",
    "np.maximum({a}, {b})",
    "np.minimum({a}, {b})",
    "tj.where({a} > {b}, {a} * 2.0, {b})",
]


def broadcast(s1: tuple, s2: tuple) -> tuple | None:
    out = []
    for d1, d2 in zip(reversed((1,) * (len(s2) - len(s1)) + s1), reversed((1,) * (len(s1) - len(s2)) + s2)):
        if d1 != d2 and 1 not in (d1, d2):
            return None
        out.append(max(d1, d2))
    return tuple(reversed(out))


@dataclass
class Program:
    """Source lines and the shapes of the variables defined so far."""

    args: list[tuple[str, tuple]]
    lines: list[str] = field(default_factory=list)
    shapes: dict[str, tuple] = field(default_factory=dict)
    features: set[str] = field(default_factory=set)
    k: int = 0

    def new(self, shape: tuple, expr: str, feature: str) -> str:
        name = f"v{self.k}"
        self.k += 1
        self.lines.append(f"    {name} = {expr}")
        self.shapes[name] = shape
        self.features.add(feature)
        return name

    def source(self, result: str) -> str:
        params = ", ".join(n for n, _ in self.args)
        body = "\n".join(self.lines)
        return f"def f({params}):\n{body}\n    return {result}\n"


CAPTURE_BODIES = [
    "{v} = {v} + np.sin({a}[{i} + 1]) * {a}[{i}]",
    "{v} = np.tanh(0.7 * {v} + {a}[{i}])",
    "{v} = {v} * 0.8 + {a}[{i}] * {a}[len({a}) - 1 - {i}]",
    "t = {a}[{i}] * {s}\n        {v} += t / (1.0 + t * t)",
    "{v} = {v} + {a}[{i}] * {a}[{i}]\n        {w} = {w} * 0.9 + np.cos({a}[{i}])",
]
CAPTURE_RANGES = ["range(len({a}) - 1)", "range(len({a}) - 1, -1, -1)", "range(0, len({a}) - 1, 2)",
                  "range(2, len({a}) - 1)"]  # fmt: skip


def _capture_loop(data, prog: "Program", a: str, sa: tuple) -> None:
    """A Python element loop of the form that tracing captures (tapejit/frontend/loops/loop_source.py): a
    straight-line body, the loop variable only in element reads; over the rows of a matrix,
    or the elements of a vector (the variable, raveled and repeated to at least 12 elements,
    so that the loop is long enough to be captured: loop_capture.MIN_TRIPS)."""
    i = data.draw(st.sampled_from(["i", "j"]))
    if len(sa) == 2:
        k = 12 // sa[0] + 1
        m = prog.new((sa[0] * k, sa[1]), f"np.concatenate([{a}] * {k}, axis=0)", "capture")
        v = f"v{prog.k}"
        prog.k += 1
        prog.lines.append(f"    {v} = 0.0")
        prog.lines.append(f"    for {i} in range({m}.shape[0]):")
        prog.lines.append(f"        {v} = {v} + np.sum({m}[{i}, :] * {m}[{i}, :]) * 0.5")
        prog.shapes[v] = ()
        return
    size = sa[0] if sa else 1
    if len(sa) != 1 or size < 12:
        k = 12 // size + 1
        a = prog.new((size * k,), f"np.concatenate([np.ravel({a})] * {k}) * 0.9", "capture")
    scalars = [n for n, s in prog.shapes.items() if s == ()] or ["1.0"]
    v, w = f"v{prog.k}", f"v{prog.k + 1}"
    prog.k += 2
    body = data.draw(st.sampled_from(CAPTURE_BODIES))
    rng = data.draw(st.sampled_from(CAPTURE_RANGES))
    if "+ 1]" in body and "- 1," in rng:
        rng = "range(len({a}) - 1)"  # a[i + 1] stays in bounds
    s = data.draw(st.sampled_from(scalars))
    prog.lines.append(f"    {v} = 0.25")
    prog.lines.append(f"    {w} = {a}[0] * 0.5")
    prog.lines.append(f"    for {i} in {rng.format(a=a)}:")
    prog.lines.append("        " + body.format(v=v, w=w, a=a, i=i, s=s))
    prog.shapes[v] = ()
    prog.shapes[w] = ()
    prog.features.add("capture")


RAGGED_FORMS = {  # triangular loops: rows whose length moves with the loop variable
    "rows": ["for {i} in range(len({m}) - 1):",
             "    {v} = {v} + np.sum(np.cos({m}[{i} + 1:] - {m}[{i}]) * {m}[{i}])"],
    "pairs": ["for {i} in range(len({m})):",
              "    for j in range({i} + 1, len({m})):",
              "        {v} = {v} + np.sin({m}[j{c}] - {m}[{i}{c}]) * {m}[{i}{c}]"],
    "growing": ["for {i} in range(len({m})):",
                "    {v} = {v} + np.sum(np.sin({m}[: {i} + 1])) * 0.1"],
    "sliding": ["for {i} in range(len({m}) - 3):",
                "    {v} = {v} + np.sum({m}[{i} : {i} + 3] ** 2) * 0.2"],
    "allpairs": ["for {i} in range(len({m})):",
                 "    for j in range(len({m})):",
                 "        if j != {i}:",
                 "            {v} = {v} + np.cos({m}[j{c}] - {m}[{i}{c}]) * 0.1"],
    "columns": ["for {i} in range(len({m}) - 1):",
                "    s = np.sum({m}[{i} + 1:] * {m}[{i}], axis=0)",
                "    {v} = {v} + np.sum(s * s) * 0.01"],
}


CONVERTED_FORMS = {  # loops and branches converted from the source (tapejit/frontend/convert)
    # a scatter-add through an index table with repeated positions, into np.zeros
    "table": ["{F} = np.zeros(len({m}))",
              "for t in range(len({tab})):",
              "    {F}[{tab}[t]] += np.sin({m}[t % len({m})]) * 0.5",
              "{v} = np.sum({F} * {F}) * 0.1"],
    # a branch whose untaken side is inf/NaN (log of a non-positive number)
    "singular": ["{v} = 0.0",
                 "for i in range(len({m})):",
                 "    if {m}[i] > 0.05:",
                 "        {v} += np.log({m}[i]) * 0.2",
                 "    else:",
                 "        {v} += {m}[i] * 0.5"],
    "continue": ["{v} = 0.0",
                 "for i in range(len({m})):",
                 "    if {m}[i] < -0.3 or {m}[i] > 0.9:",
                 "        continue",
                 "    w = 2.0 if {m}[i] > 0.2 else 0.5",
                 "    {v} += w * {m}[i] ** 2"],
    # a loop left on a traced condition (the exit moves with the data)
    "break": ["{v} = 0.0",
              "for i in range(len({m})):",
              "    {v} += np.sin({m}[i]) * 0.3",
              "    if {v} > 0.6:",
              "        break",
              "    {v} += {m}[i] ** 2 * 0.1"],
    # a list appended to once an iteration, its last element read back (a loop output)
    "append": ["{F} = [{m}[0]]",
               "for i in range(1, len({m})):",
               "    {F}.append(np.sin({F}[-1]) * 0.5 + {m}[i])",
               "{v} = sum({F}) * 0.1 + np.sum(np.stack({F}[1:]) ** 2) * 0.05"],
    # a nest with a traced inner bound, reading an index table
    "nest": ["{v} = 0.0",
             "for i in range(len({m})):",
             "    for j in range(i + 1, len({m})):",
             "        {v} += np.cos({m}[{tab}[i % len({tab})]] - {m}[j]) * 0.05"],
    # a time loop around element loops (a sequential loop of array carries)
    "time": ["{F} = {m} * 1.0",
             "for t in range(9):",
             "    g = np.zeros(len({m}))",
             "    for i in range(len({m}) - 1):",
             "        d = {F}[i + 1] - {F}[i]",
             "        g[i] += np.tanh(d)",
             "        g[i + 1] -= np.tanh(d)",
             "    {F} = {F} + 0.05 * g",
             "{v} = np.sum({F} * {m}) * 0.1"],
}


def _converted_loop(data, prog: "Program", a: str, sa: tuple) -> None:
    """A loop or branch of the forms converted from the source: over a vector of at least 12
    elements (the variable, raveled and repeated), reading a constant index table with
    repeated positions."""
    size = math.prod(sa) if sa else 1
    k = 12 // size + 1
    m = prog.new((size * k,), f"np.concatenate([np.ravel({a})] * {k}) * 0.8", "converted")
    rng = random.Random(data.draw(st.integers(0, 2**16)))
    n = size * k
    tab_values = [rng.randrange(0, n) for _ in range(rng.randrange(10, 20))]
    form = data.draw(st.sampled_from(sorted(CONVERTED_FORMS)))
    v, F, tab = f"v{prog.k}", f"F{prog.k}", f"tab{prog.k}"
    prog.k += 1
    prog.lines.append(f"    {tab} = np.array({tab_values!r})")
    for line in CONVERTED_FORMS[form]:
        prog.lines.append("    " + line.format(m=m, v=v, F=F, tab=tab))
    prog.shapes[v] = ()
    prog.features.add(f"converted:{form}")


def _ragged_loop(data, prog: "Program", a: str, sa: tuple) -> None:
    """A triangular element loop (tapejit/passes/reroll/ragged.py) over the rows of a matrix
    or the elements of a vector (repeated to at least 26 rows, so that it re-rolls: a pair
    loop's rows re-roll as sums while they have loop_capture.MIN_TRIPS pairs, and at least
    reroll.MIN_RUN such rows re-roll into one)."""
    if len(sa) not in (1, 2):
        a, sa = prog.new((sa[0] if sa else 1,), f"np.ravel({a})[:1] + 0.0", "ragged"), (1,)
    k = 26 // sa[0] + 1
    m = prog.new((sa[0] * k, *sa[1:]), f"np.concatenate([{a}] * {k}, axis=0) * 0.7", "ragged")
    form = data.draw(st.sampled_from(sorted(RAGGED_FORMS)))
    if form == "columns" and len(sa) != 2:
        form = "rows"
    v = f"v{prog.k}"
    prog.k += 1
    prog.lines.append(f"    {v} = 0.0")
    c = ", 0" if len(sa) == 2 else ""
    for line in RAGGED_FORMS[form]:
        prog.lines.append("    " + line.format(i="i", m=m, v=v, c=c))
    prog.shapes[v] = ()
    prog.features.add("ragged")


def _graph_loop(data, prog: "Program", a: str, sa: tuple) -> None:
    """A graph model's vertex loop (tapejit/passes/reroll/history.py): each vertex a small
    layer on the previous vertex's output plus, where a constant table has one, an earlier
    vertex's output; the weights sliced out of one flat vector (``p[v*w : (v+1)*w]``). At
    least 24 vertices, so that the loop re-rolls (reroll.MIN_RUN)."""
    w = data.draw(st.sampled_from([1, 2, 3]))
    V = data.draw(st.integers(24, 40))
    size = math.prod(sa) if sa else 1
    k = (V * w) // size + 1
    m = prog.new((V * w,), f"np.concatenate([np.ravel({a})] * {k})[:{V * w}] * 0.6", "graph")
    rng = random.Random(data.draw(st.integers(0, 2**16)))
    p = data.draw(st.sampled_from([0.3, 0.6, 1.0]))
    table = [None] + [
        rng.randrange(0, v - 1) if v >= 2 and rng.random() < p else None for v in range(1, V)
    ]
    op = data.draw(st.sampled_from(["np.tanh({x})", "np.sin({x}) * 0.8", "{x} / (1.0 + {x} * {x})"]))
    v, outs, tab = f"v{prog.k}", f"outs{prog.k}", f"skip{prog.k}"
    prog.k += 1
    prog.lines.append(f"    {tab} = {table!r}")
    prog.lines.append(f"    {outs} = [np.tanh({m}[0:{w}])]")
    prog.lines.append(f"    for u in range(1, {V}):")
    prog.lines.append(f"        s = {outs}[u - 1]")
    prog.lines.append(f"        if {tab}[u] is not None:")
    prog.lines.append(f"            s = s + {outs}[{tab}[u]]")
    x = f"{m}[u * {w} : (u + 1) * {w}] * s + 0.1"
    prog.lines.append(f"        {outs}.append({op.format(x=f'({x})')})")
    prog.lines.append(f"    {v} = np.sum({outs}[-1]) + 0.1 * np.sum({outs}[{V // 2}])")
    prog.shapes[v] = ()
    prog.features.add("graph")


def _pick(data, prog: Program, want=None) -> str | None:
    names = [n for n, s in prog.shapes.items() if want is None or want(s)]
    return data.draw(st.sampled_from(names)) if names else None


def _statement(data, prog: Program) -> None:
    kind = data.draw(
        st.sampled_from(
            ["unary", "unary", "binary", "binary", "reduce", "index", "inplace", "matmul",
             "where", "guard", "pyloop", "pyguard", "fori", "scan", "while", "kink", "assemble",
             "capture", "ragged", "graph", "converted", "converted"]
        )
    )  # fmt: skip
    a = _pick(data, prog)
    sa = prog.shapes[a]
    if kind == "unary":
        tmpl = data.draw(st.sampled_from(UNARY))
        if "cumsum" in tmpl and len(sa) != 1:
            tmpl = "np.sin({a})"
        prog.new(sa, tmpl.format(a=a), "unary")
    elif kind == "kink":
        prog.new(sa, data.draw(st.sampled_from(KINKED_UNARY)).format(a=a), "kink")
    elif kind in ("binary", "where"):
        b = _pick(data, prog, lambda s: broadcast(s, sa) is not None)
        shape = broadcast(sa, prog.shapes[b])
        tmpl = BINARY[6] if kind == "where" else data.draw(st.sampled_from(BINARY))
        prog.new(shape, tmpl.format(a=a, b=b), kind)
    elif kind == "reduce":
        fn = data.draw(st.sampled_from(["np.sum", "np.mean", "np.max", "np.min", "np.var", "np.prod"]))
        if not sa or data.draw(st.booleans()):
            arg = f"np.tanh({a})" if fn == "np.prod" else a
            prog.new((), f"{fn}({arg})", "reduce")
        else:
            ax = data.draw(st.integers(-len(sa), len(sa) - 1))
            keep = data.draw(st.booleans())
            shape = tuple(1 if i == ax % len(sa) else d for i, d in enumerate(sa)) if keep else tuple(
                d for i, d in enumerate(sa) if i != ax % len(sa)
            )
            arg = f"np.tanh({a})" if fn == "np.prod" else a
            prog.new(shape, f"{fn}({arg}, axis={ax}, keepdims={keep})", "reduce")
    elif kind == "index":
        if not sa:
            prog.new((), f"{a} * 1.5", "index")
            return
        d0 = sa[0]
        form = data.draw(st.sampled_from(["int", "slice", "neg", "T", "reshape", "gather", "newaxis"]))
        if form == "int":
            i = data.draw(st.integers(-d0, d0 - 1))
            prog.new(sa[1:], f"{a}[{i}]", "index")
        elif form == "slice":
            lo = data.draw(st.integers(0, d0 - 1))
            hi = data.draw(st.integers(lo + 1, d0))
            step = data.draw(st.integers(1, 3))
            prog.new((len(range(lo, hi, step)),) + sa[1:], f"{a}[{lo}:{hi}:{step}]", "index")
        elif form == "neg":
            prog.new(sa, f"{a}[::-1]", "index")
        elif form == "T":
            prog.new(tuple(reversed(sa)), f"{a}.T", "index")
        elif form == "reshape":
            n = 1
            for d in sa:
                n *= d
            prog.new((n,), f"{a}.reshape(-1)", "index")
        elif form == "gather":
            # up to 12 positions, negative ones too: from 8 on, one take (tapejit/core/ops_table.py)
            idx = data.draw(st.lists(st.integers(-d0, d0 - 1), min_size=1, max_size=12))
            prog.new((len(idx),) + sa[1:], f"{a}[{idx}]", "gather")
        else:
            prog.new((1,) + sa, f"{a}[None]", "index")
    elif kind == "inplace":
        if not sa:
            prog.new((), f"{a} + 0.5", "inplace")
            return
        name = f"v{prog.k}"
        start = data.draw(st.sampled_from([f"np.zeros_like({a})", f"{a}.copy()", f"{a} * 1.0"]))
        prog.lines.append(f"    {name} = {start}")
        prog.k += 1
        prog.shapes[name] = sa
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, sa[0] - 1))
            src = _pick(data, prog, lambda s: broadcast(s, sa[1:]) == sa[1:]) or "0.5"
            op = data.draw(st.sampled_from(["=", "+=", "*=", "-="]))
            key = data.draw(st.sampled_from([f"{i}", f"{i}:{i + 1}", f"{i}:"]))
            prog.lines.append(f"    {name}[{key}] {op} np.tanh({src})")
        prog.features.add("inplace")
    elif kind == "matmul":
        if len(sa) == 2:
            b = _pick(data, prog, lambda s: len(s) in (1, 2) and s[0] == sa[1])
            if b is not None:
                sb = prog.shapes[b]
                prog.new(sa[:1] + sb[1:], f"{a} @ {b}", "matmul")
                return
        if len(sa) == 1:
            prog.new((), f"{a} @ np.tanh({a})", "matmul")
        else:
            prog.new(sa, f"{a} * 2.0", "matmul")
    elif kind == "guard":
        prog.lines.append(f"    if np.sum({a}) > 0.3:")
        prog.lines.append(f"        v{prog.k} = np.sin({a}) * 2.0")
        prog.lines.append("    else:")
        prog.lines.append(f"        v{prog.k} = {a} * {a} - 1.0")
        prog.shapes[f"v{prog.k}"] = sa
        prog.k += 1
        prog.features.add("guard")
    elif kind == "pyloop":
        if len(sa) != 1:
            prog.new(sa, f"np.cos({a})", "pyloop")
            return
        name = f"v{prog.k}"
        prog.k += 1
        prog.lines.append(f"    {name} = 0.0")
        prog.lines.append(f"    for i in range(len({a})):")
        prog.lines.append(f"        {name} = {name} * 0.5 + np.sin({a}[i]) * (i + 1.0)")
        prog.shapes[name] = ()
        prog.features.add("pyloop")
    elif kind == "pyguard":  # a branch per element: guards that roll when a run agrees
        if len(sa) != 1:
            prog.new(sa, f"np.sin({a}) * 0.5", "pyguard")
            return
        name = f"v{prog.k}"
        prog.k += 1
        cut = data.draw(st.sampled_from(["-5.0", "0.0", "0.3"]))
        form = data.draw(st.sampled_from(["max", "if", "fill", "table", "assemble"]))
        n = sa[0]
        # positions from a literal table (a mesh's connectivity, a neighbour list): rows that
        # move other than by a step, read through a table (take) and added with add_at
        table = data.draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
        lines = prog.lines
        if form == "fill":  # an array filled by branches (put, grouped by shape)
            lines.append(f"    {name}_y = np.zeros_like({a})")
            lines.append(f"    for i in range(len({a})):")
            lines.append(f"        if {a}[i] > {cut}:")
            lines.append(f"            {name}_y[i] = {a}[i] * {a}[i]")
            lines.append("        else:")
            lines.append(f"            {name}_y[i] = np.cos({a}[i])")
            lines.append(f"    {name} = np.sum({name}_y * {a})")
        elif form == "assemble":  # additions at rows from a table, by branch
            lines.append(f"    {name}_t = {table}")
            lines.append(f"    {name}_f = np.zeros_like({a})")
            lines.append(f"    for i in range(len({a})):")
            lines.append(f"        if {a}[i] > {cut}:")
            lines.append(f"            {name}_f[{name}_t[i]] += np.sin({a}[i])")
            lines.append("        else:")
            lines.append(f"            {name}_f[{name}_t[i]] -= {a}[i] * 0.5")
            lines.append(f"    {name} = np.sum({name}_f * {name}_f)")
        else:
            lines.append(f"    {name} = 0.0")
            if form == "table":
                lines.append(f"    {name}_t = {table}")
            lines.append(f"    for i in range(len({a})):")
            at = f"{name}_t[i]" if form == "table" else "i"
            if form == "max":
                lines.append(f"        {name} = {name} + max({a}[{at}], {cut}) ** 2")
            else:
                lines.append(f"        if {a}[{at}] > {cut}:")
                lines.append(f"            {name} = {name} + np.sin({a}[{at}]) * {a}[i]")
                lines.append("        else:")
                lines.append(f"            {name} = {name} - {a}[{at}] * 0.5")
        prog.shapes[name] = ()
        prog.features.add("pyguard")
    elif kind == "capture":
        _capture_loop(data, prog, a, sa)
    elif kind == "ragged":
        _ragged_loop(data, prog, a, sa)
    elif kind == "converted":
        _converted_loop(data, prog, a, sa)
    elif kind == "graph":
        _graph_loop(data, prog, a, sa)
    elif kind == "fori":
        prog.new(sa, f"tj.fori_loop(0, 3, lambda i, c: c * 0.8 + np.sin(c) * 0.1 + i * 0.01, {a})", "fori")
    elif kind == "scan":
        if len(sa) < 1:
            prog.new(sa, f"{a} * 0.3", "scan")
            return
        name = f"v{prog.k}"
        prog.k += 1
        init = f"np.zeros_like({a}[0])"
        prog.lines.append(
            f"    {name}, _ys = tj.scan(lambda c, xt: (c * 0.5 + np.tanh(xt), np.sum(c * xt)), {init}, {a})"
        )
        prog.shapes[name] = sa[1:]
        prog.features.add("scan")
    elif kind == "while":
        prog.new(
            sa,
            f"tj.while_loop(lambda c: np.sum(c * c) > 0.05, lambda c: c * 0.7, {a} + 0.1, max_steps=64)",
            "while",
        )
    elif kind == "assemble":
        b = _pick(data, prog, lambda s: s == sa)
        if not sa:
            prog.new((2,), f"np.stack([{a}, {b}])", "assemble")
        else:
            prog.new((2 * sa[0],) + sa[1:], f"np.concatenate([{a}, np.sin({b})])", "assemble")


SHAPES = st.one_of(
    st.just(()),
    st.tuples(st.integers(1, 6)),
    st.tuples(st.integers(1, 4), st.integers(1, 4)),
    st.tuples(st.integers(1, 40)),
)


def program(data) -> tuple[str, list[tuple[str, tuple]], set[str]]:
    """Draw a program: its source, its arguments (name, shape), and the features it uses."""
    n_args = data.draw(st.integers(1, 2))
    args = [(n, data.draw(SHAPES)) for n in ("x", "y")[:n_args]]
    prog = Program(args)
    prog.shapes.update(dict(args))
    for _ in range(data.draw(st.integers(1, 7))):
        _statement(data, prog)
    # the result uses every variable, each with a distinct weight
    terms = [f"np.sum({n}) * {0.3 + 0.1 * k:.1f}" for k, n in enumerate(prog.shapes)]
    return prog.source(" + ".join(terms)), args, prog.features
