"""sin, cos and tan as branch-free LLVM IR, with their range reductions.

sin and cos: FDLIBM's minimax kernels (``k_sin.c`` coefficients ``S1..S6``, ``k_cos.c``
``C1..C6``) after a four-part Cody-Waite reduction by pi/2 for |x| <= 2^50 (in line), and for
|x| > 2^50 a Payne-Hanek reduction by the 2/pi table of :mod:`.core` on a cold path: a branch to
a function with vector variants (:func:`_sincos_large`, :func:`_lanewise`), which the
vectoriser calls once per vector of x. tan shares the reductions (a three-part one in line up
to 2^30, the cold path beyond). Polynomials and rational functions fitted here: a Remez exchange
in mpmath (60 digits) minimising the error relative to the final result, with the leading
coefficient fixed to its double (1/3) and the others rounded to double afterwards; the bounds
quoted are those of the rounded coefficients, sampled on 20001 points.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from ...core.ops import Op

from .core import (
    COS_C,
    F64,
    MATH,
    PIO2,
    SHIFT,
    SIN_C,
    TRIG_MAX,
    TRIG_TABLE,
    TWO_OVER_PI,
    Math,
    _bits,
    _c,
    _double,
    _eq,
    _fast_two_sum,
    _fma,
    _gt,
    _horner,
    _i,
    _intrinsic,
    _lt,
    _two_sum,
)


# ----------------------------------------------------------------------------------------------
# sin and cos


def _reduce_pio2(b, x):
    """(q, rh, rl): q = nearest integer to x 2/pi (a double), x - q pi/2 = rh + rl.

    q is rounded from x * (2/pi) as a double-double, so it is the nearest integer for |x| <=
    2^50. The remainder uses pi/2 = P0 + P1 + P2 + P3 (~212 bits) with exact products by fma
    (q P = h + l): x - h0 is exact (Sterbenz), the next terms are summed with error-free
    two-sums, the smallest ones in plain double. Accurate to ~2^-100 |x| absolute for
    |x| <= 2^50 (a four-part Cody-Waite reduction); beyond, :func:`_reduce_pio2_large`."""
    qh = b.fmul(x, _c(TWO_OVER_PI[0]))
    q0 = _intrinsic(b, "llvm.roundeven", qh)
    d = b.fadd(_fma(b, x, _c(TWO_OVER_PI[0]), b.fneg(q0)), b.fmul(x, _c(TWO_OVER_PI[1])))
    q = b.fadd(q0, _intrinsic(b, "llvm.roundeven", d))
    h0 = b.fmul(q, _c(PIO2[0]))
    l0 = _fma(b, q, _c(PIO2[0]), b.fneg(h0))
    h1 = b.fmul(q, _c(PIO2[1]))
    l1 = _fma(b, q, _c(PIO2[1]), b.fneg(h1))
    h2 = b.fmul(q, _c(PIO2[2]))
    s = b.fsub(x, h0)  # exact
    y0, e0 = _two_sum(b, s, b.fneg(h1))
    y1, e1 = _two_sum(b, y0, b.fneg(l0))
    tail = b.fsub(b.fsub(b.fadd(e0, e1), l1), b.fadd(h2, b.fmul(q, _c(PIO2[3]))))
    rh, rl = _fast_two_sum(b, y1, tail)
    return q, rh, rl


def _trig_table_row(b, x):
    """Pointer to the row of :data:`TRIG_TABLE` for the exponent of x (clamped to the table, so
    any x, NaN and inf included, reads inside it). The table is one internal constant per
    module, defined on first use."""
    name = "tapejit.math.two_over_pi"
    table = b.module.globals.get(name)
    if table is None:
        ty = ir.ArrayType(F64, len(TRIG_TABLE))
        table = ir.GlobalVariable(b.module, ty, name=name)
        table.linkage = "internal"
        table.global_constant = True
        table.unnamed_addr = True
        table.initializer = ir.Constant(ty, TRIG_TABLE)
    row = b.sub(b.and_(b.lshr(_bits(b, x), _i(52)), _i(0x7FF)), _i(1023 + 50))  # e - 50
    row = b.select(b.icmp_signed("<", row, _i(0)), _i(0), row)
    last = len(TRIG_TABLE) // 4 - 1
    row = b.select(b.icmp_signed(">", row, _i(last)), _i(last), row)
    return b.gep(table, [_i(0), b.shl(row, _i(2))], inbounds=True)


def _reduce_pio2_large(b, x):
    """(q, rh, rl) as :func:`_reduce_pio2` for |x| > 2^50 (Payne-Hanek: the bits of 2/pi that
    matter for the exponent of x, from a table).

    x = M 2^k with M an integer (|M| in [2^52, 2^53), signed like x) and k = e - 52, so
    x 2/pi = M (2^k 2/pi) = M T(k) (mod 4), T(k) = t0 + t1 + t2 + t3 from :data:`TRIG_TABLE`.
    The products M ti (i < 3) are exact two-products hi + lo; multiples of 4 are dropped from
    M t0 exactly, the integer part n of the leading sum is split off exactly, and the fraction
    f = x 2/pi - n (mod 4) in [-1/2, 1/2] (up to 2^-46) is summed with error-free two-sums down
    to the terms below 2^-97, then as a double-double times pi/2 (rh + rl). The absolute error
    of f is ~2^-148, so even the closest double to a multiple of pi/2 (6381956970095103 2^797,
    |f| ~ 2^-61) keeps ~2^-85 relative accuracy. Ideas from FDLIBM's ``__kernel_rem_pio2``
    and SLEEF's ``rempi`` (a table row per exponent); the exact-grid formulation is ours."""
    bits = _bits(b, x)
    mag = _double(b, b.or_(b.and_(bits, _i(0x000FFFFFFFFFFFFF)), _i(1075 << 52)))  # 2^52 + frac
    m = _intrinsic(b, "llvm.copysign", mag, x)
    row = _trig_table_row(b, x)
    t = [b.load(b.gep(row, [_i(j)], inbounds=True)) for j in range(4)]
    h0, h1, h2 = (b.fmul(m, tj) for tj in t[:3])
    l0, l1, l2 = (_fma(b, m, tj, b.fneg(hj)) for tj, hj in zip(t[:3], (h0, h1, h2)))
    r0 = _fma(b, _intrinsic(b, "llvm.roundeven", b.fmul(h0, _c(0.25))), _c(-4.0), h0)  # exact
    a = b.fadd(r0, l0)  # exact: multiples of 2^-50 below 6 in magnitude
    s, se = _two_sum(b, a, h1)
    n = _intrinsic(b, "llvm.roundeven", s)
    f0 = b.fsub(s, n)  # exact
    s1, e1 = _two_sum(b, se, l1)
    s2, e2 = _two_sum(b, s1, h2)
    s3, e3 = _two_sum(b, f0, s2)
    lo = b.fadd(e3, b.fadd(e2, b.fadd(e1, b.fadd(l2, b.fmul(m, t[3])))))
    fh, fl = _fast_two_sum(b, s3, lo)
    rh = b.fmul(fh, _c(PIO2[0]))
    rl = _fma(b, fh, _c(PIO2[0]), b.fneg(rh))
    rl = b.fadd(rl, _fma(b, fh, _c(PIO2[1]), b.fmul(fl, _c(PIO2[0]))))
    rh, rl = _fast_two_sum(b, rh, rl)
    return n, rh, rl


