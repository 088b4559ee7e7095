"""Generated stand-ins for the LAPACK/BLAS routines the factorisation ops call — ``dtrsm``
(side 'R' only), ``dpotrf`` (uplo 'U' only) and ``dgetrf`` — with their Fortran signatures, so
a call site calls the host's routine when :func:`tapejit.codegen.blas.bind` set its pointer and
this function otherwise: an exported object file, or an unpickled gradient on a host without
scipy, computes the same factorisation (unblocked, so slower for large n, and rounded
differently in the last bits).

Each is emitted once per module (a ``linkonce_odr`` function named ``tapejit.own.<routine>``),
whatever the number of call sites, so LLVM optimises it once. Algorithms: Golub & Van Loan,
*Matrix Computations* (4th ed.): alg. 3.1.3/3.1.4 (triangular systems, here by columns from
the right), 4.2.1 (Cholesky, by columns: LAPACK's ``dpotf2``), 3.4.1 (LU with partial pivoting,
the first row of largest magnitude: LAPACK's ``dgetf2``), with LAPACK's ``info``: the column
(1-based) of the first non-positive pivot (``dpotrf``, also for NaN), of the first zero pivot
(``dgetrf``; the factorisation then completes).
"""

from __future__ import annotations

from contextlib import contextmanager

import llvmlite.ir as ir

from .base import F64, I8, I8P, I32, I64

_IP, _DP = I32.as_pointer(), F64.as_pointer()

#: name -> parameter types (Fortran: every argument by reference)
SIGNATURES = {
    # side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb
    "dtrsm": [I8P, I8P, I8P, I8P, _IP, _IP, _DP, _DP, _IP, _DP, _IP],
    # uplo, n, a, lda, info
    "dpotrf": [I8P, _IP, _DP, _IP, _IP],
    # m, n, a, lda, ipiv, info
    "dgetrf": [_IP, _IP, _DP, _IP, _IP, _IP],
}


class _Builder:
    """A function body under construction, with ``for`` loops over i64 counters."""

    def __init__(self, fn: ir.Function):
        self.fn = fn
        self.entry = fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)

    def slot(self, ty: ir.Type) -> ir.Value:
        """A frame cell (an alloca in the entry block, never in a loop)."""
        here = self.b.block
        self.b.position_at_start(self.entry)
        p = self.b.alloca(ty)
        self.b.position_at_end(here)
        return p

    @contextmanager
    def loop(self, lo: ir.Value, hi: ir.Value):
        """``for i in range(lo, hi)``; yields i (i64)."""
        b = self.b
        pre = b.block
        head, body, done = (self.fn.append_basic_block(s) for s in ("loop", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        i.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", i, hi), body, done)
        b.position_at_end(body)
        yield i
        i.add_incoming(b.add(i, I64(1), flags=("nsw",)), b.block)
        b.branch(head)
        b.position_at_end(done)

    def at(self, p: ir.Value, i: ir.Value, j: ir.Value, ld: ir.Value) -> ir.Value:
        """Pointer to column-major element (i, j) of ``p`` with leading dimension ``ld``."""
        b = self.b
        return b.gep(p, [b.add(i, b.mul(j, ld, flags=("nsw",)), flags=("nsw",))], inbounds=True)

    def size(self, p: ir.Value) -> ir.Value:
        return self.b.sext(self.b.load(p), I64)

    def char_is(self, p: ir.Value, ch: str) -> ir.Value:
        return self.b.icmp_unsigned("==", self.b.load(p), I8(ord(ch)))


def routine(module: ir.Module, name: str) -> ir.Function:
    """The module's stand-in for routine ``name`` (emitted on first use)."""
    symbol = f"tapejit.own.{name}"
    fn = module.globals.get(symbol)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), SIGNATURES[name]), name=symbol)
    fn.linkage = "internal"
    for attr in _ATTRS:
        fn.attributes.add(attr)
    _EMIT[name](_Builder(fn), fn.args)
    return fn


def _trsm(f: _Builder, args) -> None:
    """X op(A) = B for X (side 'R'; alpha taken as 1): column j of X from the columns before
    it (op(A) upper) or after it (lower), the inner loop down a contiguous column."""
    _, uplo, transa, diag, pm, pn, _, a, plda, bm, pldb = args
    b = f.b
    m, n, lda, ldb = f.size(pm), f.size(pn), f.size(plda), f.size(pldb)
    trans = f.char_is(transa, "T")
    upper = b.icmp_unsigned("==", f.char_is(uplo, "U"), b.not_(trans))  # op(A) upper
    unit = f.char_is(diag, "U")
    with f.loop(I64(0), n) as jj:
        j = b.select(upper, jj, b.sub(b.sub(n, I64(1)), jj))
        lo = b.select(upper, I64(0), b.add(j, I64(1)))
        hi = b.select(upper, j, n)
        with f.loop(lo, hi) as l:
            c = b.load(b.select(trans, f.at(a, j, l, lda), f.at(a, l, j, lda)))
            with f.loop(I64(0), m) as i:
                p = f.at(bm, i, j, ldb)
                x = b.load(f.at(bm, i, l, ldb))
                b.store(b.fsub(b.load(p), b.fmul(x, c)), p)
        d = b.select(unit, F64(1.0), b.load(f.at(a, j, j, lda)))
        with f.loop(I64(0), m) as i:
            p = f.at(bm, i, j, ldb)
            b.store(b.fdiv(b.load(p), d), p)
    b.ret_void()


