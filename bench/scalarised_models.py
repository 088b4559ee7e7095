"""Scalarised benchmark models, written the way a physicist or engineer writes them: plain Python
loops over elements, numpy integer index tables, ``np.exp``/``np.sqrt``/``np.log`` on scalars,
``+=`` into scalars and into arrays made with ``np.zeros``. Every model is a closure ``f(x)`` over
its numpy tables (captured as constants by ``tapejit.compile``) returning a scalar; the gradient
is with respect to ``x``, a float64 array.

``build(model, size) -> Case`` makes the model for one size with its example input, the tables
the hand-written C gradient of ``bench/scalarised_c.py`` needs, and ``perturb``, new data of the
same shapes (positions moved a little), to see whether a compiled gradient recompiles.

* ``morse``: Morse pairs i < j, positions flat (``x[3*i + 0]``); size N atoms.
* ``springs``: spring network, ``a = conn[s, 0]; b = conn[s, 1]``, x (n, 2); S springs.
* ``neohookean``: 2-D neo-Hookean triangles, ``i, j, k = tri[e]``, x (n, 2); E elements.
* ``tets``: 3-D neo-Hookean tetrahedra written with matrices — ``np.stack`` of the edge
  vectors, ``F = Ds @ DmInv[e]``, ``np.linalg.det(F)``, ``np.sum(F * F)`` — x (n, 3); E elements.
* ``angles``: three-body angle term over triples ``i, j, k = trip[t]``, x (n, 3); T triples.
* ``stencil``: Ginzburg-Landau stencil over u (n, n), nested ``for i: for j:``; n.
* ``chain``: explicit Euler of an oscillator chain, state = (x0, v0), ``np.zeros`` arrays;
  (T steps, n masses).
* ``chain_zl``: the same with ``np.zeros_like(state, shape=(n,))`` arrays, which tapejit traces
  (``np.zeros`` arrays hold Python floats: tapejit refuses to store a traced value in one).
* ``ljcut``: Lennard-Jones pairs i < j with ``if r2 < rc2:``, positions (N, 3); N atoms.

Central differences of every model (:func:`central_difference`) check the C gradients.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# -- parameters (module constants, as a physicist's script has them) -----------------------------
MORSE_D, MORSE_A, MORSE_R0 = 0.5, 1.6, 1.3
SPRING_K = 1.0
MU, LAM = 1.0, 4.0
ANGLE_K, ANGLE_C0 = 0.8, -1.0 / 3.0
KAPPA = 0.5
CHAIN_K, CHAIN_B, CHAIN_K0, CHAIN_DT = 1.0, 0.25, 0.1, 0.01
LJ_RC = 2.5
LJ_RC2 = LJ_RC * LJ_RC
LJ_ECUT = 4.0 * (LJ_RC2**-6 - LJ_RC2**-3)


# -- 1. Morse pairs, flat positions ----------------------------------------------------------------
def morse(x):
    """Morse energy of N atoms, positions flat: atom i at x[3*i], x[3*i + 1], x[3*i + 2]."""
    n = x.shape[0] // 3
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = x[3 * j + 0] - x[3 * i + 0]
            dy = x[3 * j + 1] - x[3 * i + 1]
            dz = x[3 * j + 2] - x[3 * i + 2]
            r = np.sqrt(dx * dx + dy * dy + dz * dz)
            ex = np.exp(-MORSE_A * (r - MORSE_R0))
            e += MORSE_D * (ex * ex - 2.0 * ex)
    return e


# -- 2. spring network ---------------------------------------------------------------------------
def make_springs(conn, rest, k):
    """Energy of springs ``conn[s] = (a, b)`` of rest length ``rest[s]``, stiffness ``k[s]``."""

    def springs(x):
        e = 0.0
        for s in range(conn.shape[0]):
            a = conn[s, 0]
            b = conn[s, 1]
            dx = x[a, 0] - x[b, 0]
            dy = x[a, 1] - x[b, 1]
            length = np.sqrt(dx * dx + dy * dy)
            e += 0.5 * k[s] * (length - rest[s]) ** 2
        return e

    return springs


# -- 3. 2-D neo-Hookean finite elements ------------------------------------------------------------
def make_neohookean(tri, Bm, area):
    """Neo-Hookean strain energy of linear triangles ``tri[e] = (i, j, k)``; ``Bm[e]`` is the
    inverse of the reference edge matrix [X_j - X_i, X_k - X_i], ``area[e]`` its area."""

    def neohookean(x):
        e = 0.0
        for el in range(tri.shape[0]):
            i, j, k = tri[el]
            d00 = x[j, 0] - x[i, 0]
            d01 = x[k, 0] - x[i, 0]
            d10 = x[j, 1] - x[i, 1]
            d11 = x[k, 1] - x[i, 1]
            F00 = d00 * Bm[el, 0, 0] + d01 * Bm[el, 1, 0]
            F01 = d00 * Bm[el, 0, 1] + d01 * Bm[el, 1, 1]
            F10 = d10 * Bm[el, 0, 0] + d11 * Bm[el, 1, 0]
            F11 = d10 * Bm[el, 0, 1] + d11 * Bm[el, 1, 1]
            J = F00 * F11 - F01 * F10
            I1 = F00 * F00 + F01 * F01 + F10 * F10 + F11 * F11
            logJ = np.log(J)
            W = 0.5 * MU * (I1 - 2.0 - 2.0 * logJ) + 0.5 * LAM * logJ * logJ
            e += area[el] * W
        return e

    return neohookean


# -- 3b. 3-D neo-Hookean tetrahedra, with small matrices -----------------------------------------
def make_tets(tet, DmInv, vol):
    """Neo-Hookean strain energy of linear tetrahedra ``tet[e] = (a, b, c, d)``, written with
    3 x 3 matrices; ``DmInv[e]`` is the inverse of the reference edge matrix, ``vol[e]`` the
    element's volume."""

    def tets(x):
        e = 0.0
        for el in range(tet.shape[0]):
            a, b, c, d = tet[el]
            Ds = np.stack([x[b] - x[a], x[c] - x[a], x[d] - x[a]], axis=1)
            F = Ds @ DmInv[el]
            logJ = np.log(np.linalg.det(F))
            W = 0.5 * MU * (np.sum(F * F) - 3.0 - 2.0 * logJ) + 0.5 * LAM * logJ * logJ
            e += vol[el] * W
        return e

    return tets


