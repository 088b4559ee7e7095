"""The primitive is the unit of definition: one block in tapejit/core/ops.py plus one row in each
codegen registry. This test names every layer that has no row for an op, so forgetting one fails
here instead of silently (an op without a tracer alias raised "not supported"; one without a cost
defaulted to 1; one without a lowering row miscompiled)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from tapejit.frontend.numpy import numpy_api
from tapejit.core import ops  # isort: skip  (first: codegen imports tapejit)
from tapejit.codegen import lower
from tapejit.codegen.mathlib import core as mathlib  # isort: skip

OPS = sorted(ops.OPS)


def missing_layers(name: str) -> list[str]:
    op = ops.OPS[name]
    gaps = []
    if op.group != "leaf":
        if op.ref is None:
            gaps.append("the interpreter (OpDef.ref)")
        if op.vjp is None:
            gaps.append("reverse mode (OpDef.vjp)")
        if op.jvp is None:
            gaps.append("forward mode")  # OpDef.jvp, the rule of tapejit/ad/forward.py
    if op.group in ("unary", "binary", "compare", "logical", "select", "cast"):
        if name not in lower.EMIT:
            gaps.append("codegen/lower EMIT")
    elif op.group not in lower.LOWER and name not in ops.CUSTOM:  # simplify inlines them
        gaps.append("codegen/lower LOWER")
    if op.cost >= 10 and op.group in ("unary", "binary"):  # polynomial math
        row = mathlib.MATH.get(name)
        if row is None:
            gaps.append("codegen/mathlib/core.py MATH")
        elif row.body is not None and not (row.domains and row.ulp is not None and row.ulp_ld):
            gaps.append("codegen/mathlib/core.py MATH (accuracy domains and ulp bounds)")
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
    assert "codegen/lower EMIT" in gaps
    assert "codegen/mathlib/core.py MATH" in gaps
    assert "reverse mode (OpDef.vjp)" in gaps
    assert "forward mode" in gaps
    assert "the tracer (numpy_api.UFUNCS['spacing'])" in gaps


def test_forward_mode_has_a_row_for_every_differentiable_op(monkeypatch):
    """Every differentiable op has a JVP rule; a piecewise-constant op gets the zero-tangent
    rule from defop; an op without a rule fails the layer check by name, and forward mode
    raises RuleError naming it."""
    from tapejit.ad import forward
    from tapejit.core.ir import Graph

    missing = [n for n in OPS if ops.OPS[n].group != "leaf" and ops.OPS[n].jvp is None]
    assert not missing, "; ".join(f"forward mode has no row for op {n}" for n in missing)
    for n in ops.NONDIFFERENTIABLE:
        assert ops.OPS[n].jvp((ops.const(1.0),), ops.const(0.0), ops.const(1.0)) is None
    monkeypatch.setitem(ops.OPS, "exp", dataclasses.replace(ops.OPS["exp"], jvp=None))
    assert "forward mode has no row for op exp" in [
        f"{layer} has no row for op exp" for layer in missing_layers("exp")
    ]
    x = ops.input_node(0, "x", ops.Type(()))
    with pytest.raises(ops.RuleError, match="op 'exp' has no JVP rule"):
        forward.jvp_graph(Graph("f", (x,), ("active",), (ops.elementwise("exp", x),)))


def test_groups_partition_the_ops():
    groups = [ops.ELEMENTWISE, ops.REDUCE, ops.SHAPE, ops.INDEX, ops.LINALG, ops.CONTROL,
              ops.CUSTOM, ops.LEAF]  # fmt: skip
    flat = [n for g in groups for n in g]
    assert sorted(flat) == OPS and len(flat) == len(set(flat))
    assert set(ops.SCATTER) <= set(ops.INDEX)
    assert all(ops.Op[n.upper()] == n for n in OPS)


def test_an_op_cannot_be_defined_twice():
    with pytest.raises(ValueError, match="defined twice"):
        ops.defop("exp", "unary", 1, ops.OPS["exp"].type_rule, ops.OPS["exp"].ref)


def test_op_is_a_static_enum_of_every_defined_op():
    """``ops.Op`` is written out as a class (tools and readers see its members); it names every
    op of the table, in table order, and its members are the plain names the IR prints."""
    assert [m.value for m in ops.Op] == list(ops.OPS)
    assert ops.Op.EXP == "exp" and f"{ops.Op.REDUCE_SUM}" == "reduce_sum"
    node = ops.make(ops.Op.NEG, ops.const(1.0))
    assert type(node.op) is str and node is ops.make("neg", ops.const(1.0))
    with pytest.raises(ValueError, match="no member in tapejit.core.ops.Op"):
        ops.defop("spacing", "unary", 1, ops.OPS["exp"].type_rule, ops.OPS["exp"].ref)
    assert "spacing" not in ops.OPS


# -- ops are named through ops.Op, never by string literals ------------------------------------

ROOT = Path(__file__).resolve().parents[1]

#: Files allowed to compare ``.op`` with strings: ``ir.py`` may not import ``ops`` (the
#: dependency is ``ir`` <- ``ops``), and it names only the leaves ``input``/``const``.
NOT_YET_MIGRATED = {"tapejit/core/ir.py"}


def _is_op_ref(node: ast.AST) -> bool:
    """``X.op`` or a variable called ``op``."""
    return (isinstance(node, ast.Attribute) and node.attr == "op") or (
        isinstance(node, ast.Name) and node.id == "op"
    )


def _op_names(node: ast.AST) -> list[str]:
    """The op names among the string literals of ``node`` (a literal, or a tuple, list or set
    of them)."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [
        e.value
        for e in items
        if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in ops.OPS
    ]


