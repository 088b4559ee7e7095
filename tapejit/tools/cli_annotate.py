"""``tapejit dump --stage asm``: the host assembly annotated with the plan. Before each function a
comment names the part of the plan it implements (a kernel, a loop body, the entry point and its
chunks, the call-tape walker, the math library) and, indented, what LLVM inlined into it; the
names are those ``tapejit dump --stage plan`` prints. :func:`annotate_asm` learns who computes
what by lowering the plan again (lowering is deterministic).

May import: anything of tapejit (as :mod:`tapejit.tools`).
"""

from __future__ import annotations

import re
from typing import Any

from ..core.ops import Op

def entry_symbol(graph) -> str:
    """The symbol of the compiled gradient's entry function for a graph of the pipeline (the
    name ``tapejit.compile`` gives it: ``tj_`` and the traced function's name)."""
    try:
        from ..pipeline import symbol_of
    except ImportError:  # the rule, should the pipeline module move
        return f"tj_{graph.name}".replace("<", "_").replace(">", "_")
    return symbol_of(graph)


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
    — numbering steps as ``codegen/lower/chunks.py`` does when it splits straight-line code into
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
    from ..codegen.lower import lower

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