# -- 4. three-body angle term ----------------------------------------------------------------------
def make_angles(trip):
    """Angle energy k (cos theta - c0)^2 over triples ``trip[t] = (i, j, k)``, j the vertex."""

    def angles(x):
        e = 0.0
        for t in range(trip.shape[0]):
            i, j, k = trip[t]
            ux = x[i, 0] - x[j, 0]
            uy = x[i, 1] - x[j, 1]
            uz = x[i, 2] - x[j, 2]
            vx = x[k, 0] - x[j, 0]
            vy = x[k, 1] - x[j, 1]
            vz = x[k, 2] - x[j, 2]
            uu = ux * ux + uy * uy + uz * uz
            vv = vx * vx + vy * vy + vz * vz
            cos = (ux * vx + uy * vy + uz * vz) / np.sqrt(uu * vv)
            e += ANGLE_K * (cos - ANGLE_C0) ** 2
        return e

    return angles


# -- 5. 2-D stencil --------------------------------------------------------------------------------
def stencil(u):
    """Ginzburg-Landau energy on an n x n grid: forward-difference gradient squared plus the
    double well (u^2 - 1)^2 / 4 over the interior points."""
    n = u.shape[0]
    e = 0.0
    for i in range(1, n - 1):
        for j in range(1, n - 1):
            dx = u[i + 1, j] - u[i, j]
            dy = u[i, j + 1] - u[i, j]
            w = u[i, j] * u[i, j] - 1.0
            e += 0.5 * KAPPA * (dx * dx + dy * dy) + 0.25 * w * w
    return e


