"""``tapejit ops``: the table of primitives (Markdown) — each op's group, the numpy names it
answers to, its reverse- and forward-mode rules and its accuracy (README keeps a copy that
``tests/test_docs.py`` checks).

May import: anything of tapejit (as :mod:`tapejit.tools`).
"""

from __future__ import annotations

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
