"""``vmap``: a function mapped over a leading batch axis, as one native loop.

``vmap(f)(X)`` is ``np.stack([f(x) for x in X])`` computed by a :func:`tapejit.scan` over the
rows of the batched arguments whose body is ``f`` traced once for one row — so ``f``'s code is
compiled once, and the loop over the batch runs in native code. Called on arrays, the mapped
function is compiled with :func:`tapejit.jit` (one specialisation per argument signature);
called on traced values (inside a function being compiled, differentiated, or mapped again) it
*is* that scan, so it composes with every transformation as a loop does: ``grad`` of a function
that calls ``vmap`` differentiates the loop (a native backward loop), ``vmap(grad(f))`` maps
the gradient program (``grad(f)`` called on traced values inlines its gradient graph), and
``vmap(vmap(f))`` is a loop nest.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .frontend import tracing
from .frontend.control import _flatten, _unflatten, scan


def _axes(in_axes: Any, n: int, name: str) -> tuple:
    """``in_axes`` as one entry (0 or None) per argument; ``ValueError`` otherwise."""
    axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * n
    if len(axes) != n:
        raise ValueError(f"vmap of {name}: in_axes has {len(axes)} entries for {n} arguments")
    for a in axes:
        if a is not None and not (isinstance(a, int) and not isinstance(a, bool) and a == 0):
            raise ValueError(
                f"vmap of {name}: in_axes entries must be 0 (mapped over the leading axis) or "
                f"None (not mapped), got {a!r}"
            )
    return axes


def vmap(f: Callable, in_axes: int | None | Sequence[int | None] = 0, out_axes: int = 0) -> Callable:
    """``f`` mapped over the leading axis of its arguments, as ``jax.vmap`` restricted to axis 0.

    ``in_axes``: ``0`` (every argument is mapped over its leading axis), ``None`` (none is),
    or one entry per positional argument. A mapped argument is a float64 array of shape ``(m,
    ...)`` — or a tuple/list of them, every leaf mapped — and ``f`` sees row ``k`` of it; an
    argument with ``None`` is passed whole to every call. Every mapped leaf must have the same
    leading length ``m`` (at least one argument must be mapped). ``out_axes``: ``0`` only — each
    output of ``f`` (an array, a number, or a tuple/list of them) comes back stacked along a new
    leading axis of length ``m``, float64.

    Called on arrays, the mapped function is compiled to native code (:func:`tapejit.jit`,
    one specialisation per signature); on traced values it is a :func:`tapejit.scan` over the
    rows (see the module docstring for what composes). ``f`` is traced once, for one row:
    Python control flow on traced values inside ``f`` raises :class:`tapejit.TracingError`
    there, as in any loop body (use :func:`tapejit.where`).

    Raises ``ValueError`` for invalid ``in_axes``/``out_axes`` or leading lengths that differ,
    and :class:`tapejit.TracingError` when ``f`` cannot be traced.
    """
    name = getattr(f, "__name__", "f")
    if not (isinstance(out_axes, int) and not isinstance(out_axes, bool) and out_axes == 0):
        raise ValueError(f"vmap of {name}: only out_axes=0 is supported, got {out_axes!r}")

    def mapped(*args: Any) -> Any:
        axes = _axes(in_axes, len(args), name)
        batched = [i for i, a in enumerate(axes) if a == 0]
        if not batched:
            raise ValueError(f"vmap of {name}: no argument is mapped (every in_axes is None)")
        leaves, structs = [], []
        for i in batched:
            ls, st = _flatten(args[i])
            leaves.append(ls)
            structs.append(st)
        flat = [x for ls in leaves for x in ls]
        lengths = {np.shape(x)[0] if np.ndim(x) else None for x in flat}
        if None in lengths:
            raise ValueError(f"vmap of {name}: a mapped argument has no leading axis (a scalar)")
        if len(lengths) != 1:
            raise ValueError(
                f"vmap of {name}: mapped arguments have different leading lengths {sorted(lengths)}"
            )

        def step(carry, rows):
            call = list(args)
            k = 0
            for i, ls, st in zip(batched, leaves, structs):
                call[i] = _unflatten(st, rows[k : k + len(ls)])
                k += len(ls)
            return carry, f(*call)

        _, ys = scan(step, 0.0, flat)
        return ys

    mapped.__name__ = f"vmap_of_{name}"
    jitted = None

    def batched(*args: Any) -> Any:
        nonlocal jitted
        if any(_has_tracer(a) for a in args) or tracing._current:
            return mapped(*args)
        if jitted is None:
            from .api import jit

            jitted = jit(mapped)
        return jitted(*args)

    batched.__name__ = mapped.__name__
    batched.__doc__ = f"{name} mapped over the leading axis (tapejit.vmap, in_axes={in_axes!r})."
    batched.__wrapped__ = f  # type: ignore[attr-defined]
    return batched


def _has_tracer(a: Any) -> bool:
    if isinstance(a, tracing.Tracer):
        return True
    if isinstance(a, (tuple, list)):
        return any(_has_tracer(x) for x in a)
    return False