# -- 6. explicit Euler of an oscillator chain ------------------------------------------------------
def make_chain(T, n, zeros=None):
    """Sum of the final x^2 after T explicit Euler steps of n masses on a chain of nonlinear
    springs (t = K s + B s^3), each pinned by K0; ``state = [x0 (n), v0 (n)]``.

    The arrays are made with ``np.zeros(n)`` as written in a script; ``zeros="like"`` makes them
    with ``np.zeros_like(state, shape=(n,))`` instead (arrays that tapejit traces)."""

    def chain(state):
        x = np.zeros(n)
        v = np.zeros(n)
        for i in range(n):
            x[i] = state[i]
            v[i] = state[n + i]
        for step in range(T):
            f = np.zeros(n)
            for i in range(n - 1):
                s = x[i + 1] - x[i]
                t = CHAIN_K * s + CHAIN_B * s * s * s
                f[i] += t
                f[i + 1] -= t
            xn = np.zeros(n)
            vn = np.zeros(n)
            for i in range(n):
                xn[i] = x[i] + CHAIN_DT * v[i]
                vn[i] = v[i] + CHAIN_DT * (f[i] - CHAIN_K0 * x[i])
            x = xn
            v = vn
        obj = 0.0
        for i in range(n):
            obj += x[i] * x[i]
        return obj

    def chain_zeros_like(state):
        x = np.zeros_like(state, shape=(n,))
        v = np.zeros_like(state, shape=(n,))
        for i in range(n):
            x[i] = state[i]
            v[i] = state[n + i]
        for step in range(T):
            f = np.zeros_like(state, shape=(n,))
            for i in range(n - 1):
                s = x[i + 1] - x[i]
                t = CHAIN_K * s + CHAIN_B * s * s * s
                f[i] += t
                f[i + 1] -= t
            xn = np.zeros_like(state, shape=(n,))
            vn = np.zeros_like(state, shape=(n,))
            for i in range(n):
                xn[i] = x[i] + CHAIN_DT * v[i]
                vn[i] = v[i] + CHAIN_DT * (f[i] - CHAIN_K0 * x[i])
            x = xn
            v = vn
        obj = 0.0
        for i in range(n):
            obj += x[i] * x[i]
        return obj

    return chain_zeros_like if zeros == "like" else chain


# -- 7. Lennard-Jones with a cutoff ----------------------------------------------------------------
def lj_cutoff(pos):
    """Shifted Lennard-Jones energy over pairs i < j closer than the cutoff, positions (N, 3)."""
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            r2 = dx * dx + dy * dy + dz * dz
            if r2 < LJ_RC2:
                s = 1.0 / (r2 * r2 * r2)
                e += 4.0 * (s * s - s) - LJ_ECUT
    return e


# -- inputs ----------------------------------------------------------------------------------------
@dataclass
class Case:
    """One model at one size: ``f(x)``, the example ``x``, the C reference's ``tables`` (numpy
    arrays and ints, by name) and ``jitter``, the size of :meth:`perturb`'s moves."""

    model: str
    label: str
    f: Callable[[np.ndarray], Any]
    x: np.ndarray
    tables: dict[str, Any] = field(default_factory=dict)
    jitter: float = 1e-3

    def perturb(self, rng: np.random.Generator) -> np.ndarray:
        """New data of the example's shape: ``x`` moved by up to ``jitter`` per entry."""
        return self.x + self.jitter * rng.uniform(-1.0, 1.0, self.x.shape)


def lattice(n: int, spacing: float, jitter: float, seed: int) -> np.ndarray:
    """n atoms on a jittered cubic lattice, shape (n, 3)."""
    side = int(np.ceil(n ** (1 / 3)))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    return grid[:n] * spacing + jitter * np.random.default_rng(seed).random((n, 3))


def _grid_springs(S: int, seed: int):
    """A triangulated square grid with enough edges (horizontal, vertical, one diagonal per
    square), the first ``S`` of them; positions stretched and jittered."""
    side = 2
    while 3 * (side - 1) ** 2 + 2 * (side - 1) < S:
        side += 1
    idx = np.arange(side * side).reshape(side, side)
    edges = []
    for r in range(side):
        for c in range(side):
            if c + 1 < side:
                edges.append((idx[r, c], idx[r, c + 1]))
            if r + 1 < side:
                edges.append((idx[r, c], idx[r + 1, c]))
            if r + 1 < side and c + 1 < side:
                edges.append((idx[r, c], idx[r + 1, c + 1]))
    conn = np.array(edges[:S], dtype=np.int64)
    n = int(conn.max()) + 1
    rng = np.random.default_rng(seed)
    ref = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), -1)
    ref = ref.reshape(-1, 2)[:n].astype(np.float64)
    rest = np.linalg.norm(ref[conn[:, 0]] - ref[conn[:, 1]], axis=1)
    k = SPRING_K * (0.5 + rng.random(S))
    x = ref * np.array([1.05, 0.97]) + 0.05 * rng.uniform(-1, 1, ref.shape)
    return conn, rest, k, np.ascontiguousarray(x)


