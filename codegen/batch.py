"""Batched entry: one native call evaluates the gradient for rows ``[begin, end)`` of a batch.

C signature (for callers; see :mod:`codegen.entry` for the single-call kernel)::

    int32_t NAME(const double *in0, ..., const double *in_k,   // runtime args, each (m, *shape_i)
                 const T *c0, ..., const T *c_j,               // captured constants, unbatched
                 double *values,                               // (m,) primal values
                 double *out0, ..., double *out_l,             // gradients, each (m, *shape)
                 void *workspace, int64_t begin, int64_t end);

Row ``r`` calls the kernel on ``in_i + r*size_i``, ``values + r``, ``out_j + r*size_j`` with the
one workspace. It returns the first non-zero kernel status (rows before it are done), else 0.
Threads call it on disjoint row ranges, each with its own workspace; the loop is a plain rolled
loop, so the kernel's own vectorised loops stay as they are.
"""

from __future__ import annotations

import llvmlite.ir as ir

I32 = ir.IntType(32)
I64 = ir.IntType(64)
F64 = ir.DoubleType()


def add_batch_entry(
    module: ir.Module,
    kernel_name: str,
    in_sizes: list[int],
    n_consts: int,
    out_sizes: list[int],
    name: str,
) -> None:
    """Add ``name`` (signature above) to ``module``; ``in_sizes``/``out_sizes`` are the element
    counts of one row of each runtime argument and each gradient output."""
    kernel = module.get_global(kernel_name)
    kty = kernel.function_type.args
    n_in = len(in_sizes)
    params = list(kty[: n_in + n_consts]) + [F64.as_pointer()] + list(kty[n_in + n_consts + 1 : -1])
    params += [kty[-1], I64, I64]
    fn = ir.Function(module, ir.FunctionType(I32, params), name=name)
    fn.attributes.add("nounwind")
    a = fn.args
    ins, consts = a[:n_in], a[n_in : n_in + n_consts]
    values = a[n_in + n_consts]
    outs = a[n_in + n_consts + 1 : n_in + n_consts + 1 + len(out_sizes)]
    ws, begin, end = a[-3], a[-2], a[-1]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    pre = b.block
    head, body, done, fail = (fn.append_basic_block(s) for s in ("rows", "row", "done", "fail"))
    b.branch(head)
    b.position_at_end(head)
    r = b.phi(I64)
    r.add_incoming(begin, pre)
    b.cbranch(b.icmp_signed("<", r, end), body, done)
    b.position_at_end(body)

    def row(p, size):
        return b.gep(p, [b.mul(r, I64(size), flags=("nsw",))], inbounds=True)

    args = [row(p, s) for p, s in zip(ins, in_sizes)] + list(consts)
    args.append(b.gep(values, [r], inbounds=True))
    args += [row(p, s) for p, s in zip(outs, out_sizes)]
    args.append(ws)
    status = b.call(kernel, args)
    nxt = b.add(r, I64(1), flags=("nsw",))
    r.add_incoming(nxt, body)
    b.cbranch(b.icmp_signed("==", status, I32(0)), head, fail)
    b.position_at_end(done)
    b.ret(I32(0))
    b.position_at_end(fail)
    b.ret(status)
