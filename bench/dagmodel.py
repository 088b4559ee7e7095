"""Issue 6's model: a random DAG of V 16-wide dense tanh layers, and its hand-written numpy
forward and backward passes (the reference for ``test_dag.py``).

Vertex v computes ``out_v = tanh(W_v @ s_v + b_v)``; ``s_0 = x`` (shape (16,)); for v > 0,
``s_v = out_{v-1}`` plus, with probability 1/2, ``out_r`` of one random earlier vertex r < v - 1.
The loss is ``sum(out_{V-1})``. All W_v, b_v are packed into one flat ``params`` vector (vertex v
owns ``params[v*272 : (v+1)*272]``: W_v row-major, then b_v). The graph is fixed by ``seed``, so
a fresh process builds the same trace (and hits the same tapejit cache entry).
"""

from __future__ import annotations

import numpy as np

H = 16
PER_VERTEX = H * H + H


def skips(V: int, seed: int = 0) -> list[int | None]:
    """The extra (skip) input of every vertex: an earlier vertex's index, or None."""
    rng = np.random.default_rng(seed)
    out: list[int | None] = [None]
    for v in range(1, V):
        coin, r = rng.random(), int(rng.integers(0, max(v - 1, 1)))
        out.append(r if v >= 2 and coin < 0.5 else None)
    return out


def make_model(V: int, seed: int = 0):
    """``dag(params, x)``: the loss, written as numpy code for tapejit to trace."""
    skip = skips(V, seed)

    def dag(params, x):
        outs = []
        for v in range(V):
            s = x if v == 0 else outs[v - 1]
            if skip[v] is not None:
                s = s + outs[skip[v]]
            W = params[v * PER_VERTEX : v * PER_VERTEX + H * H].reshape(H, H)
            b = params[v * PER_VERTEX + H * H : (v + 1) * PER_VERTEX]
            outs.append(np.tanh(W @ s + b))
        return np.sum(outs[-1])

    return dag


def make_inputs(V: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(params, x): weights scaled so the tanh layers neither saturate nor vanish."""
    rng = np.random.default_rng(seed)
    params = rng.normal(0.0, 1.0 / np.sqrt(2 * H), size=(V, PER_VERTEX))
    params[:, H * H :] = rng.normal(0.0, 0.1, size=(V, H))
    return params.ravel().copy(), rng.normal(size=H)


class Backprop:
    """The hand-written numpy forward and reverse pass of the DAG, with preallocated buffers."""

    def __init__(self, V: int, seed: int = 0):
        self.V, self.skip = V, skips(V, seed)
        self.S = np.empty((V, H))  # s_v, the input of every layer
        self.O = np.empty((V, H))  # out_v
        self.D = np.empty((V, H))  # cotangent of out_v

    def loss(self, params: np.ndarray, x: np.ndarray) -> float:
        self._forward(params.reshape(self.V, PER_VERTEX), x)
        return float(self.O[-1].sum())

    def _forward(self, P: np.ndarray, x: np.ndarray) -> None:
        S, O = self.S, self.O
        for v in range(self.V):
            S[v] = x if v == 0 else O[v - 1]
            if self.skip[v] is not None:
                S[v] += O[self.skip[v]]
            np.tanh(P[v, : H * H].reshape(H, H) @ S[v] + P[v, H * H :], out=O[v])

    def grad(self, params: np.ndarray, x: np.ndarray, gp: np.ndarray, gx: np.ndarray) -> float:
        """Write d loss / d params into ``gp`` and d loss / d x into ``gx``; returns the loss."""
        P, GP = params.reshape(self.V, PER_VERTEX), gp.reshape(self.V, PER_VERTEX)
        self._forward(P, x)
        S, O, D = self.S, self.O, self.D
        D[:] = 0.0
        D[-1] = 1.0
        for v in range(self.V - 1, -1, -1):
            dz = D[v] * (1.0 - O[v] * O[v])
            np.outer(dz, S[v], out=GP[v, : H * H].reshape(H, H))
            GP[v, H * H :] = dz
            ds = dz @ P[v, : H * H].reshape(H, H)
            if v == 0:
                gx[:] = ds
            else:
                D[v - 1] += ds
            if self.skip[v] is not None:
                D[self.skip[v]] += ds
        return float(O[-1].sum())
