"""The public entry points: :func:`compile`, :func:`grad`, :func:`value_and_grad`.

``compile(f, *example_args, argnums=0)`` runs the whole pipeline once — trace, reverse mode,
passes, memory plan, LLVM lowering, JIT — and returns a :class:`GradientFunction` that calls the
native code. The gradient is specialised to the example arguments' shapes: calling it with other
shapes raises a ``ValueError`` (use :func:`grad`, which compiles one specialisation per shape).
The machinery lives in :mod:`tapejit.pipeline` (the stages) and :mod:`tapejit.runtime` (calls,
validation, specialisations).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Sequence

import numpy as np

from .frontend import nested, tracing
from .pipeline import STAGES
from .runtime.dispatch import GuardError, GuardWarning, MaxStepsError, MaxStepsWarning
from .runtime.function import GradientFunction
from .runtime.options import DYNAMIC_CAPACITY, CacheSpec, object_cache
from .runtime.pytrees import Raveled, TreeGradient, is_array_like, is_container, optree

__all__ = [
    "DYNAMIC_CAPACITY",
    "STAGES",
    "GradientFunction",
    "GuardError",
    "GuardWarning",
    "MaxStepsError",
    "MaxStepsWarning",
    "compile",
    "grad",
    "hessian",
    "hvp",
    "jacfwd",
    "jacobian",
    "jacrev",
    "jit",
    "jvp",
    "object_cache",
    "value_and_grad",
    "vjp",
]


def compile(
    f: Callable,
    *example_args: Any,
    argnums: int | Sequence[int] = 0,
    cache: CacheSpec = True,
    on_guard_failure: str = "recompile",
    max_specialisations: int = 8,
    dynamic_argnums: int | Sequence[int] = (),
    on_max_steps: str = "warn",
    progress: bool | None = None,
    mode: str = "grad",
    has_aux: bool = False,
) -> GradientFunction:
    """Compile the gradient of scalar-valued ``f`` for arguments shaped like ``example_args``.

    ``f`` takes float64 arrays (any shape) or floats and returns a scalar float; it is written
    with numpy (``np.exp``, ``@``, ``x.sum()``, indexing, Python loops over elements ...).
    ``argnums`` (int or tuple of ints) selects the arguments to differentiate; the others are
    runtime inputs that get no gradient. Numpy arrays that ``f`` captures are snapshotted now.

    ``cache`` chooses the on-disk cache of compiled machine code (see :func:`object_cache`): a
    hit skips everything after tracing (reverse mode, passes, LLVM); tracing always runs and the
    key is the trace with the captured arrays' bytes, so changed code or a changed captured
    array is always seen.

    Python control flow on traced values (``if x[0] > 1:``, ``range(int(x[0]))``) follows the
    example input and records a *guard*; the native code re-checks every guard and, when one
    fails, stops before writing any output. Then ``on_guard_failure="recompile"`` (default)
    retraces ``f`` with the actual input, compiles that specialisation, keeps up to
    ``max_specialisations`` of them (least recently used dropped; a :class:`GuardWarning` when
    more compiles than that were needed) and answers the call; ``"raise"`` raises
    :class:`GuardError` naming the guard's source line. ``tapejit.where(c, a, b)`` is the
    branch-free alternative, with no guard.

    ``dynamic_argnums``: arguments whose leading axis may have a different length at every call
    *without recompiling* — a sequence that ``f`` passes to :func:`tapejit.scan` as ``xs``
    (the only use allowed; the scan then runs as many iterations as the call's length and
    returns no ``ys``). Such an argument cannot be differentiated. It is compiled for a capacity
    of :data:`DYNAMIC_CAPACITY` rows (or more, for a longer example) that sizes the loop's
    residual stack in the workspace; a longer call compiles once more with the capacity
    doubled. Calls with dynamic arguments take the Python call path (~1-2 µs) and cannot be
    batched.

    ``on_max_steps``: what a call does when a top-level :func:`tapejit.while_loop` runs all its
    ``max_steps`` iterations with its condition still true — ``"warn"`` (default) issues a
    :class:`MaxStepsWarning` and returns the value and gradient of the loop cut off there;
    ``"raise"`` raises :class:`MaxStepsError`.

    ``progress``: show the compile's stages on standard error when it runs past a second —
    ``None`` (default) on a terminal unless ``$TAPEJIT_PROGRESS=0``; every stage is also logged
    to the ``"tapejit"`` logger (:mod:`tapejit.progress`).

    ``mode``: what to compile — ``"grad"`` (default: the gradient of a scalar ``f``), or a
    transformation of :mod:`tapejit.transforms`: ``"jvp"`` (call with ``*args, *tangents``;
    returns ``(*ys, *tangents)``), ``"vjp"`` (``*args, *cotangents`` -> ``(*ys, *gradients)``),
    ``"jacfwd"``/``"jacrev"`` (the Jacobian of each output wrt each argument, shape
    ``y.shape + x.shape``), ``"hvp"`` (``*args, v`` -> ``H v``), ``"hessian"`` (``H``, shape
    ``x.shape + x.shape``), ``"value"`` (``f`` itself, not differentiated: its outputs; give
    ``argnums=()``). :func:`jvp`, :func:`vjp`, :func:`jacobian`, :func:`hvp`, :func:`hessian`
    and :func:`jit` are the convenient forms.

    Pytrees: arguments may be nested tuples/lists/dicts/namedtuples/dataclasses of arrays and
    numbers (flattened with optree: ``pip install 'tapejit[pytrees]'``); gradients come back in
    the structure of the differentiated arguments and ``out=`` takes it. ``has_aux=True``: ``f``
    returns ``(value, aux)`` (``aux`` any pytree of arrays computed in ``f``); a call returns
    ``(gradient, aux)`` from the same native call, ``value_and_grad`` ``((value, aux),
    gradient)``. Either returns a :class:`~tapejit.runtime.pytrees.TreeGradient` (same calls,
    a little Python around the native call) for ``mode="grad"``; the other modes take arrays
    here (the functions :func:`jvp`, :func:`vjp`, :func:`jacobian`, :func:`hessian` and
    :func:`hvp` take pytrees).

    Returns a :class:`GradientFunction`. Raises :class:`tapejit.TracingError` when ``f`` cannot be
    traced (unsupported numpy function, a non-scalar result, a conversion that would drop a
    derivative), naming the file and line; ``TypeError``/``ValueError`` for invalid options.
    """
    options = dict(
        cache=cache,
        on_guard_failure=on_guard_failure,
        max_specialisations=max_specialisations,
        dynamic_argnums=dynamic_argnums,
        on_max_steps=on_max_steps,
        progress=progress,
    )
    if has_aux or any(is_container(a) for a in example_args):
        if mode != "grad":
            raise TypeError(
                f"pytree arguments and has_aux work with mode='grad' so far, not {mode!r}: "
                "pass arrays (flatten the containers yourself)"
            )
        return TreeGradient(f, example_args, argnums, has_aux=has_aux, **options)
    return GradientFunction(f, example_args, argnums, mode=mode, **options)


def _signature_key(args: Sequence[Any]) -> tuple:
    """What a compiled function is specialised on: the shapes (and pytree structure)."""
    if not any(is_container(a) for a in args):
        return tuple(np.shape(a) for a in args)
    ot = optree()
    leaves, treedef = ot.tree_flatten(tuple(args), none_is_leaf=True)
    return (treedef, tuple(np.shape(x) for x in leaves))


class _Lazy:
    """A gradient that compiles one specialisation per argument-shape signature, on first use."""

    def __init__(
        self, f: Callable, argnums: int | Sequence[int], with_value: bool, has_aux: bool = False
    ):
        self.fn, self.argnums, self.with_value, self.has_aux = f, argnums, with_value, has_aux
        self.specialisations: dict[tuple, Any] = {}
        self.__doc__ = (
            f"{'(value, gradient)' if with_value else 'The gradient'} of "
            f"{getattr(f, '__name__', 'f')} with respect to argnums={argnums!r}, compiled per "
            "set of argument shapes (see tapejit.compile)."
        )

    def __call__(self, *args: Any, out: Any = None):
        if tracing.in_trace():  # inside a traced function: the gradient as IR of that trace
            if out is not None:
                raise tracing.TracingError(
                    f"{tracing._user_site()}: out= is not supported for a gradient inside a "
                    "traced function (it returns traced values)"
                )
            return nested.grad_in_trace(
                self.fn, args, self.argnums, self.with_value, self.has_aux
            )
        key = _signature_key(args)
        g = self.specialisations.get(key)
        if g is None:
            g = self.specialisations[key] = compile(
                self.fn, *args, argnums=self.argnums, has_aux=self.has_aux
            )
        return g.value_and_grad(*args, out=out) if self.with_value else g(*args, out=out)

    def __repr__(self) -> str:
        kind = "value_and_grad" if self.with_value else "grad"
        return f"<tapejit.{kind} of {getattr(self.fn, '__name__', 'f')}, argnums={self.argnums!r}>"


def grad(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """The gradient of scalar-valued ``f`` as a function: ``grad(f)(*args, out=None)``.

    Like :func:`compile`, but lazy: the first call with a given set of argument shapes traces and
    compiles ``f`` for them (default options), later calls with those shapes reuse that
    :class:`GradientFunction`. ``argnums``: the argument(s) to differentiate (an int: the
    gradient is an array of that argument's shape, or a float for a scalar; a tuple: a tuple of
    gradients in that order). ``out=``: as for :class:`GradientFunction`.

    Arguments may be pytrees (see :func:`compile`); ``has_aux=True``: ``f`` returns ``(value,
    aux)`` and the call returns ``(gradient, aux)``.

    Raises :class:`tapejit.TracingError` at the first call when ``f`` cannot be traced, and the
    ``TypeError``/``ValueError`` of a :class:`GradientFunction` call for invalid arguments.
    """
    return _Lazy(f, argnums, with_value=False, has_aux=has_aux)


def value_and_grad(
    f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False
) -> Callable:
    """``value_and_grad(f)(*args, out=None) -> (f(*args), gradient)``, both from one native call.

    The value ``f(*args)`` is a Python float; the gradient is an array of the differentiated
    argument's shape (a float for a scalar argument), or a tuple of them in ``argnums`` order
    for a tuple ``argnums``. ``out=``, if given, receives the gradient (writeable C-contiguous
    float64 arrays of the gradient's shape) and is returned in the gradient's place. Compiled
    lazily, like :func:`grad`: the first call with a given set of argument shapes traces and
    compiles ``f``; later calls with those shapes reuse it.

    Arguments may be pytrees (see :func:`compile`); ``has_aux=True``: ``f`` returns ``(value,
    aux)`` and the call returns ``((value, aux), gradient)``.

    Raises :class:`tapejit.TracingError` at the first call when ``f`` cannot be traced, and the
    ``TypeError``/``ValueError`` of a :class:`GradientFunction` call for invalid arguments.
    """
    return _Lazy(f, argnums, with_value=True, has_aux=has_aux)


# -- transformations ------------------------------------------------------------------------------
# Compiled transformations of f, one per (mode, argnums, argument shapes), kept as long as f lives.
_COMPILED: "weakref.WeakKeyDictionary[Callable, dict]" = weakref.WeakKeyDictionary()


def _table(f: Callable) -> dict:
    try:
        return _COMPILED.setdefault(f, {})
    except TypeError:  # f cannot be weakly referenced: compile each time (the disk cache helps)
        return {}


def _compiled(f: Callable, mode: str, argnums: Any, args: Sequence[Any]) -> GradientFunction:
    key = (mode, argnums, tuple(np.shape(a) for a in args))
    table = _table(f)
    g = table.get(key)
    if g is None:
        g = table[key] = compile(f, *args, argnums=argnums, mode=mode)
    return g


def _raveled(f: Callable, args: Sequence[Any], argnums: Any, mode: str):
    """For pytree arguments: ``(r, compiled, vec, others)`` — ``f`` as a function of one flat
    vector of the ``argnums`` leaves (:class:`~tapejit.runtime.pytrees.Raveled`), compiled in
    ``mode`` with respect to that vector."""
    key = ("raveled", mode, argnums, _signature_key(args))
    table = _table(f)
    hit = table.get(key)
    if hit is None:
        r = Raveled(f, args, argnums)
        vec, others = r.vector(args)
        hit = table[key] = (r, compile(r, vec, *others, argnums=0, mode=mode))
    r, g = hit
    vec, others = r.vector(args)
    return r, g, vec, others


def _seq(name: str, values: Any) -> tuple:
    if not isinstance(values, (tuple, list)):
        raise TypeError(f"{name} must be a tuple or list, got {type(values).__name__}")
    return tuple(values)


def _arrays(name: str, values: Any) -> tuple:
    values = _seq(name, values)
    for k, v in enumerate(values):
        if not is_array_like(v):
            raise TypeError(f"{name}[{k}] must be a float64 array or a number, got {type(v).__name__}")
    return values


def _split_outputs(flat: Any, n: int) -> tuple:
    flat = flat if isinstance(flat, tuple) else (flat,)
    return flat[:n], flat[n:]


def jvp(f: Callable, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
    """Forward mode: ``(f(*primals), J(primals) @ tangents)``, as ``jax.jvp``.

    ``primals`` and ``tangents`` are tuples of float64 arrays or numbers of matching shapes (one
    tangent per primal). ``f`` returns an array, a number or a tuple of them; the result is
    ``(y, y_dot)`` of the same structure. Compiled once per set of shapes (``compile(f, *primals,
    mode="jvp")`` is the compiled form: call it as ``jf(*primals, *tangents)``), one native call.

    Raises ``TypeError``/``ValueError`` naming the tangent whose type or shape is wrong, and
    :class:`tapejit.TracingError` when ``f`` cannot be traced.
    """
    primals, tangents = _seq("primals", primals), _seq("tangents", tangents)
    if len(tangents) != len(primals):
        raise TypeError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    if any(is_container(p) for p in primals):
        return _tree_jvp(f, primals, tangents)
    primals, tangents = _arrays("primals", primals), _arrays("tangents", tangents)
    for k, (p, t) in enumerate(zip(primals, tangents)):
        if np.shape(p) != np.shape(t):
            raise ValueError(
                f"jvp: tangents[{k}] must have the shape of primals[{k}], {np.shape(p)}, "
                f"got {np.shape(t)}"
            )
    g = _compiled(f, "jvp", tuple(range(len(primals))), primals)
    ys, ts = _split_outputs(g(*primals, *tangents), g._n_outputs // 2)
    return (ys[0], ts[0]) if len(ys) == 1 else (ys, ts)


def _tree_jvp(f: Callable, primals: tuple, tangents: tuple) -> tuple[Any, Any]:
    nums = tuple(range(len(primals)))
    r, g, vec, others = _raveled(f, primals, nums, "jvp")
    t = r.vector_of(tangents, "jvp: tangents")
    y, ydot = g(vec, *others, t)
    return r.unravel_output(y), r.unravel_output(ydot)


def vjp(f: Callable, *primals: Any) -> tuple[Any, Callable]:
    """Reverse mode with a cotangent given at call time: ``(f(*primals), vjp_fn)`` where
    ``vjp_fn(cotangent)`` returns the tuple of cotangents of the primals, as ``jax.vjp``.

    ``f`` returns an array or a number (or a tuple of them: then give one cotangent each);
    cotangents have the outputs' shapes. Compiled once per set of shapes (``compile(f,
    *primals, mode="vjp")``, called as ``vf(*primals, *cotangents)`` -> ``(*ys, *grads)``).

    Raises ``TypeError``/``ValueError`` naming the cotangent whose type or shape is wrong.
    """
    if any(is_container(p) for p in primals):
        r, g, vec, others = _raveled(f, primals, tuple(range(len(primals))), "vjp")
        y, _ = g(vec, *others, r.output_zeros())

        def tree_vjp_fn(cotangent: Any) -> tuple:
            ct = r.ravel_like_output(cotangent, "vjp_fn: the cotangent")
            _, grad = g(vec, *others, ct)
            return r.unravel_args(grad)

        return r.unravel_output(y), tree_vjp_fn
    primals = _arrays("primals", primals)
    g = _compiled(f, "vjp", tuple(range(len(primals))), primals)
    shapes = g._primary.signature.shapes[len(primals) :]
    zeros = [np.zeros(s) for s in shapes]
    out = g(*primals, *zeros)
    ys, _ = _split_outputs(out, len(shapes))

    def vjp_fn(*cotangents: Any) -> tuple:
        if len(cotangents) != len(shapes):
            raise TypeError(f"vjp_fn takes {len(shapes)} cotangent(s), got {len(cotangents)}")
        for k, (c, s) in enumerate(zip(cotangents, shapes)):
            if not is_array_like(c) or np.shape(c) != s:
                got = np.shape(c) if is_array_like(c) else type(c).__name__
                raise ValueError(f"vjp_fn: cotangent {k} must have the output's shape {s}, got {got}")
        _, grads = _split_outputs(g(*primals, *cotangents), len(shapes))
        return tuple(grads)

    return (ys[0] if len(ys) == 1 else ys), vjp_fn


def _jacobian_fn(f: Callable, argnums: int | Sequence[int], mode: str) -> Callable:
    def jac(*args: Any) -> Any:
        if any(is_container(a) for a in args):
            chosen = "jacrev" if mode == "auto" else mode
            r, g, vec, others = _raveled(f, args, argnums, chosen)
            J = g(vec, *others)
            return r.blocks(np.reshape(J, (-1, vec.size)))
        args = _arrays("arguments", args)
        chosen = mode
        if mode == "auto":  # forward mode only when the inputs are fewer than the outputs
            nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
            n_in = sum(int(np.size(args[i])) for i in nums)
            y = f(*args)
            n_out = sum(int(np.size(v)) for v in (y if isinstance(y, tuple) else (y,)))
            chosen = "jacfwd" if n_in < n_out else "jacrev"
        g = _compiled(f, chosen, argnums, args)
        flat = g(*args)
        flat = flat if isinstance(flat, tuple) else (flat,)
        n_args = 1 if isinstance(argnums, int) else len(argnums)
        blocks = [flat[k : k + n_args] for k in range(0, len(flat), n_args)]
        per_out = [b[0] if isinstance(argnums, int) else tuple(b) for b in blocks]
        return per_out[0] if len(per_out) == 1 else tuple(per_out)

    jac.__name__ = f"jacobian_of_{getattr(f, '__name__', 'f')}"
    return jac


def jacobian(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """The Jacobian of ``f`` as a function: ``jacobian(f)(*args)`` has shape ``y.shape +
    x.shape`` (a tuple over ``argnums`` for a tuple, a tuple over outputs when ``f`` returns a
    tuple), computed in one native call whose basis sweep is a native loop. Forward mode
    (:func:`jacfwd`) when the differentiated inputs have fewer elements than the outputs, else
    reverse mode (:func:`jacrev`, as ``jax.jacobian``); compiled once per set of shapes.
    """
    return _jacobian_fn(f, argnums, "auto")


def jacfwd(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """:func:`jacobian` by forward mode: one JVP per input element, in a native loop."""
    return _jacobian_fn(f, argnums, "jacfwd")


def jacrev(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """:func:`jacobian` by reverse mode: one VJP per output element, in a native loop."""
    return _jacobian_fn(f, argnums, "jacrev")


def hessian(f: Callable, argnums: int = 0) -> Callable:
    """The Hessian of scalar ``f`` as a function: ``hessian(f)(*args)`` has shape ``x.shape +
    x.shape`` for ``x = args[argnums]`` — forward over reverse over the basis of ``x``, one
    native call. Compiled once per set of shapes. ``argnums`` is one argument."""
    if not isinstance(argnums, int):
        raise TypeError("hessian: argnums must be one argument (an int)")

    def hess(*args: Any) -> np.ndarray:
        if any(is_container(a) for a in args):
            r, g, vec, others = _raveled(f, args, argnums, "hessian")
            return r.blocks(g(vec, *others), rows="args")
        args = _arrays("arguments", args)
        return _compiled(f, "hessian", argnums, args)(*args)

    hess.__name__ = f"hessian_of_{getattr(f, '__name__', 'f')}"
    return hess


def hvp(f: Callable, primals: Any, v: Any, argnums: int = 0) -> np.ndarray:
    """The Hessian-vector product ``H v`` of scalar ``f`` at ``primals`` (a tuple of arguments,
    or one array) with respect to argument ``argnums``: forward over reverse in one native
    kernel, costing a small multiple of one gradient. ``v`` has that argument's shape.
    Compiled once per set of shapes (``compile(f, *primals, mode="hvp")``, called as
    ``h(*primals, v)``).

    Raises ``ValueError`` when ``v``'s shape differs from the argument's.
    """
    primals = tuple(primals) if isinstance(primals, (tuple, list)) else (primals,)
    if not isinstance(argnums, int):
        raise TypeError("hvp: argnums must be one argument (an int)")
    if any(is_container(p) for p in primals):
        r, g, vec, others = _raveled(f, primals, argnums, "hvp")
        return r.unravel_args(g(vec, *others, r.ravel_like_args(v, "hvp: v")))
    primals = _arrays("primals", primals)
    if not is_array_like(v) or np.shape(v) != np.shape(primals[argnums]):
        got = np.shape(v) if is_array_like(v) else type(v).__name__
        raise ValueError(
            f"hvp: v must have the shape of argument {argnums}, {np.shape(primals[argnums])}, "
            f"got {got}"
        )
    return _compiled(f, "hvp", argnums, primals)(*primals, v)


# -- compiled forward functions -------------------------------------------------------------------
class _Jit:
    """``f`` compiled as it is (no derivative), one specialisation per argument signature."""

    def __init__(self, f: Callable, options: dict):
        if not callable(f):
            raise TypeError(f"jit() needs a callable, got {type(f).__name__}")
        self.fn, self.options = f, options
        self.specialisations: dict[tuple, tuple[GradientFunction, list]] = {}
        self.__name__ = getattr(f, "__name__", "f")
        self.__doc__ = getattr(f, "__doc__", None)
        self.__wrapped__ = f

    def __call__(self, *args: Any) -> Any:
        from .frontend.tracing import Tracer

        if _any_tracer(args, Tracer):  # inside a traced function: jit is the identity there
            return self.fn(*args)
        if not args:
            raise TypeError(f"{self.__name__}: a jit-compiled function needs at least one argument")
        key = _signature_key(args)
        hit = self.specialisations.get(key)
        leaves, unflatten = _flat_args(args)
        if hit is None:
            out_tree: list = []
            flat = _flat_function(self.fn, unflatten, out_tree)
            g = compile(flat, *leaves, argnums=(), mode="value", **self.options)
            hit = self.specialisations[key] = (g, out_tree)
        g, out_tree = hit
        result = g(*leaves)
        flat_out = result if isinstance(result, tuple) else (result,)
        return _unflatten_output(out_tree[0], list(flat_out))

    def __repr__(self) -> str:
        return f"<tapejit.jit of {self.__name__}>"


def _any_tracer(tree: Any, cls: type) -> bool:
    if isinstance(tree, cls):
        return True
    if isinstance(tree, dict):
        return any(_any_tracer(v, cls) for v in tree.values())
    if isinstance(tree, (tuple, list)):
        return any(_any_tracer(v, cls) for v in tree)
    return False


def _flat_args(args: tuple) -> tuple[list, Callable]:
    """The leaves of ``args`` (arrays and numbers) and the function that rebuilds ``args``."""
    if not any(is_container(a) for a in args):
        return list(args), lambda leaves: tuple(leaves)
    ot = optree()
    leaves, treedef = ot.tree_flatten(tuple(args), none_is_leaf=True)
    return leaves, lambda xs: tuple(ot.tree_unflatten(treedef, list(xs)))


def _flat_function(f: Callable, unflatten: Callable, out_tree: list) -> Callable:
    """``f`` as a function of the flat argument leaves returning a tuple of output leaves; the
    structure of its output is left in ``out_tree[0]`` when it is traced."""
    from .frontend.loops import loop_capture

    def flat(*leaves):
        out = loop_capture.prepare(f)(*unflatten(leaves))  # the user's function (loops captured)
        out_leaves, tree = _flatten_output(out)
        out_tree[:] = [tree]
        return tuple(out_leaves)

    flat.__name__ = getattr(f, "__name__", "f")
    flat.__qualname__ = getattr(f, "__qualname__", flat.__name__)
    return flat


def _flatten_output(out: Any) -> tuple[list, Any]:
    """``(leaves, structure)`` of what a function returned: one leaf (structure ``None``), a
    flat tuple/list of leaves (its type and length), or a pytree (optree's treedef)."""
    if not isinstance(out, (tuple, list, dict)) and not is_container(out):
        return [out], None
    if type(out) in (tuple, list) and not any(isinstance(o, (tuple, list, dict)) for o in out):
        if not any(is_container(o) for o in out):
            return list(out), (type(out), len(out))
    ot = optree()
    leaves, treedef = ot.tree_flatten(out, none_is_leaf=False)
    return leaves, treedef


def _unflatten_output(tree: Any, leaves: list) -> Any:
    if tree is None:
        return leaves[0]
    if isinstance(tree, tuple):
        return tree[0](leaves)
    return optree().tree_unflatten(tree, leaves)


def jit(
    f: Callable,
    *,
    cache: CacheSpec = True,
    on_guard_failure: str = "recompile",
    max_specialisations: int = 8,
    on_max_steps: str = "warn",
) -> Callable:
    """``f`` compiled to native code as it is — its value, no derivative — as ``jax.jit``.

    ``jit(f)(*args)`` traces ``f`` at the first call with a given signature (argument shapes
    and pytree structure), compiles it through the same pipeline as a gradient (passes,
    fusion, LLVM; the on-disk cache) and calls the native code; later calls with that
    signature reuse it. Arguments are float64 arrays or real numbers (other real dtypes that
    convert exactly are converted), or pytrees of them (nested tuples, lists, dicts,
    namedtuples, dataclasses; ``pip install 'tapejit[pytrees]'``). ``f`` returns an array, a
    number, or a tuple/list/pytree of them; the call returns the same structure with float64
    arrays (a Python float for a scalar; bool results come back as 0.0/1.0). Every call is
    validated as a gradient's is: count, shape, dtype, C-contiguity.

    Python control flow on traced values is guarded, as for gradients: an input that takes
    another branch retraces and compiles another specialisation (``on_guard_failure``,
    ``max_specialisations``: as :func:`compile`); ``on_max_steps`` as :func:`compile`. A
    traced index that is out of range raises ``IndexError`` naming the line (see
    ``docs/loops.md``). ``cache``: the on-disk cache (:func:`object_cache`).

    Called on traced values (inside a function being compiled, differentiated or vmapped),
    ``jit(f)`` is ``f`` itself: ``tj.grad(tj.jit(f))`` is ``tj.grad(f)``.

    Raises :class:`tapejit.TracingError` at the first call when ``f`` cannot be traced, and
    ``TypeError``/``ValueError`` naming the argument for an invalid argument.
    """
    options = dict(
        cache=cache,
        on_guard_failure=on_guard_failure,
        max_specialisations=max_specialisations,
        on_max_steps=on_max_steps,
    )
    return _Jit(f, options)
