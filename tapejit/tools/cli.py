"""Command line: ``tapejit dump FILE.py:FUNC --arg SPEC ... --stage STAGE [--format F]``,
``tapejit stats ... [--json]``, ``tapejit cache info|clear``, ``tapejit ops`` (the table of
primitives). ``tapejit --help`` lists the commands and the stages.

The stages are the pipeline's stages (:data:`tapejit.STAGES`, described in :data:`STAGE_HELP`):
``trace`` (forward graph), ``grad`` (joint graph after reverse mode), ``opt`` (after the
passes), ``plan`` (schedule + memory plan), ``llvm`` (lowered LLVM IR), ``llvm-opt`` (after
LLVM's O3 pipeline), ``asm`` (host assembly, each function headed by a comment naming the part
of the plan it implements: :func:`annotate_asm`).

``--format dot`` prints the trace/grad/opt/plan stage as Graphviz DOT (:mod:`tapejit.tools.dot`);
``--format svg|png -o FILE`` renders it with the optional ``graphviz`` package and Graphviz's
``dot`` program (exit status 2 and a message saying what to install when either is missing).
``tapejit stats`` prints an aligned table (:func:`format_stats`); ``--json`` prints
``grad.stats`` as JSON.

An ``--arg`` SPEC is ``f64[d0,d1,...]`` (``f64`` or ``f64[]`` for a scalar); example inputs are
drawn uniformly from [0.1, 1) with a fixed seed (a positive range keeps log/sqrt models defined).
Failures print one ``tapejit: error: ...`` line on stderr: exit status 1 when FUNC cannot be
loaded or compiled, 2 for bad usage and missing optional software.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from ..core.ops import Op

_SPEC = re.compile(r"^f64(?:\[([0-9,\s]*)\])?$")


def parse_spec(spec: str) -> tuple[int, ...]:
    """``'f64[3,4]'`` -> ``(3, 4)``; raises ``ValueError`` with the accepted grammar."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise ValueError(f"bad --arg {spec!r}: expected f64, f64[] or f64[d0,d1,...]")
    dims = [d for d in (m.group(1) or "").replace(" ", "").split(",") if d]
    return tuple(int(d) for d in dims)