def _sin_kernel(b, x, y):
    """sin(x + y), |x| <= ~pi/4, |y| tiny (FDLIBM k_sin.c form)."""
    z = b.fmul(x, x)
    w = b.fmul(z, z)
    r = b.fadd(_horner(b, z, SIN_C[1:4]), b.fmul(b.fmul(z, w), _horner(b, z, SIN_C[4:])))
    v = b.fmul(z, x)
    inner = b.fsub(b.fmul(z, b.fsub(b.fmul(_c(0.5), y), b.fmul(v, r))), y)
    return b.fsub(x, b.fsub(inner, b.fmul(v, _c(SIN_C[0]))))


def _cos_kernel(b, x, y):
    """cos(x + y), |x| <= ~pi/4, |y| tiny (FDLIBM k_cos.c form)."""
    z = b.fmul(x, x)
    w = b.fmul(z, z)
    r = b.fadd(b.fmul(z, _horner(b, z, COS_C[:3])), b.fmul(b.fmul(w, w), _horner(b, z, COS_C[3:])))
    hz = b.fmul(_c(0.5), z)
    one_m = b.fsub(_c(1.0), hz)
    corr = b.fadd(b.fsub(b.fsub(_c(1.0), one_m), hz), b.fsub(b.fmul(z, r), b.fmul(x, y)))
    return b.fadd(one_m, corr)


