"""``np.linalg.qr`` and ``np.linalg.lstsq`` on traced values.

QR by Householder reflections (Golub & Van Loan, *Matrix Computations*, 4th ed., alg. 5.2.1)
with LAPACK's conventions (``dgeqrf``/``dlarfg``: the reflector of column j maps it to beta e_1
with beta = -sign(alpha) ||x||, and is the identity where the column is already zero below
the diagonal), so Q and R have numpy's signs. Each of the min(m, n) steps is one rank-1 update
of the whole matrix — a few array nodes per step, whatever m is — and the derivative is that of
the reflections (exact for the computed factors; undefined where a column is zero, as the
factorisation's own derivative is).

``lstsq`` is numpy's minimum-norm least-squares solution: through the pseudo-inverse of the
SVD where it fits (:func:`.numpy_linalg.pinv`: numpy's rcond cut-off, any rank), otherwise by QR
for full-rank matrices (a rank-deficient one raises, as a guard).
"""

from __future__ import annotations

import numpy as np

from ..errors import _fail
from ..tracer import _transpose
from .np_common import _t
from .numpy_factor import triangular_solve
from .numpy_linalg import _batched, _gesdd_available, _svd_fits, pinv, svd


def _householder(r, j: int):
    """(v, tau) of the reflector H = I - tau v v^T (v[j] = 1, zeros above) for column j of ``r``."""
    m = r.shape[0]
    alpha = r[j, j]
    if j == m - 1:  # a 1-element column: H = I
        return np.concatenate([np.zeros(j), np.ones(1)]), alpha * 0.0
    below = r[j + 1 :, j]
    tail = np.sum(below * below)
    none = tail == 0.0  # nothing below the diagonal: H = I (LAPACK's tau = 0)
    beta = -np.where(alpha >= 0.0, 1.0, -1.0) * np.sqrt(alpha * alpha + tail)
    safe = np.where(none, 1.0, beta)
    tau = np.where(none, 0.0, (safe - alpha) / safe)
    v = np.concatenate([np.zeros(j), np.ones(1), below / np.where(none, 1.0, alpha - safe)])
    return v, tau


def _qr2(a, mode: str):
    m, n = a.shape
    k = min(m, n)
    r = a * 1.0
    reflectors = []
    for j in range(k):
        v, tau = _householder(r, j)
        r = r - tau * (v[:, None] * (v @ r)[None, :])
        reflectors.append((v, tau))
    if mode == "r":
        return np.triu(r[:k] if m > n else r)
    cols = m if mode == "complete" else k
    q = _t(np.eye(m)[:, :cols])
    for v, tau in reversed(reflectors):  # Q = H_0 H_1 ... H_k-1 applied to I
        q = q - tau * (v[:, None] * (v @ q)[None, :])
    rr = np.triu(r if mode == "complete" else r[:k])
    return q, rr


def qr(a, mode="reduced"):
    """``np.linalg.qr(a, mode)`` for ``a`` (..., m, n): modes 'reduced' (Q (m, k), R (k, n)),
    'complete' (Q (m, m), R (m, n)) and 'r' (R only), k = min(m, n)."""
    if mode not in ("reduced", "complete", "r"):
        raise _fail(f"numpy.linalg.qr: mode {mode!r} is not supported (use 'reduced', 'complete' or 'r')")
    a = _t(a)
    if a.ndim < 2:
        raise _fail("numpy.linalg.qr: the array must have at least 2 dimensions")
    return _batched(lambda x: _qr2(x, mode), a)


def lstsq(a, b, rcond=None):
    """``np.linalg.lstsq(a, b, rcond)`` -> ``(x, residuals, rank, s)`` for ``a`` (m, n) and ``b``
    (m,) or (m, k). With the SVD (scipy installed, min(m, n) <= 48, m n <= 4096): x =
    pinv(a) b with numpy's cut-off (rcond None: eps max(m, n)), ``rank`` the number of singular
    values above it (a traced float), ``s`` the singular values. Otherwise by QR, for a of full
    column rank (m >= n): a rank-deficient a raises ``TracingError`` (a guard), and ``s`` is
    not computed (NaN). ``residuals`` is numpy's for full rank and m > n — the squared norm of
    each column of a x - b — and empty otherwise (a rank-deficient a with m > n, whose residuals
    numpy leaves empty, gets them here too: their shape cannot depend on traced values)."""
    a, b = _t(a), _t(b)
    if a.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise _fail(
            f"numpy.linalg.lstsq: a must be (m, n) and b (m,) or (m, k); got {a.shape} and {b.shape}"
        )
    m, n = a.shape
    cut = float(np.finfo(np.float64).eps * max(m, n)) if rcond is None else float(rcond)
    if _gesdd_available() and 0 not in a.shape and _svd_fits(a.shape):
        s = svd(a, compute_uv=False)
        x = pinv(a, rtol=cut) @ b
        rank = np.sum(s > cut * np.max(s))
    elif m >= n:
        q, r = _qr2(a, "reduced")
        d = np.abs(np.diagonal(r))
        if not bool(np.min(d) > 1e-13 * np.max(d)):
            raise _fail(
                "numpy.linalg.lstsq: a rank-deficient matrix this large needs the SVD "
                "(scipy, min(m, n) <= 48 and m n <= 4096)"
            )
        x = triangular_solve(r, _transpose(q, (1, 0)) @ b, False, False, False,
                             "numpy.linalg.lstsq")  # fmt: skip
        s, rank = np.full(n, np.nan) + 0.0 * d, float(n)
    else:
        raise _fail("numpy.linalg.lstsq: an underdetermined system this large needs the SVD")
    if m > n:
        res = a @ x - b
        residuals = np.sum(res * res, axis=0)
        residuals = residuals.reshape((1,)) if b.ndim == 1 else residuals
    else:
        residuals = np.zeros((0,))
    return x, residuals, rank, s


FUNCTIONS = {np.linalg.qr: qr, np.linalg.lstsq: lstsq}