def load_function(target: str):
    """Import ``FILE.py:FUNC`` and return the function."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"bad target {target!r}: expected FILE.py:FUNC")
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(f"_tapejit_target_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"{path} has no function {name!r}")
    return fn


# -- stages and their one-line descriptions ---------------------------------------------------

#: What each stage of :data:`tapejit.STAGES` shows (``tapejit --help`` prints this table).
STAGE_HELP = {
    "trace": "the forward graph traced from FUNC (SSA IR; loop bodies printed under their loop)",
    "grad": "the joint forward + backward graph that reverse mode builds",
    "opt": "the joint graph after the passes (simplification, constant folding, DCE)",
    "plan": "the schedule: fused loop kernels, straight-line code and the memory plan",
    "llvm": "the LLVM IR lowered from the plan, before LLVM optimises it",
    "llvm-opt": "the LLVM IR after LLVM's O3 pipeline",
    "asm": "host assembly; each function headed by a comment naming the plan part it runs",
}

#: The stages ``--format dot|svg|png`` can draw (graphs and the plan; the rest is text).
DOT_STAGES = ("trace", "grad", "opt", "plan")
FORMATS = ("text", "dot", "svg", "png")
PICTURES = ("svg", "png")

#: What to install for ``--format svg|png`` (the error messages when either is missing).
DOT_PROGRAM_HINT = (
    "install Graphviz (apt-get install graphviz, dnf install graphviz, brew install graphviz, "
    "or https://graphviz.org/download/)"
)
GRAPHVIZ_HINT = (
    f"pip install graphviz (the Python package); it runs Graphviz's 'dot' program: "
    f"{DOT_PROGRAM_HINT}"
)


def _stages() -> tuple[str, ...]:
    import tapejit

    return tuple(tapejit.STAGES)


def stages_help() -> str:
    """One line per stage of :data:`tapejit.STAGES`, in pipeline order."""
    stages = _stages()
    width = max(map(len, stages))
    return "\n".join(f"  {s:<{width}}  {STAGE_HELP.get(s, '(see README.md)')}" for s in stages)


# -- the example inputs and the pipeline --------------------------------------------------------


def _example_args(specs: list[str]) -> list:
    """The seeded example inputs for ``--arg`` specs (uniform in [0.1, 1))."""
    rng = np.random.default_rng(0)
    args = []
    for spec in specs:
        shape = parse_spec(spec)
        args.append(rng.uniform(0.1, 1.0, shape) if shape else float(rng.uniform(0.1, 1.0)))
    if not args:
        raise ValueError("give at least one --arg, e.g. --arg 'f64[100]'")
    return args


def _argnums(given: list[int] | None, nargs: int) -> tuple[int, ...]:
    """``--argnums`` as non-negative positions (the checks ``tapejit.compile`` makes)."""
    nums = tuple(given) if given else (0,)
    out = []
    for a in nums:
        if not -nargs <= a < nargs:
            raise ValueError(f"argnums entry {a!r} is not a valid index for {nargs} arguments")
        out.append(a % nargs)
    if len(set(out)) != len(out):
        raise ValueError(f"argnums {nums} repeats an argument")
    return tuple(out)


def _compile(ns):
    import tapejit

    fn = load_function(ns.target)
    args = _example_args(ns.arg)
    argnums = tuple(ns.argnums) if ns.argnums else 0
    return tapejit.compile(fn, *args, argnums=argnums)


def front_end(fn, args: list, argnums: tuple[int, ...], upto: str = "plan") -> dict[str, Any]:
    """The pipeline's objects up to stage ``upto`` (``trace``, ``grad``, ``opt``, ``plan``):
    the same pure functions ``tapejit.compile`` runs, so the same graphs and plan it compiles
    (the IR is deterministic), without LLVM."""
    from .. import pipeline
    from ..frontend import tracing
    from ..passes import trace_passes

    trace, _ = trace_passes(tracing.trace(fn, args, argnums))
    if upto == "trace":
        return {"trace": trace}
    f = pipeline.front(trace, argnums)
    return {"trace": trace, "grad": f.grad, "opt": f.opt, "plan": f.plan}


def entry_symbol(graph) -> str:
    """The symbol of the compiled gradient's entry function for a graph of the pipeline (the
    name ``tapejit.compile`` gives it: ``tj_`` and the traced function's name)."""
    try:
        from ..pipeline import symbol_of
    except ImportError:  # the rule, should the pipeline module move
        return f"tj_{graph.name}".replace("<", "_").replace(">", "_")
    return symbol_of(graph)


# -- annotated assembly --------------------------------------------------------------------------

_ASM_FUNCTION = re.compile(r'^\s*\.type\s+"?([^",\s]+)"?\s*,\s*[@%#]function\b')
_ASM_LABEL = re.compile(r'^"?([^":\s]+)"?:')
_ASM_PREAMBLE = re.compile(
    r"^\s*\.(globl|global|p2align|align|local|weak|hidden|private_extern|section|text)\b"
)


def _ranges(ks: list[int]) -> str:
    """``[1, 2, 3, 7, 9, 11]`` -> ``'1-3, 7, 9, 11'``."""
    out, i = [], 0
    ks = sorted(set(ks))
    while i < len(ks):
        j = i
        while j + 1 < len(ks) and ks[j + 1] == ks[j] + 1:
            j += 1
        out.append(str(ks[i]) if j == i else f"{ks[i]}-{ks[j]}")
        i = j + 1
    return ", ".join(out)