def op_name_strings(source: str, filename: str) -> list[str]:
    """``file:line`` of each comparison of an op with a string literal naming an op:
    ``X.op == "exp"``, ``X.op != "exp"``, ``X.op in ("exp", ...)``, ``X.op not in (...)`` (either
    side; also a variable called ``op``)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for left, cmp, right in zip(operands, node.ops, operands[1:]):
            if isinstance(cmp, (ast.Eq, ast.NotEq)):
                pairs = [(left, right), (right, left)]
            elif isinstance(cmp, (ast.In, ast.NotIn)):
                pairs = [(left, right)]
            else:
                continue
            for ref, lit in pairs:
                names = _op_names(lit) if _is_op_ref(ref) else []
                if names:
                    found.append(f"{filename}:{node.lineno}: {ast.unparse(node)} (use ops.Op)")
    return found


def _sources():
    for top in ("tapejit", "codegen"):
        for path in sorted((ROOT / top).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text()


def test_no_op_name_strings():
    """Ops are compared through ``ops.Op`` (``n.op == Op.CONST``) or a group of ``ops``
    (``n.op in ops.SCATTER``), never with a string literal: a renamed or mistyped op name in
    a string would silently never match."""
    found = []
    for name, source in _sources():
        if name not in NOT_YET_MIGRATED:
            found += op_name_strings(source, name)
    assert not found, "op names compared as strings:\n" + "\n".join(found)


def test_the_op_name_check_names_each_form():
    source = (
        "if n.op == 'exp': pass\n"
        "if 'const' != a.op: pass\n"
        "if k.op.op in ('loop', 'x'): pass\n"
        "if n.op not in ['input']: pass\n"
        "if op == 'mul': pass\n"
        "if n.op == Op.EXP or n.op in ops.SCATTER or n.op == 'no-such-op': pass\n"
        "if kind == 'const' or name in ('exp',): pass\n"
    )
    found = op_name_strings(source, "m.py")
    assert [f.split(":")[1] for f in found] == ["1", "2", "3", "4", "5"], found
    assert found[0] == "m.py:1: n.op == 'exp' (use ops.Op)"
