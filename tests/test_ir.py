"""The IR contract: immutability, hash-consing (free CSE), printer and verifier."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tapejit.core import ops
from tapejit.frontend import tracing
from tapejit.core.ir import Graph, Node, Type, VerifyError, digest, format_graph, toposort, verify


def _x(shape=(4,)):
    return Node("input", (), (0, "x"), Type(shape, "f64"))


def test_nodes_are_hash_consed():
    x = _x()
    a = ops.mul(ops.elementwise("exp", x), x)
    b = ops.mul(ops.elementwise("exp", x), x)
    assert a is b
    assert ops.const(0.0) is ops.const(0.0)


def test_signed_zero_constants_stay_distinct():
    assert ops.const(0.0) is not ops.const(-0.0)


def test_intern_table_forgets_dead_nodes():
    """The table holds weak references and sweeps dead ones: compiling many models in one
    process must not keep every node ever built."""
    from tapejit.core import ir

    keep = ops.const(1.5)
    for i in range(300_000):
        ops.const(float(i) + 0.25)  # dropped at once
    assert len(ir._table) <= 2 * (1 << 16)
    assert ops.const(1.5) is keep


def test_intern_table_sweeps_while_other_threads_build_nodes(monkeypatch):
    """Sweeps run inside Node() of whichever thread crosses the threshold; other threads keep
    inserting meanwhile. Nothing may raise, and live nodes stay interned."""
    import threading

    from tapejit.core import ir

    monkeypatch.setattr(ir, "_sweep_at", [64])
    monkeypatch.setattr(ir, "_sweep", _small_sweep(ir._sweep))
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            x = Node("input", (), (k, f"t{k}"), Type((3,), "f64"))
            keep = ops.elementwise("exp", x)
            for i in range(20_000):
                ops.mul(x, ops.const(float(i)))  # dropped at once: garbage for the sweeps
                assert ops.elementwise("exp", x) is keep
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def _small_sweep(sweep):
    """``ir._sweep`` with a small next threshold, so the test sweeps often."""

    def small() -> None:
        from tapejit.core import ir

        sweep()
        ir._sweep_at[0] = len(ir._table) + 64

    return small


def test_commutative_operand_order_is_structural():
    """Canonical operand order comes from the operands' expressions (:func:`digest`), not from
    which was built first or from the process: two processes print the same graph, which is
    what the on-disk cache key needs."""
    x, y = _x(), Node("input", (), (1, "y"), Type((4,), "f64"))
    e, sn = ops.elementwise("exp", x), ops.elementwise("sin", y)
    s = ops.add(sn, e)
    assert ops.add(e, sn) is s
    assert digest(s.args[0]) < digest(s.args[1])
    code = (
        "from tapejit.core import ops; from tapejit.core.ir import Node, Type, digest;"
        "x = Node('input', (), (0, 'x'), Type((4,), 'f64'));"
        "y = Node('input', (), (1, 'y'), Type((4,), 'f64'));"
        "s = ops.add(ops.elementwise('exp', x), ops.elementwise('sin', y));"
        "print(digest(s).hex(), s.args[0].op)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout.split()
    assert out == [digest(s).hex(), s.args[0].op]


def test_nodes_are_immutable():
    n = ops.const(1.0)
    with pytest.raises(AttributeError):
        n.op = "add"  # type: ignore[misc]


def test_type_rules_reject_bad_operands():
    x, y = _x((3,)), Node("input", (), (1, "y"), Type((4,), "f64"))
    with pytest.raises(ValueError, match="broadcast"):
        ops.add(x, y)
    with pytest.raises(ValueError, match="matmul"):
        ops.make("matmul", ops.reshape(x, (1, 3)), ops.reshape(y, (1, 4)))
    with pytest.raises(ops.RuleError, match="frobnicate"):
        ops.make("frobnicate", x)


def test_cse_through_tracing():
    """Writing the same subexpression twice in f yields one node."""

    def f(x):
        return np.sum(np.exp(x) * np.exp(x))

    g = tracing.trace(f, [np.ones(5)], [0])
    assert sum(n.op == "exp" for n in g.nodes) == 1


def test_toposort_orders_args_first():
    x = _x()
    y = ops.add(ops.elementwise("sin", x), ops.elementwise("cos", x))
    order = toposort([y])
    pos = {id(n): i for i, n in enumerate(order)}
    for n in order:
        for a in n.args:
            assert pos[id(a)] < pos[id(n)]


def test_printer_round_trip_shape():
    g = tracing.trace(lambda x: np.sum(x * 2.0), [np.ones(3)], [0])
    text = format_graph(g)
    assert text.splitlines()[0] == "graph lambda(%x: f64[3] active) -> (f64[])"
    assert "reduce_sum" in text and text.splitlines()[-1].strip().startswith("return")


def test_verifier_catches_undeclared_input_and_bad_type():
    x = _x()
    y = ops.elementwise("exp", x)
    with pytest.raises(VerifyError, match="not declared"):
        verify(Graph("g", (), (), (ops.reduce("reduce_sum", y),)))
    bad = Node("exp", (x,), (), Type((5,), "f64"))  # wrong shape for its operand
    with pytest.raises(VerifyError, match="type"):
        verify(Graph("g", (x,), ("active",), (bad,)))
    with pytest.raises(VerifyError, match="binding"):
        verify(Graph("g", (x,), ("const",), (y,)))


def test_type_validation():
    with pytest.raises(ValueError):
        Type((3,), "f32")
    with pytest.raises(ValueError):
        Type((-1,), "f64")
    assert Type((2, 3)).nbytes == 48 and str(Type(())) == "f64[]"


def test_printer_shows_loop_bodies_under_the_loop_node():
    """``str(graph)`` prints each loop's body (and a while_loop's condition) indented under the
    loop node, recursively; ``format_graph`` by default keeps the one-line form that digests
    and cache keys are made of (the body named by its digest)."""
    import tapejit as tj

    def f(x):
        def inner(j, d):
            return d * 0.5 + np.cos(d)

        c = tj.fori_loop(0, 3, lambda i, c: tj.fori_loop(0, 2, inner, c * np.sin(x)), x)
        w = tj.while_loop(lambda c: np.sum(c) < 10.0, lambda c: c * 1.5, c, max_steps=8)
        return np.sum(w * w)

    g = tracing.trace(f, [np.ones(3)], [0])
    short, full = format_graph(g), str(g)
    assert "body:" not in short and "condition:" not in short
    assert full.startswith(short.split("\n")[0])
    lines = full.splitlines()
    loops = [i for i, line in enumerate(lines) if line.startswith("  %") and "= loop " in line]
    assert len(loops) == 2
    i = loops[0]  # the outer fori_loop: its body, which holds the inner loop and its body
    assert lines[i + 1] == "    body:" and lines[i + 2].startswith("      graph body(")
    assert any(line.startswith("        %") and "= loop " in line for line in lines[i : loops[1]])
    assert any(line.startswith("          body:") for line in lines[i : loops[1]])
    assert any(
        line.startswith("              %") and "= cos " in line for line in lines[i : loops[1]]
    )
    j = loops[1]  # the while_loop: body, then condition
    rest = lines[j:]
    assert rest[1] == "    body:" and "    condition:" in rest
    assert rest[rest.index("    condition:") + 1].startswith("      graph cond(")
    assert lines[-1].startswith("  return %")  # the outer graph's return, after the bodies
    # a loop's attribute (part of every key) names its body by the digest of the short form
    spec = next(n for n in g.nodes if n.op == "loop").attrs[0]
    assert re.search(r"body=[0-9a-f]{16}", repr(spec)) and "graph" not in repr(spec)
