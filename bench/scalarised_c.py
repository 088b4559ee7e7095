"""Hand-written C gradients of the scalarised models of ``bench/scalarised_models.py``: the
forward pass and the reverse pass derived by hand, written for speed (gcc -O3 -march=native
-ffast-math, ``restrict``, accumulators in registers, structure-of-arrays copies so the pair
loops vectorise; the element loops over index tables gather and compute a block of elements in a
vectorised loop, then add the block's forces in a scalar loop).

Every function returns the energy and writes the gradient ``g`` (the shape of ``x``)::

    sc_morse_grad(x, g, n, work)                 work: 6 n doubles
    sc_springs_grad(x, g, nx, conn, rest, k, S)  nx = x.size
    sc_neohookean_grad(x, g, nx, tri, Bm, area, E)
    sc_tets_grad(x, g, nx, tet, Bsoa, vol, E)    Bsoa: (9, E), DmInv's entries by rows
    sc_angles_grad(x, g, nx, trip, T)
    sc_stencil_grad(u, g, n)
    sc_chain_grad(state, g, n, T, work)          work: (T + 5) n doubles
    sc_ljcut_grad(x, g, n, work)                 work: 6 n doubles

:func:`load` builds the library once per :class:`benchutil.CCompiler` and returns a
:class:`CGradient` of a :class:`~scalarised_models.Case`: buffers and pointers made once, so a
timed call is ``ref.fn(*ref.args)``. ``python bench/scalarised_c.py`` checks every gradient
against central differences of the Python model and prints gcc's vectorisation report.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scalarised_models as M  # noqa: E402
from benchutil import FAST_MATH, GCC, CCompiler  # noqa: E402


def _defines() -> str:
    consts = {
        "MORSE_D": M.MORSE_D, "MORSE_A": M.MORSE_A, "MORSE_R0": M.MORSE_R0,
        "MU": M.MU, "LAM": M.LAM, "ANGLE_K": M.ANGLE_K, "ANGLE_C0": M.ANGLE_C0,
        "KAPPA": M.KAPPA, "CHAIN_K": M.CHAIN_K, "CHAIN_B": M.CHAIN_B, "CHAIN_K0": M.CHAIN_K0,
        "CHAIN_DT": M.CHAIN_DT, "LJ_RC2": M.LJ_RC2, "LJ_ECUT": M.LJ_ECUT,
    }  # fmt: skip
    return "".join(f"#define {k} ({float(v)!r})\n" for k, v in consts.items())


C_BODY = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 256  /* elements gathered and computed per vectorised block */

/* ---- 1. Morse pairs i < j, flat positions; structure-of-arrays copies in work[6n] ---------- */
static inline double morse_row(const double *restrict px, const double *restrict py,
                               const double *restrict pz, double *restrict gx,
                               double *restrict gy, double *restrict gz, int64_t i, int64_t n) {
    const double xi = px[i], yi = py[i], zi = pz[i];
    double e = 0.0, fx = 0.0, fy = 0.0, fz = 0.0;
    for (int64_t j = i + 1; j < n; j++) {
        double dx = px[j] - xi, dy = py[j] - yi, dz = pz[j] - zi;
        double r = sqrt(dx * dx + dy * dy + dz * dz);
        double ex = exp(-MORSE_A * (r - MORSE_R0));
        e += MORSE_D * (ex * ex - 2.0 * ex);
        double f = (2.0 * MORSE_A * MORSE_D) * ex * (1.0 - ex) / r;   /* dE/dr / r */
        gx[j] += f * dx; gy[j] += f * dy; gz[j] += f * dz;
        fx += f * dx; fy += f * dy; fz += f * dz;
    }
    gx[i] -= fx; gy[i] -= fy; gz[i] -= fz;
    return e;
}

double sc_morse_grad(const double *restrict x, double *restrict g, int64_t n, double *restrict w) {
    double *px = w, *py = w + n, *pz = w + 2 * n, *gx = w + 3 * n, *gy = w + 4 * n, *gz = w + 5 * n;
    for (int64_t i = 0; i < n; i++) {
        px[i] = x[3 * i]; py[i] = x[3 * i + 1]; pz[i] = x[3 * i + 2];
        gx[i] = 0.0; gy[i] = 0.0; gz[i] = 0.0;
    }
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) e += morse_row(px, py, pz, gx, gy, gz, i, n);
    for (int64_t i = 0; i < n; i++) {
        g[3 * i] = gx[i]; g[3 * i + 1] = gy[i]; g[3 * i + 2] = gz[i];
    }
    return e;
}

/* ---- 2. spring network, x (n, 2) ----------------------------------------------------------- */
double sc_springs_grad(const double *restrict x, double *restrict g, int64_t nx,
                    const int64_t *restrict conn, const double *restrict rest,
                    const double *restrict k, int64_t S) {
    double h[2 * BLOCK] __attribute__((aligned(64)));
    memset(g, 0, sizeof(double) * nx);
    double e = 0.0;
    for (int64_t s0 = 0; s0 < S; s0 += BLOCK) {
        const int64_t m = S - s0 < BLOCK ? S - s0 : BLOCK;
        const int64_t *restrict c = conn + 2 * s0;
        const double *restrict r = rest + s0, *restrict kk = k + s0;
        for (int64_t q = 0; q < m; q++) {                 /* gather + compute, vectorised */
            const int64_t a = c[2 * q], b = c[2 * q + 1];
            double dx = x[2 * a] - x[2 * b], dy = x[2 * a + 1] - x[2 * b + 1];
            double len = sqrt(dx * dx + dy * dy), ext = len - r[q];
            e += 0.5 * kk[q] * ext * ext;
            double f = kk[q] * ext / len;                 /* dE/dlen / len */
            h[q] = f * dx;
            h[BLOCK + q] = f * dy;
        }
        for (int64_t q = 0; q < m; q++) {                 /* scatter */
            const int64_t a = c[2 * q], b = c[2 * q + 1];
            g[2 * a] += h[q]; g[2 * a + 1] += h[BLOCK + q];
            g[2 * b] -= h[q]; g[2 * b + 1] -= h[BLOCK + q];
        }
    }
    return e;
}

/* ---- 3. neo-Hookean triangles, x (n, 2): P = mu F + (lam log J - mu) F^-T, H = area P B^T ---- */
static inline double neohookean_block(const double *restrict x, const int64_t *restrict tri,
                                      const double *restrict Bm, const double *restrict area,
                                      int64_t m, double *restrict h) {
    double e = 0.0;
    for (int64_t q = 0; q < m; q++) {
        const int64_t i = tri[3 * q], j = tri[3 * q + 1], k = tri[3 * q + 2];
        const double *B = Bm + 4 * q;
        double d00 = x[2 * j] - x[2 * i], d01 = x[2 * k] - x[2 * i];
        double d10 = x[2 * j + 1] - x[2 * i + 1], d11 = x[2 * k + 1] - x[2 * i + 1];
        double F00 = d00 * B[0] + d01 * B[2], F01 = d00 * B[1] + d01 * B[3];
        double F10 = d10 * B[0] + d11 * B[2], F11 = d10 * B[1] + d11 * B[3];
        double J = F00 * F11 - F01 * F10, logJ = log(J);
        double I1 = F00 * F00 + F01 * F01 + F10 * F10 + F11 * F11;
        e += area[q] * (0.5 * MU * (I1 - 2.0 - 2.0 * logJ) + 0.5 * LAM * logJ * logJ);
        double c = (LAM * logJ - MU) / J;                        /* P = mu F + c cof(F) */
        double P00 = area[q] * (MU * F00 + c * F11), P01 = area[q] * (MU * F01 - c * F10);
        double P10 = area[q] * (MU * F10 - c * F01), P11 = area[q] * (MU * F11 + c * F00);
        h[q] = P00 * B[0] + P01 * B[1];                          /* H00: node j, x */
        h[BLOCK + q] = P00 * B[2] + P01 * B[3];                  /* H01: node k, x */
        h[2 * BLOCK + q] = P10 * B[0] + P11 * B[1];              /* H10: node j, y */
        h[3 * BLOCK + q] = P10 * B[2] + P11 * B[3];              /* H11: node k, y */
    }
    return e;
}

double sc_neohookean_grad(const double *restrict x, double *restrict g, int64_t nx,
                       const int64_t *restrict tri, const double *restrict Bm,
                       const double *restrict area, int64_t E) {
    double h[4 * BLOCK] __attribute__((aligned(64)));
    memset(g, 0, sizeof(double) * nx);
    double e = 0.0;
    for (int64_t e0 = 0; e0 < E; e0 += BLOCK) {
        const int64_t m = E - e0 < BLOCK ? E - e0 : BLOCK;
        e += neohookean_block(x, tri + 3 * e0, Bm + 4 * e0, area + e0, m, h);
        const int64_t *t = tri + 3 * e0;
        for (int64_t q = 0; q < m; q++) {
            const int64_t i = t[3 * q], j = t[3 * q + 1], k = t[3 * q + 2];
            double h00 = h[q], h01 = h[BLOCK + q], h10 = h[2 * BLOCK + q], h11 = h[3 * BLOCK + q];
            g[2 * j] += h00; g[2 * j + 1] += h10;
            g[2 * k] += h01; g[2 * k + 1] += h11;
            g[2 * i] -= h00 + h01; g[2 * i + 1] -= h10 + h11;
        }
    }
    return e;
}

/* ---- 3b. neo-Hookean tetrahedra, x (n, 3): F = Ds B, P = mu F + (lam log J - mu) cof(F) / J,
 *      H = vol P B^T; node m of b, c, d gets column m - 1 of H, node a minus their sum ---- */
static inline double tets_block(const double *restrict x, const int64_t *restrict tet,
                                const double *restrict B, int64_t E, const double *restrict vol,
                                int64_t m, double *restrict h) {
    double e = 0.0;
    for (int64_t q = 0; q < m; q++) {
        const int64_t a = 3 * tet[4 * q], b = 3 * tet[4 * q + 1], c = 3 * tet[4 * q + 2],
                      d = 3 * tet[4 * q + 3];
        const double B00 = B[q], B01 = B[E + q], B02 = B[2 * E + q], B10 = B[3 * E + q],
                     B11 = B[4 * E + q], B12 = B[5 * E + q], B20 = B[6 * E + q],
                     B21 = B[7 * E + q], B22 = B[8 * E + q];
        const double xa = x[a], ya = x[a + 1], za = x[a + 2];
        const double D00 = x[b] - xa, D01 = x[c] - xa, D02 = x[d] - xa;
        const double D10 = x[b + 1] - ya, D11 = x[c + 1] - ya, D12 = x[d + 1] - ya;
        const double D20 = x[b + 2] - za, D21 = x[c + 2] - za, D22 = x[d + 2] - za;
        const double F00 = D00 * B00 + D01 * B10 + D02 * B20, F01 = D00 * B01 + D01 * B11 + D02 * B21,
                     F02 = D00 * B02 + D01 * B12 + D02 * B22;
        const double F10 = D10 * B00 + D11 * B10 + D12 * B20, F11 = D10 * B01 + D11 * B11 + D12 * B21,
                     F12 = D10 * B02 + D11 * B12 + D12 * B22;
        const double F20 = D20 * B00 + D21 * B10 + D22 * B20, F21 = D20 * B01 + D21 * B11 + D22 * B21,
                     F22 = D20 * B02 + D21 * B12 + D22 * B22;
        const double C00 = F11 * F22 - F12 * F21, C01 = F12 * F20 - F10 * F22, C02 = F10 * F21 - F11 * F20;
        const double C10 = F21 * F02 - F22 * F01, C11 = F22 * F00 - F20 * F02, C12 = F20 * F01 - F21 * F00;
        const double C20 = F01 * F12 - F02 * F11, C21 = F02 * F10 - F00 * F12, C22 = F00 * F11 - F01 * F10;
        const double J = F00 * C00 + F01 * C01 + F02 * C02, logJ = log(J);
        const double I1 = F00 * F00 + F01 * F01 + F02 * F02 + F10 * F10 + F11 * F11 + F12 * F12
                        + F20 * F20 + F21 * F21 + F22 * F22;
        const double v = vol[q];
        e += v * (0.5 * MU * (I1 - 3.0 - 2.0 * logJ) + 0.5 * LAM * logJ * logJ);
        const double s = v * (LAM * logJ - MU) / J, u = v * MU;     /* vol P = u F + s cof(F) */
        const double P00 = u * F00 + s * C00, P01 = u * F01 + s * C01, P02 = u * F02 + s * C02;
        const double P10 = u * F10 + s * C10, P11 = u * F11 + s * C11, P12 = u * F12 + s * C12;
        const double P20 = u * F20 + s * C20, P21 = u * F21 + s * C21, P22 = u * F22 + s * C22;
        h[0 * BLOCK + q] = P00 * B00 + P01 * B01 + P02 * B02;      /* H = vol P B^T, row-major */
        h[1 * BLOCK + q] = P00 * B10 + P01 * B11 + P02 * B12;
        h[2 * BLOCK + q] = P00 * B20 + P01 * B21 + P02 * B22;
        h[3 * BLOCK + q] = P10 * B00 + P11 * B01 + P12 * B02;
        h[4 * BLOCK + q] = P10 * B10 + P11 * B11 + P12 * B12;
        h[5 * BLOCK + q] = P10 * B20 + P11 * B21 + P12 * B22;
        h[6 * BLOCK + q] = P20 * B00 + P21 * B01 + P22 * B02;
        h[7 * BLOCK + q] = P20 * B10 + P21 * B11 + P22 * B12;
        h[8 * BLOCK + q] = P20 * B20 + P21 * B21 + P22 * B22;
    }
    return e;
}

double sc_tets_grad(const double *restrict x, double *restrict g, int64_t nx,
                    const int64_t *restrict tet, const double *restrict Bm,
                    const double *restrict vol, int64_t E) {
    double h[9 * BLOCK] __attribute__((aligned(64)));
    memset(g, 0, sizeof(double) * nx);
    double e = 0.0;
    for (int64_t e0 = 0; e0 < E; e0 += BLOCK) {
        const int64_t m = E - e0 < BLOCK ? E - e0 : BLOCK;
        e += tets_block(x, tet + 4 * e0, Bm + e0, E, vol + e0, m, h);
        const int64_t *t = tet + 4 * e0;
        for (int64_t q = 0; q < m; q++) {
            for (int r = 0; r < 3; r++) {
                double h0 = h[(3 * r) * BLOCK + q], h1 = h[(3 * r + 1) * BLOCK + q];
                double h2 = h[(3 * r + 2) * BLOCK + q];
                g[3 * t[4 * q + 1] + r] += h0;
                g[3 * t[4 * q + 2] + r] += h1;
                g[3 * t[4 * q + 3] + r] += h2;
                g[3 * t[4 * q] + r] -= h0 + h1 + h2;
            }
        }
    }
    return e;
}

/* ---- 4. angle triples (i, j, k), j the vertex, x (n, 3) ------------------------------------ */
static inline double angles_block(const double *restrict x, const int64_t *restrict trip,
                                  int64_t m, double *restrict h) {
    double e = 0.0;
    for (int64_t q = 0; q < m; q++) {
        const int64_t i = trip[3 * q], j = trip[3 * q + 1], k = trip[3 * q + 2];
        double ux = x[3 * i] - x[3 * j], uy = x[3 * i + 1] - x[3 * j + 1];
        double uz = x[3 * i + 2] - x[3 * j + 2];
        double vx = x[3 * k] - x[3 * j], vy = x[3 * k + 1] - x[3 * j + 1];
        double vz = x[3 * k + 2] - x[3 * j + 2];
        double uu = ux * ux + uy * uy + uz * uz, vv = vx * vx + vy * vy + vz * vz;
        double uv = ux * vx + uy * vy + uz * vz;
        double inv = 1.0 / sqrt(uu * vv), c = uv * inv, dc = c - ANGLE_C0;
        e += ANGLE_K * dc * dc;
        double b = 2.0 * ANGLE_K * dc;                  /* dE/dcos */
        double a = b * inv, au = b * c / uu, av = b * c / vv;
        /* dcos/du = v / (|u||v|) - cos u / |u|^2, dcos/dv likewise */
        h[q] = a * vx - au * ux;
        h[BLOCK + q] = a * vy - au * uy;
        h[2 * BLOCK + q] = a * vz - au * uz;
        h[3 * BLOCK + q] = a * ux - av * vx;
        h[4 * BLOCK + q] = a * uy - av * vy;
        h[5 * BLOCK + q] = a * uz - av * vz;
    }
    return e;
}

double sc_angles_grad(const double *restrict x, double *restrict g, int64_t nx,
                   const int64_t *restrict trip, int64_t T) {
    double h[6 * BLOCK] __attribute__((aligned(64)));
    memset(g, 0, sizeof(double) * nx);
    double e = 0.0;
    for (int64_t t0 = 0; t0 < T; t0 += BLOCK) {
        const int64_t m = T - t0 < BLOCK ? T - t0 : BLOCK;
        const int64_t *t = trip + 3 * t0;
        e += angles_block(x, t, m, h);
        for (int64_t q = 0; q < m; q++) {
            const int64_t i = t[3 * q], j = t[3 * q + 1], k = t[3 * q + 2];
            double gix = h[q], giy = h[BLOCK + q], giz = h[2 * BLOCK + q];
            double gkx = h[3 * BLOCK + q], gky = h[4 * BLOCK + q], gkz = h[5 * BLOCK + q];
            g[3 * i] += gix; g[3 * i + 1] += giy; g[3 * i + 2] += giz;
            g[3 * k] += gkx; g[3 * k + 1] += gky; g[3 * k + 2] += gkz;
            g[3 * j] -= gix + gkx; g[3 * j + 1] -= giy + gky; g[3 * j + 2] -= giz + gkz;
        }
    }
    return e;
}

/* ---- 5. Ginzburg-Landau stencil over the interior of u (n, n), pull form by rows ----------- */
/* row i of g (1 <= i <= n-2): its own terms, the y-difference of its left neighbour, and the
   x-difference of row i-1 (added to row i by the previous row's call as gn) */
static inline double stencil_row(const double *restrict u,
                                 const double *restrict un, double *restrict gr,
                                 double *restrict gn, int64_t n) {
    double e = 0.0;
    for (int64_t j = 1; j < n - 1; j++) {
        double dx = un[j] - u[j], dy = u[j + 1] - u[j], w = u[j] * u[j] - 1.0;
        double dyl = j > 1 ? u[j] - u[j - 1] : 0.0;       /* dy of (i, j-1), an interior point */
        e += 0.5 * KAPPA * (dx * dx + dy * dy) + 0.25 * w * w;
        gr[j] += KAPPA * (dyl - dx - dy) + w * u[j];
        gn[j] = KAPPA * dx;                                 /* row i+1 gets +kappa dx */
    }
    gr[n - 1] = KAPPA * (u[n - 1] - u[n - 2]);
    return e;
}

double sc_stencil_grad(const double *restrict u, double *restrict g, int64_t n) {
    memset(g, 0, sizeof(double) * n * n);
    double e = 0.0;
    for (int64_t i = 1; i < n - 1; i++)
        e += stencil_row(u + i * n, u + (i + 1) * n, g + i * n, g + (i + 1) * n, n);
    return e;
}

/* ---- 6. explicit Euler of an oscillator chain; work[(T + 5) n]: x_0 .. x_T, v, tensions ---- */
double sc_chain_grad(const double *restrict state, double *restrict g, int64_t n, int64_t T,
                  double *restrict w) {
    double *restrict xs = w;                        /* x_0 .. x_T, (T + 1) n */
    double *restrict v = w + (T + 1) * n;
    double *restrict ts = v + n;                    /* ts[i + 1]: spring i; ts[0] = ts[n] = 0 */
    memcpy(xs, state, sizeof(double) * n);
    memcpy(v, state + n, sizeof(double) * n);
    ts[0] = 0.0;
    ts[n] = 0.0;
    for (int64_t t = 0; t < T; t++) {
        const double *restrict x = xs + t * n;
        double *restrict xn = xs + (t + 1) * n;
        for (int64_t i = 0; i < n - 1; i++) {           /* tension of spring i */
            double s = x[i + 1] - x[i];
            ts[i + 1] = CHAIN_K * s + CHAIN_B * s * s * s;
        }
        for (int64_t i = 0; i < n; i++) {               /* force t_i - t_{i-1} */
            xn[i] = x[i] + CHAIN_DT * v[i];
            v[i] += CHAIN_DT * (ts[i + 1] - ts[i] - CHAIN_K0 * x[i]);
        }
    }
    const double *xT = xs + T * n;
    double obj = 0.0;
    double *restrict xb = g, *restrict vb = g + n;
    for (int64_t i = 0; i < n; i++) {
        obj += xT[i] * xT[i];
        xb[i] = 2.0 * xT[i];
        vb[i] = 0.0;
    }
    /* reverse of x' = x + dt v, v' = v + dt (f(x) - K0 x):
       vb <- vb' + dt xb';  xb <- xb' + dt (Jf^T vb' - K0 vb') */
    for (int64_t t = T - 1; t >= 0; t--) {
        const double *restrict x = xs + t * n;
        for (int64_t i = 0; i < n - 1; i++) {           /* (vb_i - vb_{i+1}) dt_i/ds_i */
            double s = x[i + 1] - x[i];
            ts[i + 1] = (vb[i] - vb[i + 1]) * (CHAIN_K + 3.0 * CHAIN_B * s * s);
        }
        for (int64_t i = 0; i < n; i++) {               /* (Jf^T vb)_i = sb_{i-1} - sb_i */
            double xbi = xb[i];
            xb[i] = xbi + CHAIN_DT * (ts[i] - ts[i + 1] - CHAIN_K0 * vb[i]);
            vb[i] += CHAIN_DT * xbi;
        }
    }
    return obj;
}

/* ---- 7. Lennard-Jones with a cutoff, pairs i < j, x (n, 3); SoA copies in work[6n] -------- */
static inline double ljcut_row(const double *restrict px, const double *restrict py,
                               const double *restrict pz, double *restrict gx,
                               double *restrict gy, double *restrict gz, int64_t i, int64_t n) {
    const double xi = px[i], yi = py[i], zi = pz[i];
    double e = 0.0, fx = 0.0, fy = 0.0, fz = 0.0;
    for (int64_t j = i + 1; j < n; j++) {
        double dx = px[j] - xi, dy = py[j] - yi, dz = pz[j] - zi;
        double r2 = dx * dx + dy * dy + dz * dz;
        double on = r2 < LJ_RC2 ? 1.0 : 0.0;
        double s = 1.0 / (r2 * r2 * r2);
        e += on * (4.0 * (s * s - s) - LJ_ECUT);
        double f = on * (-24.0 * s * (2.0 * s - 1.0) / r2);   /* 2 dE/dr2 */
        gx[j] += f * dx; gy[j] += f * dy; gz[j] += f * dz;
        fx += f * dx; fy += f * dy; fz += f * dz;
    }
    gx[i] -= fx; gy[i] -= fy; gz[i] -= fz;
    return e;
}

double sc_ljcut_grad(const double *restrict x, double *restrict g, int64_t n, double *restrict w) {
    double *px = w, *py = w + n, *pz = w + 2 * n, *gx = w + 3 * n, *gy = w + 4 * n, *gz = w + 5 * n;
    for (int64_t i = 0; i < n; i++) {
        px[i] = x[3 * i]; py[i] = x[3 * i + 1]; pz[i] = x[3 * i + 2];
        gx[i] = 0.0; gy[i] = 0.0; gz[i] = 0.0;
    }
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) e += ljcut_row(px, py, pz, gx, gy, gz, i, n);
    for (int64_t i = 0; i < n; i++) {
        g[3 * i] = gx[i]; g[3 * i + 1] = gy[i]; g[3 * i + 2] = gz[i];
    }
    return e;
}
"""

