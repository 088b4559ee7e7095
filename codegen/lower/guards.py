"""Guards in the generated code: where each guard of the program is checked (as soon as its
condition and every guard numbered before it are known), and the checks — a scalar condition
returns its status, a bool vector (a re-rolled loop's guards) the status of its first failing
element — before any output is written.

:class:`Guards` is a mixin of the driver's
:class:`~tapejit.codegen.lower.driver.ProgramLowering`."""

from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from ...core.ir import Node
from ...core.ops import Op

from .base import I1, I8, I32, I64


class Guards:
    """The guard methods of the program lowering."""

    def _guard_steps(self) -> dict[int, list[tuple[Node, int, bool]]]:
        """``step -> [(condition, first status, expected)]``: where :meth:`run` checks each
        guard (steps as in :meth:`_last_reads`; -1: before the first). Guards are checked in
        the order of their numbers, each as soon as its condition and every guard numbered
        before it are known — a scalar condition after the node computing it, a vector after its
        kernel — so of several failing guards the first is reported, as the unrolled code
        and a retrace that forces outcomes (``tapejit.runtime.dispatch``) expect."""
        defined: dict[int, int] = {}
        step = 0
        for k in self.prog.kernels:
            for n in k.pre:
                defined[id(n)] = step
                step += 1
            if k.body or k.op is not None:
                for n in (*k.body, *((k.op,) if k.op is not None else ())):
                    defined[id(n)] = step
                step += 1
        checks: dict[int, list[tuple[Node, int, bool]]] = {}
        status, at = 1, -1
        for c, expected, _ in self.prog.graph.guards:
            root = self._stored(c) if c.shape else c
            if id(root) in defined:
                at = max(at, defined[id(root)])
            elif c.op not in (Op.CONST, Op.INPUT) and root.op not in (Op.CONST, Op.INPUT):
                raise AssertionError(f"no step computes the guard condition {c}")  # a bug
            checks.setdefault(at, []).append((c, status, expected))
            status += c.shape[0] if c.shape else 1
        return checks

    def check(self, cond: Node, expected: bool, status: int) -> None:
        """Guard ``status`` (a scalar condition) or guards ``status, status + 1, ...`` (a
        vector)."""
        if cond.shape == ():
            self.guard(cond, expected, status)
        else:
            self.guard_vector(cond, expected, status)

    def guard(self, cond: Node, expected: bool, status: int) -> None:
        """Return ``status`` now unless ``cond`` has the value the trace saw (guards are
        checked before any output is written: see the memory plan)."""
        b = self.b
        ok = self.load(cond, None)
        if not expected:
            ok = b.xor(ok, I1(1))
        fail = self.fn.append_basic_block(f"guard{status}.fail")
        cont = self.fn.append_basic_block(f"guard{status}.ok")
        b.cbranch(ok, cont, fail)
        b.position_at_end(fail)
        b.ret(I32(status))
        b.position_at_end(cont)

    def _stored(self, c: Node) -> Node:
        """The array whose memory holds array ``c`` (``c``, or the base of a view)."""
        s = self.prog.slots.get(id(c))
        while s is not None and s.kind == "alias":
            c = s.of
            s = self.prog.slots.get(id(c))
        return c

    def guard_vector(self, cond: Node, expected: bool | tuple, first: int) -> None:
        """Guards ``first``, ``first + 1``, ... — one per element of the bool vector ``cond``
        (a re-rolled loop's guards): return the status of the first element that does not have
        the value the trace saw (``expected``: one for all, or a tuple of one per element, read
        from a constant table)."""
        b = self.b
        if cond.op == Op.CONST:  # known now: the trace computed it, so it holds
            values = np.broadcast_to(np.asarray(cond.attrs[0], dtype=bool), cond.shape)
            bad = np.flatnonzero(values != np.asarray(expected, dtype=bool))
            if bad.size:
                b.ret(I32(first + int(bad[0])))
                b.position_at_end(self.fn.append_basic_block(f"guard{first}.dead"))
            return
        p = self.ptr(cond)
        table = None
        if isinstance(expected, tuple):
            ty = ir.ArrayType(I8, len(expected))
            table = ir.GlobalVariable(self.module, ty, name=f"{self.fn.name}.outcomes{first}")
            table.initializer = ty([I8(int(e)) for e in expected])
            table.global_constant = True
            table.linkage = "internal"
        fail = self.fn.append_basic_block(f"guard{first}.fail")
        with self.loop(cond.shape[0]) as i:
            v = self._load_elem(p, i, "bool")
            if table is not None:
                e = b.load(b.gep(table, [I64(0), i], inbounds=True))
                bad = b.icmp_unsigned("!=", b.zext(v, I8), e)
            else:
                bad = b.xor(v, I1(1)) if expected else v
            cont = self.fn.append_basic_block(f"guard{first}.next")
            b.cbranch(bad, fail, cont)
            b.position_at_end(cont)
        done = b.block
        b.position_at_end(fail)
        status = b.add(b.trunc(i, I32), I32(first))
        b.ret(status)
        b.position_at_end(done)
