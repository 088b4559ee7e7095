"""The primitive is the unit of definition: one block in tapejit/ops.py plus one row in each
codegen registry. This test names every layer that has no row for an op, so forgetting one fails
here instead of silently (an op without a tracer alias raised "not supported"; one without a cost
defaulted to 1; one without a lowering row miscompiled)."""

from __future__ import annotations

import numpy as np
import pytest

from tapejit import numpy_api, ops  # isort: skip  (first: codegen imports tapejit)
from tapejit.codegen import lower, mathlib  # isort: skip

OPS = sorted(ops.OPS)


def missing_layers(name: str) -> list[str]:
    op = ops.OPS[name]
    gaps = []
    if op.group != "leaf":
        if op.ref is None:
            gaps.append("the interpreter (OpDef.ref)")
        if op.vjp is None:
            gaps.append("reverse mode (OpDef.vjp)")
    if op.group in ("unary", "binary", "compare", "logical", "select", "cast"):
        if name not in lower.EMIT:
            gaps.append("codegen/lower.py EMIT")
    elif op.group not in lower.LOWER:
        gaps.append("codegen/lower.py LOWER")
    if op.cost >= 10 and op.group in ("unary", "binary"):  # polynomial math
        row = mathlib.MATH.get(name)
        if row is None:
            gaps.append("codegen/mathlib.py MATH")
        elif row.body is not None and not (row.domains and row.ulp is not None and row.ulp_ld):
            gaps.append("codegen/mathlib.py MATH (accuracy domains and ulp bounds)")
    for alias in op.numpy:
        if not isinstance(getattr(np, alias, None), np.ufunc):
            gaps.append(f"numpy (no ufunc numpy.{alias})")
        elif alias not in numpy_api.UFUNCS:
            gaps.append(f"the tracer (numpy_api.UFUNCS['{alias}'])")
    return gaps


@pytest.mark.parametrize("name", OPS)
def test_every_layer_has_a_row_for_the_op(name):
    gaps = missing_layers(name)
    assert not gaps, "; ".join(f"{layer} has no row for op {name}" for layer in gaps)


def test_the_check_names_a_missing_layer(monkeypatch):
    """Defining an op in ops.py alone is caught, naming each layer."""
    monkeypatch.setitem(
        ops.OPS,
        "spacing",
        ops.OpDef("spacing", "unary", 1, ops.OPS["exp"].type_rule, ops.OPS["exp"].ref, None,
                  ("spacing",), 20),  # fmt: skip
    )
    gaps = missing_layers("spacing")
    assert "codegen/lower.py EMIT" in gaps
    assert "codegen/mathlib.py MATH" in gaps
    assert "reverse mode (OpDef.vjp)" in gaps
    assert "the tracer (numpy_api.UFUNCS['spacing'])" in gaps


def test_groups_partition_the_ops():
    groups = [ops.ELEMENTWISE, ops.REDUCE, ops.SHAPE, ops.INDEX, ops.LINALG, ops.CONTROL, ops.LEAF]
    flat = [n for g in groups for n in g]
    assert sorted(flat) == OPS and len(flat) == len(set(flat))
    assert set(ops.SCATTER) <= set(ops.INDEX)
    assert all(ops.Op[n.upper()] == n for n in OPS)


def test_an_op_cannot_be_defined_twice():
    with pytest.raises(ValueError, match="defined twice"):
        ops.defop("exp", "unary", 1, ops.OPS["exp"].type_rule, ops.OPS["exp"].ref)