C_SOURCE = _defines() + C_BODY

C_CDEF = """
double sc_morse_grad(const double *x, double *g, int64_t n, double *w);
double sc_springs_grad(const double *x, double *g, int64_t nx, const int64_t *conn,
                    const double *rest, const double *k, int64_t S);
double sc_neohookean_grad(const double *x, double *g, int64_t nx, const int64_t *tri,
                       const double *Bm, const double *area, int64_t E);
double sc_tets_grad(const double *x, double *g, int64_t nx, const int64_t *tet,
                    const double *Bsoa, const double *vol, int64_t E);
double sc_angles_grad(const double *x, double *g, int64_t nx, const int64_t *trip, int64_t T);
double sc_stencil_grad(const double *u, double *g, int64_t n);
double sc_chain_grad(const double *state, double *g, int64_t n, int64_t T, double *w);
double sc_ljcut_grad(const double *x, double *g, int64_t n, double *w);
"""

#: the models whose C function differs from ``<model>_grad``
C_NAME = {"chain_zl": "chain"}


class CGradient:
    """The C gradient of one :class:`~scalarised_models.Case`: its own copy ``x`` of the input,
    the output ``g``, any scratch, and ``args``, the pointers, made once. ``fn(*args)`` is the
    timed call (returns the energy); :meth:`grad` copies new data in and returns a copy of ``g``.
    """

    def __init__(self, cc: CCompiler, case: M.Case, flags: tuple[str, ...] = FAST_MATH):
        lib = cc.build(C_SOURCE, C_CDEF, flags)
        # the library (and the compiler's FFI) must outlive every call: a dlclose'd library
        # leaves ``fn`` pointing at memory that may be mapped again (JIT code of a recompile)
        self.cc, self.lib = cc, lib
        name = C_NAME.get(case.model, case.model)
        self.fn = getattr(lib, f"sc_{name}_grad")
        self.x = np.array(case.x, dtype=np.float64, order="C")
        self.g = np.zeros_like(self.x)
        t = {k: (np.ascontiguousarray(v) if isinstance(v, np.ndarray) else v)
             for k, v in case.tables.items()}  # fmt: skip
        self._keep = list(t.values())  # the pointers' arrays live as long as this object
        p, pi = cc.ptr, (lambda a: cc.ptr(a, "int64_t *"))
        px, pg, nx = p(self.x), p(self.g), self.x.size
        if name in ("morse", "ljcut"):
            self.work = np.empty(6 * t["n"])
            self.args = (px, pg, t["n"], p(self.work))
        elif name == "springs":
            self.args = (px, pg, nx, pi(t["conn"]), p(t["rest"]), p(t["k"]), len(t["rest"]))
        elif name == "neohookean":
            self.args = (px, pg, nx, pi(t["tri"]), p(t["Bm"]), p(t["area"]), len(t["area"]))
        elif name == "tets":
            self.soa = np.ascontiguousarray(t["DmInv"].reshape(-1, 9).T)  # vectorised loads
            self.args = (px, pg, nx, pi(t["tet"]), p(self.soa), p(t["vol"]), len(t["vol"]))
        elif name == "angles":
            self.args = (px, pg, nx, pi(t["trip"]), len(t["trip"]))
        elif name == "stencil":
            self.args = (px, pg, t["n"])
        elif name == "chain":
            self.work = np.empty((t["T"] + 5) * t["n"])
            self.args = (px, pg, t["n"], t["T"], p(self.work))
        else:
            raise KeyError(f"no C gradient for {case.model!r}")

    def __call__(self) -> float:
        return self.fn(*self.args)

    def value_and_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        np.copyto(self.x, x)
        e = self.fn(*self.args)
        return e, self.g.copy()

    def grad(self, x: np.ndarray) -> np.ndarray:
        return self.value_and_grad(x)[1]