def _dot(f: _Builder, a, lda, i: ir.Value, j: ir.Value, count: ir.Value) -> ir.Value:
    """sum_{k < count} A[k, i] A[k, j] (two contiguous columns)."""
    b = f.b
    acc = f.slot(F64)
    b.store(F64(0.0), acc)
    with f.loop(I64(0), count) as k:
        prod = b.fmul(b.load(f.at(a, k, i, lda)), b.load(f.at(a, k, j, lda)))
        b.store(b.fadd(b.load(acc), prod), acc)
    return b.load(acc)


def _potrf(f: _Builder, args) -> None:
    """A = U^T U in A's upper triangle (uplo 'U'; 'L' is refused with info = -1)."""
    uplo, pn, a, plda, info = args
    b = f.b
    n, lda = f.size(pn), f.size(plda)
    b.store(b.select(f.char_is(uplo, "U"), I32(0), I32(-1)), info)
    with f.loop(I64(0), n) as j:
        go = b.icmp_signed("==", b.load(info), I32(0))
        s = b.fsub(b.load(f.at(a, j, j, lda)), _dot(f, a, lda, j, j, j))
        bad = b.or_(b.fcmp_unordered("uno", s, s), b.fcmp_ordered("<=", s, F64(0.0)))
        with b.if_then(b.and_(go, bad)):
            b.store(b.trunc(b.add(j, I64(1)), I32), info)
        with b.if_then(b.icmp_signed("==", b.load(info), I32(0))):
            ujj = b.call(f.fn.module.declare_intrinsic("llvm.sqrt", [F64]), [s])
            b.store(ujj, f.at(a, j, j, lda))
            with f.loop(b.add(j, I64(1)), n) as i:
                p = f.at(a, j, i, lda)
                b.store(b.fdiv(b.fsub(b.load(p), _dot(f, a, lda, j, i, j)), ujj), p)
    b.ret_void()


def _getrf(f: _Builder, args) -> None:
    """P A = L U in place (right-looking, unblocked); ipiv 1-based; info the first zero pivot."""
    _, pn, a, plda, ipiv, info = args  # square: m = n
    b = f.b
    n, lda = f.size(pn), f.size(plda)
    b.store(I32(0), info)
    best, big = f.slot(I64), f.slot(F64)
    fabs = f.fn.module.declare_intrinsic("llvm.fabs", [F64])
    with f.loop(I64(0), n) as k:
        b.store(k, best)
        b.store(b.call(fabs, [b.load(f.at(a, k, k, lda))]), big)
        with f.loop(b.add(k, I64(1)), n) as i:  # the first row of largest magnitude
            v = b.call(fabs, [b.load(f.at(a, i, k, lda))])
            more = b.fcmp_ordered(">", v, b.load(big))
            b.store(b.select(more, i, b.load(best)), best)
            b.store(b.select(more, v, b.load(big)), big)
        p = b.load(best)
        b.store(b.trunc(b.add(p, I64(1)), I32), b.gep(ipiv, [k], inbounds=True))
        pivot = b.load(f.at(a, p, k, lda))
        zero = b.fcmp_ordered("==", pivot, F64(0.0))
        with b.if_then(b.and_(zero, b.icmp_signed("==", b.load(info), I32(0)))):
            b.store(b.trunc(b.add(k, I64(1)), I32), info)
        with b.if_then(b.not_(zero)):
            with f.loop(I64(0), n) as j:  # swap rows k and p
                x, y = f.at(a, k, j, lda), f.at(a, p, j, lda)
                u, v = b.load(x), b.load(y)
                b.store(v, x)
                b.store(u, y)
            with f.loop(b.add(k, I64(1)), n) as i:
                q = f.at(a, i, k, lda)
                b.store(b.fdiv(b.load(q), pivot), q)
        with f.loop(b.add(k, I64(1)), n) as j:  # the trailing update, down contiguous columns
            c = b.load(f.at(a, k, j, lda))
            with f.loop(b.add(k, I64(1)), n) as i:
                q = f.at(a, i, j, lda)
                b.store(b.fsub(b.load(q), b.fmul(b.load(f.at(a, i, k, lda)), c)), q)
    b.ret_void()


#: The stand-ins run only where the host's routine is missing: optimised for size (LLVM
#: neither vectorises nor unrolls them), which keeps their cost to a compile small (measured:
#: 0.15 s of LLVM time per module at -O3, most of a small model's compile).
_ATTRS = ("minsize", "optsize", "cold", "noinline")

_EMIT = {"dtrsm": _trsm, "dpotrf": _potrf, "dgetrf": _getrf}
