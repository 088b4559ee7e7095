"""Parameter sweeps of a compiled gradient on Dask (optional: ``pip install 'tapejit[dask]'``).

:func:`batch` evaluates ``grad`` at every row of ``X`` as a Dask array computation: the rows are
split into blocks, each block is one native :meth:`~tapejit.GradientFunction.batch` call, and the
compiled gradient enters the graph once, as a single ``dask.delayed`` object, so a distributed
scheduler ships it (pickled: object code, no recompiling — see :mod:`tapejit.runtime.pickling`)
to each worker once, not with every task. The same recipe by hand::

    import dask, dask.array as da
    g = dask.delayed(grad, name="eam-gradient")            # one key for the compiled gradient
    X = da.from_array(rows, chunks=(10_000, *rows.shape[1:]))
    G = da.map_blocks(lambda block, g: g.batch(block), X, g, dtype=float)
    G.compute()                                            # on the current scheduler/client

Only single-argument gradients are handled by :func:`batch`; for several arguments, map over
blocks of each the same way. A gradient is also an ordinary Dask callable —
``dask.delayed(grad)(x)``, ``client.submit(grad, x)``, ``client.scatter(grad)``: it answers
``functools.partial``'s ``func``/``args``/``keywords``, which Dask reads to name and tokenize a
task, and its token is the digest of its pickle.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _block(block: np.ndarray, grad: Any) -> np.ndarray:
    return grad.batch(np.ascontiguousarray(block, dtype=np.float64))


def batch(grad: Any, X: Any, rows_per_task: int = 10_000, compute: bool = True) -> Any:
    """The gradient of ``grad`` (a :class:`tapejit.GradientFunction` of one argument of shape
    ``s``) at every row of ``X`` (shape ``(m, *s)``: a numpy or Dask array), on Dask's current
    scheduler — a ``distributed.Client`` if one is active.

    ``rows_per_task``: rows per task when ``X`` is a numpy array (a Dask array keeps its chunks
    along the first axis; other axes are merged). Returns a numpy array of shape
    ``(m, *grad_shape)``, or the Dask array with ``compute=False``.

    Raises ``ImportError`` naming the extra when Dask is not installed, ``TypeError`` for a
    gradient of several arguments, ``ValueError`` for a wrong shape of ``X``.
    """
    try:
        import dask
        import dask.array as da
    except ImportError as e:  # pragma: no cover - exercised without dask only
        raise ImportError(
            "tapejit.tools.dask needs Dask: pip install 'tapejit[dask]' (dask[array] and distributed)"
        ) from e
    shapes = grad._primary.signature.shapes
    if len(shapes) != 1 or grad._primary.signature.tuple_result:
        raise TypeError(
            f"tapejit.tools.dask.batch handles gradients of one argument; {grad.name} takes "
            f"{len(shapes)} (map over blocks of each argument by hand: see tapejit.tools.dask)"
        )
    (shape,) = shapes
    if np.ndim(X) != len(shape) + 1 or tuple(np.shape(X)[1:]) != shape:
        raise ValueError(
            f"tapejit.tools.dask.batch: X must have shape (m, {', '.join(map(str, shape))}), "
            f"got {np.shape(X)}"
        )
    if not isinstance(X, da.Array):
        X = da.from_array(np.asarray(X), chunks=(rows_per_task, *shape))
    else:
        X = X.rechunk({k: -1 for k in range(1, X.ndim)})
    # one key for the compiled gradient (named, so Dask never needs to tokenize its contents)
    g = dask.delayed(grad, name=f"tapejit-{grad.name}-{id(grad):x}", traverse=False)
    out = da.map_blocks(_block, X, g, dtype=np.float64, meta=np.empty((0,) * X.ndim))
    return out.compute() if compute else out