def _sincos_eval(b, x, cos: bool, q, rh, rl):
    """sin or cos of x = q pi/2 + rh + rl: both kernels, selected by the quadrant q mod 4
    (computed in double: q - 4 floor(q/4)); sin(±0) = ±0, ±inf and NaN give NaN."""
    sn = _sin_kernel(b, rh, rl)
    cs = _cos_kernel(b, rh, rl)
    quad = b.fsub(q, b.fmul(_c(4.0), _intrinsic(b, "llvm.floor", b.fmul(q, _c(0.25)))))
    if cos:
        quad = b.fadd(quad, _c(1.0))
        quad = b.select(_eq(b, quad, _c(4.0)), _c(0.0), quad)
    odd = b.or_(_eq(b, quad, _c(1.0)), _eq(b, quad, _c(3.0)))
    res = b.select(odd, cs, sn)
    res = b.select(b.fcmp_ordered(">=", quad, _c(2.0)), b.fneg(res), res)
    if not cos:
        res = b.select(_eq(b, x, _c(0.0)), x, res)
    ok = b.fcmp_ordered("<", _intrinsic(b, "llvm.fabs", x), _c(math.inf))
    return b.select(ok, res, _c(math.nan))


def _sincos(b, x, cos: bool):
    """sin or cos for every double: |x| <= 2^50 (TRIG_MAX) by :func:`_reduce_pio2` in line, larger
    |x| (and ±inf, which give NaN) by a call to the cold path :func:`_sincos_large`, taken
    only when |x| > 2^50 (a branch; in a vectorised loop the call goes to the vector variant,
    which returns at once unless a lane needs it). One accuracy bound for all finite x."""
    q, rh, rl = _reduce_pio2(b, x)
    res = _sincos_eval(b, x, cos, q, rh, rl)
    return cold_path(b, x, res, TRIG_MAX, _sincos_large(b.module, cos))


def cold_path(b, x, res, limit: float, large: ir.Function):
    """``res`` (the in-line result), or ``large(x)`` where |x| > ``limit`` (and for ±inf,
    NaN): a branch to a call of the cold path, which a vectorised loop takes only when a lane
    needs it."""
    big = _gt(b, _intrinsic(b, "llvm.fabs", x), _c(limit))
    head, cold, join = b.block, b.append_basic_block("large"), b.append_basic_block("join")
    b.cbranch(big, cold, join)
    b.position_at_end(cold)
    value = b.call(large, [x])
    b.branch(join)
    b.position_at_end(join)
    out = b.phi(F64)
    out.add_incoming(res, head)
    out.add_incoming(value, cold)
    return out


#: vector widths of the cold path's variants (the loop vectoriser picks one of them)
TRIG_LANES = (2, 4, 8, 16)


def _sincos_large(module: ir.Module, cos: bool) -> ir.Function:
    """``tapejit.math.<sin|cos>.large``: the function for |x| > 2^50 (:func:`_reduce_pio2_large`)
    and ±inf (NaN), defined once per module with vector variants ``.large.v<N>`` registered
    through the ``vector-function-abi-variant`` attribute (so a loop that calls it still
    vectorises) and kept by ``llvm.compiler.used`` until the vectoriser has run. A variant
    tests its lanes and returns at once if none has |x| > 2^50; otherwise it calls the scalar
    function for those lanes. Marked ``memory(none)`` (it only reads the constant table)."""
    name = f"tapejit.math.{'cos' if cos else 'sin'}.large"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = _internal(module, name, F64, [F64])
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    b.ret(_sincos_eval(b, x, cos, *_reduce_pio2_large(b, x)))
    variants = [_lanewise(module, fn, n) for n in TRIG_LANES]
    mapping = ",".join(f"_ZGV_LLVM_N{n}v_{name}({v.name})" for n, v in zip(TRIG_LANES, variants))
    # llvmlite's attribute set only accepts its known names: add the string attribute directly
    set.add(fn.attributes, f'"vector-function-abi-variant"="{mapping}"')
    _compiler_used(module, variants)
    return fn