def _grid_triangles(E: int, seed: int):
    """A structured mesh of nx x ny squares, two counter-clockwise triangles each (E = 2 nx ny),
    its reference inverse edge matrices and areas, and a deformed configuration (J > 0)."""
    squares = E // 2
    nx = next(d for d in range(int(np.ceil(np.sqrt(squares))), squares + 1) if squares % d == 0)
    ny = squares // nx
    assert 2 * nx * ny == E, f"E = {E}: no structured mesh of 2 nx ny triangles"
    node = np.arange((nx + 1) * (ny + 1)).reshape(ny + 1, nx + 1)
    tris = []
    for r in range(ny):
        for c in range(nx):
            a, b, cc, d = node[r, c], node[r, c + 1], node[r + 1, c + 1], node[r + 1, c]
            tris.append((a, b, cc))
            tris.append((a, cc, d))
    tri = np.array(tris, dtype=np.int64)
    X = np.stack(np.meshgrid(np.arange(nx + 1), np.arange(ny + 1)), -1).reshape(-1, 2) * 0.1
    X = X.astype(np.float64)
    Dm = np.stack([X[tri[:, 1]] - X[tri[:, 0]], X[tri[:, 2]] - X[tri[:, 0]]], axis=2)
    Bm = np.ascontiguousarray(np.linalg.inv(Dm))
    area = 0.5 * np.abs(np.linalg.det(Dm))
    rng = np.random.default_rng(seed)
    x = X * np.array([1.1, 0.95]) + 0.004 * rng.uniform(-1, 1, X.shape)
    return tri, Bm, area, np.ascontiguousarray(x)