def load(cc: CCompiler, case: M.Case, flags: tuple[str, ...] = FAST_MATH) -> CGradient:
    """The C gradient of ``case`` (the library built once per compiler and flags)."""
    return CGradient(cc, case, flags)


def vector_report(flags: tuple[str, ...] = FAST_MATH) -> list[str]:
    """gcc's ``-fopt-info-vec-optimized`` lines for :data:`C_SOURCE`: the loops it vectorised,
    each naming the C function's line."""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "scalarised.c"
        src.write_text(C_SOURCE)
        cmd = [GCC, *flags, "-fPIC", "-c", "-o", str(Path(d) / "s.o"), str(src),
               "-fopt-info-vec-optimized"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    lines = C_SOURCE.splitlines()
    out = []
    for msg in done.stderr.splitlines():
        try:
            line = int(msg.split(":")[1])
        except (IndexError, ValueError):
            continue
        fn = next((s for s in reversed(lines[:line]) if s and s[0] not in " /}#"), "?")
        out.append(f"{fn.split('(')[0]} | line {line}: {msg.split(':', 3)[-1].strip()}")
    return out


def check(case: M.Case, ref: CGradient, samples: int = 24, seed: int = 0) -> float:
    """Largest |C - central difference| over ``samples`` entries of the gradient, relative to
    max |C gradient|; also checks the C energy against the Python model."""
    e, g = ref.value_and_grad(case.x)
    e_py = float(case.f(case.x))
    assert abs(e - e_py) <= 1e-10 * max(1.0, abs(e_py)), f"{case.model}: energy {e} != {e_py}"
    idx = np.random.default_rng(seed).choice(case.x.size, min(samples, case.x.size), replace=False)
    fd = M.central_difference(case.f, case.x, 1e-6, idx).reshape(-1)[idx]
    return float(np.max(np.abs(g.reshape(-1)[idx] - fd)) / np.max(np.abs(g)))


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        cc = CCompiler(Path(d))
        for line in vector_report():
            print(line)
        ok = True
        for model, (test_sizes, _) in M.MODELS.items():
            for size in test_sizes:
                case = M.build(model, size)
                err = check(case, load(cc, case))
                ok &= err < 1e-6
                print(f"{model:>10} {case.label:>12}: C vs central differences {err:.1e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