def _internal(module, name, ret, args) -> ir.Function:
    fn = ir.Function(module, ir.FunctionType(ret, args), name=name)
    fn.linkage = "internal"
    for attr in ("nounwind", "noinline", "memory(none)", "willreturn", "nosync"):
        set.add(fn.attributes, attr)  # memory(none), willreturn, nosync: unknown to llvmlite
    return fn


def _lanewise(module, scalar: ir.Function, n: int, limit: float = TRIG_MAX) -> ir.Function:
    """``<scalar>.v<n>``: the scalar function applied to the lanes with |x| > ``limit`` (those
    with a NaN or inf included); the other lanes return x unchanged (the caller ignores them)."""
    vec = ir.VectorType(F64, n)
    fn = _internal(module, f"{scalar.name}.v{n}", vec, [vec])
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    lim = ir.Constant(vec, [limit] * n)
    need = b.or_(b.fcmp_ordered(">", x, lim), b.fcmp_ordered("<", x, b.fneg(lim)))
    mask = b.bitcast(need, ir.IntType(n))
    entry, loop = b.block, fn.append_basic_block("lane")
    call, nxt, done = (fn.append_basic_block(s) for s in ("call", "next", "done"))
    b.cbranch(b.icmp_unsigned("!=", mask, ir.Constant(ir.IntType(n), 0)), loop, done)
    b.position_at_end(loop)  # for i in range(n): if need[i]: acc[i] = scalar(x[i])
    i, acc = b.phi(ir.IntType(32)), b.phi(vec)
    i.add_incoming(ir.Constant(ir.IntType(32), 0), entry)
    acc.add_incoming(x, entry)
    b.cbranch(b.extract_element(need, i), call, nxt)
    b.position_at_end(call)
    upd = b.insert_element(acc, b.call(scalar, [b.extract_element(x, i)]), i)
    b.branch(nxt)
    b.position_at_end(nxt)
    new = b.phi(vec)
    new.add_incoming(acc, loop)
    new.add_incoming(upd, call)
    i1 = b.add(i, ir.Constant(ir.IntType(32), 1))
    i.add_incoming(i1, nxt)
    acc.add_incoming(new, nxt)
    b.cbranch(b.icmp_unsigned("<", i1, ir.Constant(ir.IntType(32), n)), loop, done)
    b.position_at_end(done)
    out = b.phi(vec)
    out.add_incoming(x, entry)
    out.add_incoming(new, nxt)
    b.ret(out)
    return fn


def _compiler_used(module: ir.Module, fns: list[ir.Function]) -> None:
    """Append ``fns`` to the module's ``llvm.compiler.used`` (created on first use)."""
    ptr = ir.IntType(8).as_pointer()
    gv = module.globals.get("llvm.compiler.used")
    old = [] if gv is None else list(gv.initializer.constant)
    refs = old + [f.bitcast(ptr) for f in fns]
    ty = ir.ArrayType(ptr, len(refs))
    if gv is None:
        gv = ir.GlobalVariable(module, ty, name="llvm.compiler.used")
        gv.linkage = "appending"
        gv.section = "llvm.metadata"
    gv.value_type = ty  # the array grows with each op that registers variants
    gv.initializer = ir.Constant(ty, refs)


def _sin(b, x):
    """sin(x); see :func:`_sincos`."""
    return _sincos(b, x, cos=False)


def _cos(b, x):
    """cos(x); see :func:`_sincos`."""
    return _sincos(b, x, cos=True)


# ----------------------------------------------------------------------------------------------
# tan

#: tan(r) = r + r z P(z)/Q(z), z = r^2, |r| <= pi/4: a (3, 3) rational fitted by the Remez
#: exchange to (tan(sqrt z)/sqrt z - 1)/z on z in [0, 0.617], weighted so that the error is
#: relative to tan(r) (P[0] fixed to fl(1/3)); minimax 2^-62.1, 2^-58.2 with the coefficients
#: rounded to double.
TAN_P = [0.3333333333333333, -0.021433837120392527, 0.00024445528328329046,
         -1.7719012041127164e-08]  # fmt: skip