def _grid_tets(E: int, seed: int):
    """A k x k x k cube of unit cells, six tetrahedra around each cell's diagonal (E = 6 k^3),
    positively oriented; their reference inverse edge matrices and volumes, and a deformed
    configuration (J > 0)."""
    k = round((E // 6) ** (1 / 3))
    assert 6 * k**3 == E, f"E = {E}: not 6 k^3 tetrahedra"
    node = np.arange((k + 1) ** 3).reshape(k + 1, k + 1, k + 1)
    tets = []
    for i, j, l in np.ndindex(k, k, k):
        c = [node[i + a, j + b, l + e] for a in (0, 1) for b in (0, 1) for e in (0, 1)]
        for p, q in ((1, 3), (3, 2), (2, 6), (6, 4), (4, 5), (5, 1)):
            tets.append((c[0], c[p], c[q], c[7]))
    tet = np.array(tets, dtype=np.int64)
    X = np.stack(np.meshgrid(*[np.arange(k + 1.0)] * 3, indexing="ij"), -1).reshape(-1, 3) * 0.1
    Dm = np.stack([X[tet[:, m]] - X[tet[:, 0]] for m in (1, 2, 3)], axis=2)
    flip = np.linalg.det(Dm) < 0
    tet[flip, 1], tet[flip, 2] = tet[flip, 2].copy(), tet[flip, 1].copy()
    Dm = np.stack([X[tet[:, m]] - X[tet[:, 0]] for m in (1, 2, 3)], axis=2)
    DmInv = np.ascontiguousarray(np.linalg.inv(Dm))
    vol = np.linalg.det(Dm) / 6.0
    rng = np.random.default_rng(seed)
    x = X * np.array([1.1, 0.95, 1.02]) + 0.004 * rng.uniform(-1, 1, X.shape)
    return tet, DmInv, vol, np.ascontiguousarray(x)


def _triples(T: int, seed: int):
    """Angle triples (i, j, k), j the vertex: 7 neighbour pairs of each atom of a jittered
    8 x 8 x (T / 448) lattice (neighbours wrap around the box)."""
    nz = T // (7 * 64)
    assert 7 * 64 * nz == T, f"T = {T}: not 7 triples per atom of an 8 x 8 x nz lattice"
    shape = (8, 8, nz)
    n = 8 * 8 * nz
    ijk = np.stack(np.unravel_index(np.arange(n), shape), -1)
    steps = [(1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1)]
    pairs = [(0, 2), (0, 4), (2, 4), (1, 3), (1, 5), (3, 5), (0, 1)]  # 6 right angles, 1 straight
    nb = [np.ravel_multi_index(((ijk + s) % shape).T, shape) for s in steps]
    trip = np.empty((n, 7, 3), dtype=np.int64)
    for p, (a, b) in enumerate(pairs):
        trip[:, p, 0], trip[:, p, 1], trip[:, p, 2] = nb[a], np.arange(n), nb[b]
    trip = trip.reshape(-1, 3)
    rng = np.random.default_rng(seed)
    x = ijk * 1.0 + 0.1 * rng.uniform(-1, 1, (n, 3))
    return trip, np.ascontiguousarray(x)


def build(model: str, size) -> Case:
    """The model ``model`` at ``size`` (an int; for ``chain`` a pair ``(T, n)``)."""
    if model == "morse":
        x = lattice(size, 1.3, 0.1, size).reshape(-1)
        return Case(model, f"N={size}", morse, x, {"n": size})
    if model == "springs":
        conn, rest, k, x = _grid_springs(size, size)
        f = make_springs(conn, rest, k)
        return Case(model, f"S={size}", f, x, {"conn": conn, "rest": rest, "k": k})
    if model == "neohookean":
        tri, Bm, area, x = _grid_triangles(size, size)
        f = make_neohookean(tri, Bm, area)
        return Case(model, f"E={size}", f, x, {"tri": tri, "Bm": Bm, "area": area})
    if model == "tets":
        tet, DmInv, vol, x = _grid_tets(size, size)
        f = make_tets(tet, DmInv, vol)
        return Case(model, f"E={size}", f, x, {"tet": tet, "DmInv": DmInv, "vol": vol})
    if model == "angles":
        trip, x = _triples(size, size)
        return Case(model, f"T={size}", make_angles(trip), x, {"trip": trip})
    if model == "stencil":
        u = 0.5 + 0.3 * np.random.default_rng(size).standard_normal((size, size))
        return Case(model, f"n={size}", stencil, u, {"n": size})
    if model in ("chain", "chain_zl"):
        T, n = size
        rng = np.random.default_rng(T + n)
        state = np.concatenate([0.5 * rng.standard_normal(n), 0.2 * rng.standard_normal(n)])
        f = make_chain(T, n, "like" if model == "chain_zl" else None)
        return Case(model, f"T={T},n={n}", f, state, {"T": T, "n": n})
    if model == "ljcut":
        pos = lattice(size, 1.5, 0.1, size)
        return Case(model, f"N={size}", lj_cutoff, pos, {"n": size})
    raise KeyError(f"no model {model!r}; the models are {', '.join(MODELS)}")


#: model -> (sizes of bench/test_scalarised.py, sizes of bench/scalarised_compile.py)
MODELS: dict[str, tuple[list, list]] = {
    "morse": ([64], [64, 1024]),
    "springs": ([1000], [1000, 10000]),
    "neohookean": ([1000], [1000, 10000]),
    "tets": ([6000], [6000, 48000]),
    "angles": ([7168], [7168]),
    "stencil": ([32], [32, 128]),
    "chain": ([(100, 16)], [(100, 16), (1000, 32)]),
    "chain_zl": ([(100, 16)], [(100, 16), (1000, 32)]),
    "ljcut": ([32, 64], [32, 64]),
}


def central_difference(f: Callable, x: np.ndarray, h: float = 1e-6, entries=None) -> np.ndarray:
    """Central differences of ``f`` at ``x`` for the flat ``entries`` (all by default); the
    other entries are NaN."""
    g = np.full(x.size, np.nan)
    flat = x.reshape(-1)
    for p in range(x.size) if entries is None else entries:
        xp, xm = flat.copy(), flat.copy()
        xp[p] += h
        xm[p] -= h
        g[p] = (f(xp.reshape(x.shape)) - f(xm.reshape(x.shape))) / (2 * h)
    return g.reshape(x.shape)