def _op_list(nodes) -> str:
    """The ops of a fused loop body in order, repeats counted: ``exp, 2 mul, reduce_sum``."""
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.op] = counts.get(n.op, 0) + 1
    return ", ".join(op if c == 1 else f"{c} {op}" for op, c in counts.items())


def describe_kernel(prog, indices: list[int], names: dict[int, str]) -> str:
    """``kernel 3: loop [100]: exp, mul, reduce_sum`` (several indices: a function shared by
    structurally identical kernels)."""
    from .dot import loop_summary

    k = prog.kernels[indices[0]]
    head = f"kernel {indices[0]}" if len(indices) == 1 else f"kernels {_ranges(indices)}"
    if k.body:
        what = f"loop [{','.join(map(str, k.space or ()))}]: {_op_list(k.body)}"
    elif k.op is not None and k.op.op == Op.LOOP:
        what = f"{names.get(id(k.op), '%?')} = {loop_summary(k.op.attrs[0])}"
    elif k.op is not None:
        what = f"{k.op.op} {k.op.type} (own loop nest)"
    else:
        what = "straight-line code"
    return f"{head}: {what}"


def _plan_parts(prog) -> tuple[dict[int, tuple], dict[str, list[tuple]]]:
    """Every program of the plan (the top one and each loop's body and condition, recursively)
    as ``id(program) -> (program, where, names)`` — ``where`` is ``""`` for the top program,
    else e.g. ``loop body of %1`` — and ``repr(loop spec) -> [(reference, node, program)]``."""
    from ..core.ir import format_graph

    programs: dict[int, tuple] = {}
    loops: dict[str, list[tuple]] = {}

    def walk(p, where: str) -> None:
        names: dict[int, str] = {}
        format_graph(p.graph, names)  # the plan printer's names (%k)
        programs[id(p)] = (p, where, names)
        for n in p.graph.nodes:
            lp = p.loops.get(id(n))
            if lp is None:
                continue
            ref = names.get(id(n), "%?") + (f" in the {where}" if where else "")
            loops.setdefault(repr(n.attrs[0]), []).append((ref, n, p))
            walk(lp.body, f"loop body of {ref}")
            if lp.cond is not None:
                walk(lp.cond, f"loop condition of {ref}")

    walk(prog, "")
    return programs, loops