TAN_Q = [1.0, -0.46430151136117914, 0.024549208489573596, -0.00025557651243281843]


def _odd(b, q):
    """q (an integer-valued double) is odd."""
    half = b.fmul(q, _c(0.5))
    return b.fcmp_ordered("!=", _intrinsic(b, "llvm.floor", half), half)


def _tan_eval(b, x, odd, rh, rl):
    """tan of x = q pi/2 + rh + rl (|rh| <= ~pi/4, |rl| <= ulp(rh)), ``odd`` the parity of q:
    tan(r) = N/D with D = Q(z) (one double, z = rh^2) and N = r D + r^3 P(z) a double-double
    (r D and r^3 by exact products, P as 1/3 + z P'(z) by an exact fast two-sum), so the
    rounding of D cancels from r D / D and only that of r^3 P/Q (its share of the result is
    <= 0.21) and the last one count. For odd q, tan(x) = -1/tan(r) = -D/N: the two quadrants
    swap numerator and denominator, and one division 1/den (with an fma-corrected quotient)
    serves both. rl enters through tan' = 1 + tan^2 (also -cot' = 1 + cot^2). NaN in, NaN
    out; -0.0 kept. (D as a double-double too: 0.68 instead of 0.75 ulp, 5% slower.)"""
    z = b.fmul(rh, rh)
    zl = _fma(b, rh, rh, b.fneg(z))  # rh^2 = z + zl exactly
    ph, pl = _fast_two_sum(b, _c(TAN_P[0]), b.fmul(z, _horner(b, z, TAN_P[1:])))  # P(z)
    d = _horner(b, z, TAN_Q)
    a = b.fmul(rh, d)
    ae = _fma(b, rh, d, b.fneg(a))  # rh d = a + ae exactly
    r3 = b.fmul(rh, z)
    r3l = _fma(b, rh, zl, _fma(b, rh, z, b.fneg(r3)))  # rh^3 = r3 + r3l to ~2^-104
    t = b.fmul(r3, ph)  # |t| <= 0.28 |a|
    tl = _fma(b, r3, pl, _fma(b, r3l, ph, _fma(b, r3, ph, b.fneg(t))))
    nh, ne = _fast_two_sum(b, a, t)
    nl = b.fadd(b.fadd(ne, ae), tl)
    num_h = b.select(odd, b.fneg(d), nh)
    num_l = b.select(odd, _c(0.0), nl)
    den_h = b.select(odd, nh, d)
    den_l = b.select(odd, nl, _c(0.0))
    rcp = b.fdiv(_c(1.0), den_h)
    qt = b.fmul(num_h, rcp)
    rem = b.fadd(_fma(b, b.fneg(qt), den_h, num_h), _fma(b, b.fneg(qt), den_l, num_l))
    # tan(rh + rl) = tan(rh) + rl (1 + tan(rh)^2), and -cot likewise: the tail rl joins the
    # quotient's correction
    corr = _fma(b, rl, _fma(b, qt, qt, _c(1.0)), b.fmul(rem, rcp))
    res = b.fadd(qt, corr)
    return b.select(_eq(b, x, _c(0.0)), x, res)


#: |x| up to which tan reduces in line by :func:`_reduce_pio2_fast`; beyond, the cold path
TAN_FAST_MAX = 2.0**30


def _reduce_pio2_fast(b, x):
    """(odd, rh, rl): x = q pi/2 + rh + rl for |x| <= TAN_FAST_MAX, ``odd`` (i1) q's parity;
    half the operations of :func:`_reduce_pio2` (whose q is exact up to 2^50). q = x 2/pi
    rounded to an integer by the 1.5*2^52 shift (one rounding of x 2/pi, so |rh| <= pi/4 +
    2^-22), its parity the low bit of the shifted value; r1 = x - q P0 exact by fma (x and
    q P0 are multiples of 2^-53 and |r1| < 1); then r1 - q P1 - q P2 with q P1 an exact
    two-product and an error-free two-sum, renormalised. Absolute error ~2^-129 for
    |q| < 2^30, far below the smallest |x - q pi/2| (> 2^-62 for every double)."""
    kd = _fma(b, x, _c(TWO_OVER_PI[0]), _c(SHIFT))
    q = b.fsub(kd, _c(SHIFT))
    r1 = _fma(b, b.fneg(q), _c(PIO2[0]), x)  # exact
    h1 = b.fmul(q, _c(PIO2[1]))
    l1 = _fma(b, q, _c(PIO2[1]), b.fneg(h1))
    rh, e = _two_sum(b, r1, b.fneg(h1))
    rl = b.fsub(e, _fma(b, q, _c(PIO2[2]), l1))
    rh, rl = _fast_two_sum(b, rh, rl)
    return b.trunc(_bits(b, kd), ir.IntType(1)), rh, rl