def _function_notes(module, prog, symbol: str) -> tuple[dict[str, list[str]], dict[str, set]]:
    """For every function of the lowered module: the lines describing the part of the plan it
    implements, and the functions it calls."""
    import llvmlite.ir as llir

    from .dot import loop_summary

    programs, loops = _plan_parts(prog)
    notes: dict[str, list[str]] = {}
    calls: dict[str, set] = {}
    for fn in module.functions:
        if not fn.blocks:  # a declaration (an LLVM intrinsic): not code of the plan
            continue
        calls[fn.name] = {
            ins.callee.name
            for block in fn.blocks
            for ins in block.instructions
            if isinstance(ins, llir.CallInstr) and isinstance(ins.callee, llir.Function)
        }
    # kernel functions: lower() records which (program, kernel) pairs each one computes
    for name, uses in module.__dict__.get("_tapejit_kernels", {}).items():
        by_prog: dict[int, list[int]] = {}
        for p, k in uses:
            j = next((j for j, kk in enumerate(p.kernels) if kk is k), None)
            if j is not None:
                by_prog.setdefault(id(p), []).append(j)
        lines = []
        for pid, js in by_prog.items():
            p, where, names = programs.get(pid, (None, "?", {}))
            if p is None:
                continue
            text = describe_kernel(p, js, names)
            lines.append(f"{where}: {text}" if where else text)
        notes[name] = lines
    # loop bodies and conditions: lower() keeps "body:<spec>" / "cond:<spec>" -> function
    sub_of: dict[str, Any] = {}
    for key, fn in module.__dict__.get("_tapejit_subs", {}).items():
        what, _, spec = key.partition(":")
        users = loops.get(spec, [])
        refs = " and ".join(ref for ref, _, _ in users) or "a loop"
        title = "loop body" if what == "body" else "loop condition"
        summary = loop_summary(users[0][1].attrs[0]) if users else ""
        notes[fn.name] = [f"{title} of {refs}" + (f" ({summary})" if summary else "")]
        if users:
            _, n, p = users[0]
            lp = p.loops[id(n)]
            sub_of[fn.name] = lp.body if what == "body" else lp.cond
    # loop nodes are lowered inline, into the function that runs their kernel's step
    chunk_re = re.compile(re.escape(symbol) + r"\.c(\d+)$")
    starts = sorted(
        [(0, symbol)] + [(int(m.group(1)), f) for f in calls if (m := chunk_re.match(f))]
    )
    step, owner = 0, {}
    for j, k in enumerate(prog.kernels):
        step += len(k.pre)
        if k.op is not None and k.op.op == Op.LOOP:
            owner[j] = max((s, f) for s, f in starts if s <= step)[1]
        if k.body or k.op is not None:
            step += 1
    names_top = programs[id(prog)][2]
    for j, f in owner.items():
        notes.setdefault(f, []).append(describe_kernel(prog, [j], names_top))
    for f, sub in sub_of.items():
        _, where, names = programs.get(id(sub), (None, "", {}))
        for j, k in enumerate(sub.kernels):
            if k.op is not None and k.op.op == Op.LOOP:
                notes[f].append(f"{where}: {describe_kernel(sub, [j], names)}")
    # the rest by name
    for s, f in starts:
        if f == symbol:
            notes.setdefault(f, []).insert(
                0, f"entry: {symbol}, the gradient function (straight-line code, kernel calls)"
            )
        else:
            notes.setdefault(f, []).insert(
                0, f"entry, continued: straight-line code from {_step_text(prog, s, names_top)}"
            )
    for f in calls:
        if f.endswith(".walk"):
            notes.setdefault(f, []).insert(
                0, "call-tape walker: runs kernel calls listed in a constant table"
            )
        elif f.startswith("tapejit.math."):
            notes.setdefault(f, [f"math library: {f[len('tapejit.math.') :]}"])
    notes.setdefault(
        symbol + "_fast", [f"fast-call entry: checks a Python call's arguments, then runs {symbol}"]
    )
    notes.setdefault(
        symbol + "_fast_vg",
        [f"fast-call entry (value and gradient): checks a Python call's arguments, then runs {symbol}"],
    )
    notes.setdefault(symbol + "_batch", [f"batch entry: runs {symbol} once per row of a batch"])
    return notes, calls


def _step_text(prog, step: int, names: dict[int, str]) -> str:
    """Where step ``step`` of the plan is — ``%12 (kernel 0, before its loop)`` or ``kernel 3``
    — numbering steps as ``codegen/lower/driver.py`` does when it splits straight-line code into
    chunks: each straight-line node, then each kernel's loop, is one step."""
    s = 0
    for j, k in enumerate(prog.kernels):
        if step < s + len(k.pre):
            n = k.pre[step - s]
            return f"{names.get(id(n), '%?')} on (kernel {j}, before its loop)"
        s += len(k.pre)
        if k.body or k.op is not None:
            if step == s:
                return f"kernel {j} on"
            s += 1
    return "the end of the plan"