def _tan(b, x):
    """tan(x) for every double: x = q pi/2 + r by the three-part reduction
    :func:`_reduce_pio2_fast` in line for |x| <= 2^30, larger |x| and +-inf by a call to the
    cold path :func:`_tan_large` (sin/cos's four-part reduction up to 2^50, their 2/pi table
    beyond), taken only when a lane has |x| > 2^30; then :func:`_tan_eval`: the rational
    :data:`TAN_P`/:data:`TAN_Q` on |r| <= pi/4, -1/tan(r) in the odd quadrants from the same
    division. Measured 0.75 ulp (long double reference; numpy's own tan: 0.57) on all ranges,
    the doubles nearest the multiples of pi/2 included. Cost: |x| in (2^30, 2^50] goes through
    the cold path's per-lane scalar code (~20 ns/element instead of ~0.9), as sin/cos beyond
    2^50: the in-line reduction is cut to three parts for speed."""
    res = _tan_eval(b, x, *_reduce_pio2_fast(b, x))
    return cold_path(b, x, res, TAN_FAST_MAX, _tan_large(b.module))


def _tan_large(module: ir.Module) -> ir.Function:
    """``tapejit.math.tan.large``: tan for |x| > TAN_FAST_MAX (2^30) and +-inf (NaN): by the
    four-part :func:`_reduce_pio2` up to 2^50, the 2/pi table beyond; with vector variants for
    the vectoriser (each handles only its lanes above 2^30), as
    :func:`_sincos_large` does for sin and cos."""
    name = "tapejit.math.tan.large"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = _internal(module, name, F64, [F64])
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    mid = _reduce_pio2(b, x)
    large = _reduce_pio2_large(b, x)
    big = _gt(b, _intrinsic(b, "llvm.fabs", x), _c(TRIG_MAX))
    q, rh, rl = (b.select(big, v2, v1) for v1, v2 in zip(mid, large))
    res = _tan_eval(b, x, _odd(b, q), rh, rl)
    ok = _lt(b, _intrinsic(b, "llvm.fabs", x), _c(math.inf))
    b.ret(b.select(ok, res, _c(math.nan)))
    variants = [_lanewise(module, fn, n, TAN_FAST_MAX) for n in TRIG_LANES]
    mapping = ",".join(f"_ZGV_LLVM_N{n}v_{name}({v.name})" for n, v in zip(TRIG_LANES, variants))
    set.add(fn.attributes, f'"vector-function-abi-variant"="{mapping}"')
    _compiler_used(module, variants)
    return fn


#: This family's rows of the math table (:data:`.core.MATH`).
MATH.update({
    Op.SIN:     Math(1, body=_sin, ulp=1, ulp_ld=0.9, domains=(
        ("[-10, 10]", "uniform", -10, 10), ("[-1e5, 1e5]", "uniform", -1e5, 1e5),
        ("1e5..1e15", "log", 5, 15))),
    Op.COS:     Math(1, body=_cos, ulp=1, ulp_ld=0.9, domains=(
        ("[-10, 10]", "uniform", -10, 10), ("[-1e5, 1e5]", "uniform", -1e5, 1e5),
        ("1e5..1e15", "-log", 5, 15))),
    Op.TAN:     Math(1, body=_tan, ulp=1, ulp_ld=0.8, domains=(
        ("[-pi/4, pi/4]", "uniform", -0.7854, 0.7854), ("[-10, 10]", "uniform", -10, 10),
        ("[-1e5, 1e5]", "uniform", -1e5, 1e5), ("1e-300..1e-1", "log", -300, -1),
        ("-1e5..-1e300", "-log", 5, 300))),
})  # fmt: skip