def _natural(name: str) -> list:
    """Sort key: ``tj_f.k2`` before ``tj_f.k10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def annotate_asm(asm: str, prog, symbol: str | None = None) -> str:
    """``asm`` (``grad.ir("asm")``) with a comment before each function naming the part of the
    plan ``prog`` it implements: ``# kernel 3: loop [100]: exp, mul, reduce_sum``, ``# loop
    body of %12 (...)``, ``# entry: ...``; below it, indented, what LLVM inlined into it
    (``#   inlined: kernel 0: ...``). The names are those of ``tapejit dump --stage plan``.

    It lowers ``prog`` again (``codegen/lower/driver.py`` is deterministic: the same symbols as the
    compiled code) to learn which plan kernels each function computes and who calls whom.
    """
    from ..codegen.lower.driver import lower

    symbol = symbol or entry_symbol(prog.graph)
    module, _ = lower(prog, symbol)
    notes, calls = _function_notes(module, prog, symbol)
    lines = asm.split("\n")
    points: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        m = _ASM_FUNCTION.match(line)
        if m:
            points.append((i, m.group(1)))
    if not points:  # no .type directives (Mach-O, COFF): the labels of known functions
        for i, line in enumerate(lines):
            m = _ASM_LABEL.match(line)
            if m:
                name = m.group(1)
                if name not in notes and name.startswith("_") and name[1:] in notes:
                    name = name[1:]
                if name in notes:
                    points.append((i, name))
    present = {name for _, name in points}

    def header(name: str) -> list[str]:
        own = notes.get(name)
        if own is None:  # e.g. a copy LLVM specialised: named after its original
            base = max((k for k in notes if name.startswith(k + ".")), key=len, default=None)
            own = [f"{notes[base][0]} (a copy LLVM made of {base})"] if base else []
        out = [f"# {own[0]}"] if own else [f"# {name}: not from the plan"]
        out += [f"#   {text}" for text in own[1:]]
        seen: set[str] = {name}
        stack = sorted(calls.get(name, ()), key=_natural, reverse=True)
        while stack:  # functions LLVM inlined here (absent from the assembly), transitively
            f = stack.pop()
            if f in seen or f in present:
                continue
            seen.add(f)
            if notes.get(f) and not f.startswith("tapejit.math."):
                first, *rest = notes[f]
                out += [f"#   inlined: {first}", *(f"#     {text}" for text in rest)]
            stack.extend(sorted(calls.get(f, ()), key=_natural, reverse=True))
        return out

    for i, name in reversed(points):
        at = i
        while at > 0 and _ASM_PREAMBLE.match(lines[at - 1]):
            at -= 1
        lines[at:at] = header(name)
    return "\n".join(lines)


# -- statistics as a table ----------------------------------------------------------------------


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
    vw = max([len(r[1]) for r in rows] + [6])

    def block(name: str, rs: list[tuple[str, str, str]]) -> list[str]:
        out = [name]
        for label, value, note in rs:
            out.append(f"  {label:<{lw}}{value:>{vw}}" + (f"   {note}" if note else ""))
        return out

    out = [title, ""] if title else []
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
            out.append(f"{line}   {r[4]}".rstrip())
    if timing_rows:
        out += block("timings (ms)", timing_rows)
    if other:
        out += block("other", other)
    return "\n".join(out)


# -- pictures -----------------------------------------------------------------------------------


class RenderError(Exception):
    """``--format svg|png`` cannot render: the message says what to install."""


def render(dot_text: str, fmt: str) -> bytes:
    """``dot_text`` rendered by Graphviz to ``fmt`` (``svg``, ``png``) through the optional
    ``graphviz`` package; :class:`RenderError` naming what to install when the package or the
    ``dot`` program is missing."""
    try:
        import graphviz
    except ImportError:
        raise RenderError(
            f"--format {fmt} needs the optional 'graphviz' Python package: {GRAPHVIZ_HINT}"
        ) from None
    try:
        return graphviz.Source(dot_text).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise RenderError(
            f"--format {fmt} needs Graphviz's 'dot' program, which is not on PATH: "
            f"{DOT_PROGRAM_HINT}"
        ) from None
    except graphviz.CalledProcessError as e:  # a bug in the DOT text: say what dot said
        err = (e.stderr or b"").decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"Graphviz's dot failed: {err[0] if err else e}") from None


def _cache(action: str) -> int:
    from ..api import object_cache

    cache = object_cache(True)
    if cache is None:
        print("tapejit: the on-disk cache is disabled (TAPEJIT_CACHE=0)")
        return 0
    if action == "info":
        info = cache.info()
        print(
            f"directory: {info['directory']}\nentries:   {info['entries']}\nbytes:     {info['bytes']}"
        )
    else:
        print(f"removed {cache.clear()} entries from {cache.directory}")
    return 0


def primitives_markdown() -> str:
    """The table of primitives: each op's group, the numpy names it answers to, whether it has
    reverse- and forward-mode rules, and the accuracy its math row guarantees (README keeps a copy that
    ``tests/test_docs.py`` checks; ``tapejit ops`` prints it)."""
    from ..codegen.mathlib import core as mathlib
    from ..core import ops

    rows = [
        "| op | group | numpy names | reverse mode | forward mode | accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for name, op in ops.OPS.items():
        if op.group == "leaf":
            continue
        names = ", ".join(f"`{n}`" for n in op.numpy) or "–"
        if name in ops.CUSTOM:
            vjp = jvp = "the user's rule"
        elif name == ops.Op.STOP_GRADIENT:
            vjp, jvp = "no cotangent (by definition)", "zero tangent"
        elif op.differentiable:
            vjp, jvp = "yes", "yes" if op.jvp is not None else "no"
        else:
            vjp, jvp = "no cotangent (piecewise constant)", "zero tangent"
        m = mathlib.MATH.get(name)
        if m is not None and m.body is not None:
            acc = f"≤ {m.ulp_ld:g} ulp (vectorised IR)"
        elif m is not None:
            acc = f"exact (`{m.intrinsic}`)"
        else:
            acc = "IEEE arithmetic" if op.group in ("unary", "binary") else "–"
        rows.append(f"| `{name}` | {op.group} | {names} | {vjp} | {jvp} | {acc} |")
    return "\n".join(rows)


# -- the command line ---------------------------------------------------------------------------

_EXAMPLES = """\
examples:
  tapejit dump examples/eam.py:eam --arg 'f64[100]' --stage plan
  tapejit dump examples/eam.py:eam --arg 'f64[100]' --stage plan --format svg -o eam.svg
  tapejit dump examples/eam.py:eam --arg 'f64[100]' --stage asm
  tapejit stats examples/eam.py:eam --arg 'f64[100]'
  tapejit export examples/eam.py:eam --arg 'f64[100]' -o build
  tapejit cache info"""

_ARG_HELP = (
    "an argument of FUNC: f64 (or f64[]) for a scalar, f64[d0,d1,...] for an array; once per "
    "argument, in order. Example inputs are drawn uniformly from [0.1, 1) with a fixed seed"
)


def _para(text: str) -> str:
    return textwrap.fill(text, 88)


def _function_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments naming the function to compile: FILE.py:FUNC, --arg SPEC..., --argnums."""
    c.add_argument("target", metavar="FILE.py:FUNC", help="the function to differentiate")
    c.add_argument("--arg", action="append", default=[], metavar="SPEC", help=_ARG_HELP)
    c.add_argument(
        "--argnums",
        type=int,
        nargs="*",
        metavar="N",
        help="positions of the arguments to differentiate (default: 0)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``tapejit`` argument parser (its ``--help`` lists the commands and the stages)."""
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="tapejit",
        formatter_class=raw,
        description=_para(
            "Inspect how tapejit compiles the gradient of a numpy-style function: "
            "print any stage of the pipeline, draw its graphs, show compile statistics, manage "
            "the cache of compiled code."
        ),
        epilog=f"stages (tapejit dump --stage STAGE), in pipeline order:\n{stages_help()}\n\n"
        f"{_EXAMPLES}\n\nRun 'tapejit COMMAND --help' for the options of a command.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name in ("dump", "stats"):
        if name == "dump":
            c = sub.add_parser(
                "dump",
                formatter_class=raw,
                help="print one stage of FUNC's gradient: text, Graphviz DOT, SVG or PNG",
                description=_para(
                    "Compile the gradient of FUNC in FILE.py for the given argument "
                    "shapes and print one stage of the pipeline. The IR stages print as text "
                    "(loop bodies under their loop node); --format dot prints a Graphviz DOT graph "
                    "of the "
                    "trace, grad, opt or plan stage (in the plan, each fused loop kernel is a "
                    "cluster), --format svg|png renders it (needs the graphviz package and "
                    "Graphviz's dot program)."
                ),
                epilog=f"stages:\n{stages_help()}\n\n{_EXAMPLES}",
            )
            c.set_defaults(usage_error=c.error)
        else:
            c = sub.add_parser(
                "stats",
                formatter_class=raw,
                help="print compile statistics: nodes, kernels, memory, cache, pass and timings",
                description=_para(
                    "Compile the gradient of FUNC in FILE.py and print grad.stats: "
                    "node counts per stage, loop kernels and loop nodes, workspace and constant "
                    "bytes, cache hit or miss, what each pass did, and the time each compile "
                    "stage took (ms). --json prints the dict as JSON instead, for programs."
                ),
                epilog="example:\n  tapejit stats examples/eam.py:eam --arg 'f64[100]' --json",
            )
        _function_arguments(c)
        if name == "dump":
            c.add_argument(
                "--stage",
                choices=_stages(),
                default="grad",
                help="the stage to print (default: grad; the list is below)",
            )
            c.add_argument(
                "--format",
                choices=FORMATS,
                default="text",
                help="text (default); dot: Graphviz DOT of the trace, grad, opt or plan stage; "
                "svg, png: that graph rendered by Graphviz (needs -o FILE)",
            )
            c.add_argument(
                "-o",
                "--output",
                metavar="FILE",
                help="write to FILE instead of standard output (required for svg and png)",
            )
            c.add_argument(
                "--no-annotate",
                dest="annotate",
                action="store_false",
                help="asm stage: print the assembly exactly as grad.ir('asm'), without the "
                "comments naming the plan part of each function",
            )
        else:
            c.add_argument("--json", action="store_true", help="print grad.stats as JSON")
    c = sub.add_parser(
        "export",
        formatter_class=raw,
        help="write FUNC's gradient as an object file and a C header, for use from C",
        description=_para(
            "Compile the gradient of FUNC in FILE.py for the given argument shapes and write it "
            "as a relocatable object file (NAME.o, position-independent, for this CPU) and a C "
            "header (NAME.h: the signature, shapes, workspace size, guards and status codes); "
            "--shared also links libNAME.so with the system C compiler. Captured arrays are "
            "embedded in the object."
        ),
        epilog="example:\n  tapejit export examples/eam.py:eam --arg 'f64[100]' -o build --shared",
    )
    _function_arguments(c)
    c.add_argument(
        "-o", "--output", required=True, metavar="DIR",
        help="directory to write into (created if missing), or FILE.o to name the files",
    )  # fmt: skip
    c.add_argument("--name", help="the C function's name (default: FUNC)")
    c.add_argument("--shared", action="store_true", help="also link a shared library")
    c.set_defaults(usage_error=c.error)
    c = sub.add_parser(
        "cache",
        help="inspect or clear the on-disk cache of compiled code",
        description=_para(
            "info: where the cache of compiled machine code is, its entries and "
            "bytes; clear: remove every entry. $TAPEJIT_CACHE_DIR moves it, TAPEJIT_CACHE=0 "
            "turns it off."
        ),
    )
    c.add_argument("action", choices=("info", "clear"), help="info or clear")
    sub.add_parser(
        "ops",
        help="list the primitives: numpy names, reverse mode, accuracy",
        description=_para(
            "Print the table of primitive ops (Markdown): each op's group, the numpy "
            "names it answers to, whether it has a reverse-mode rule, and its accuracy."
        ),
    )
    return p


def _fail(message: str, status: int = 1) -> int:
    print(f"tapejit: error: {message}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "cache":
        return _cache(ns.action)
    if ns.command == "ops":
        return _emit(primitives_markdown())
    if ns.command == "export":
        return _export(ns)
    if ns.command == "stats":
        try:
            grad = _compile(ns)
        except Exception as e:  # the CLI reports any failure as one line, exit status 1
            return _fail(f"{type(e).__name__}: {e}")
        if ns.json:
            return _emit(json.dumps(grad.stats, indent=2, default=str))
        nums = _argnums(ns.argnums, len(ns.arg))
        title = f"{ns.target}({', '.join(ns.arg)}), gradient wrt argnums {nums}"
        return _emit(format_stats(grad.stats, title))
    return _dump(ns)


def _export(ns) -> int:
    """``tapejit export``: compile, then write the object file and header (and library)."""
    from ..runtime.export import SharedLibraryError

    try:
        grad = _compile(ns)
    except Exception as e:  # the CLI reports any failure as one line, exit status 1
        return _fail(f"{type(e).__name__}: {e}")
    try:
        result = grad.export(ns.output, name=ns.name, shared=ns.shared)
    except ValueError as e:
        ns.usage_error(str(e))
    except SharedLibraryError as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"{type(e).__name__}: {e}")
    written = [result.object, result.header] + ([result.shared] if result.shared else [])
    return _emit("\n".join(f"wrote {w}" for w in written))


def _dump(ns) -> int:
    fmt = ns.format
    if fmt != "text" and ns.stage not in DOT_STAGES:
        ns.usage_error(
            f"--format {fmt} draws the stages {', '.join(DOT_STAGES)}, not {ns.stage!r} "
            "(it is text: use --format text)"
        )
    if fmt in PICTURES and not ns.output:
        ns.usage_error(f"--format {fmt} writes a picture: give the file with -o FILE")
    try:
        if fmt == "text":
            grad = _compile(ns)
            text = grad.ir(ns.stage)
        else:
            fn = load_function(ns.target)
            args = _example_args(ns.arg)
            stages = front_end(fn, args, _argnums(ns.argnums, len(args)), upto=ns.stage)
            obj = stages[ns.stage]
            from .dot import to_dot

            title = None if ns.stage == "plan" else f"{obj.name}: {ns.stage}"
            text = to_dot(obj, title)
    except Exception as e:  # the CLI reports any failure as one line, exit status 1
        return _fail(f"{type(e).__name__}: {e}")
    if fmt == "text" and ns.stage == "asm" and ns.annotate:
        text = _annotated(text, ns)
    if fmt in PICTURES:
        try:
            data = render(text, fmt)
        except RenderError as e:
            return _fail(str(e), 2)
        except Exception as e:
            return _fail(f"{type(e).__name__}: {e}")
        return _write(ns.output, data)
    if ns.output:
        return _write(ns.output, (text + "\n").encode())
    return _emit(text)


def _annotated(asm: str, ns) -> str:
    """``asm`` annotated with the plan (the plan is rebuilt with the front end's pure
    functions); on any failure the plain assembly and a warning on stderr."""
    try:
        fn = load_function(ns.target)
        args = _example_args(ns.arg)
        prog = front_end(fn, args, _argnums(ns.argnums, len(args)))["plan"]
        return annotate_asm(asm, prog, entry_symbol(prog.graph))
    except Exception as e:  # an annotation is a convenience: never lose the assembly for it
        print(f"tapejit: warning: assembly not annotated: {type(e).__name__}: {e}", file=sys.stderr)
        return asm


def _write(path: str, data: bytes) -> int:
    try:
        Path(path).write_bytes(data)
    except OSError as e:
        return _fail(f"cannot write {path}: {e.strerror or e}")
    return 0


def _emit(text: str) -> int:
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`tapejit dump ... | head`): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
