"""Pytrees at the runtime boundary: arguments, gradients, ``out=`` and ``aux`` as nested
containers, flattened with `optree <https://github.com/metaopt/optree>`_ (the pytree library
PyTorch uses: C++ speed, tuples/lists/dicts/namedtuples/dataclasses and registered types, and
paths for error messages — ``pip install 'tapejit[pytrees]'``).

The IR sees flat arrays only: :class:`TreeGradient` traces ``f`` through a flat function of the
leaves (:func:`flat_function`), compiles that with :func:`tapejit.compile`, and wraps the calls
— flatten the arguments, check their structure, call the flat gradient, rebuild the results in
the arguments' structure. ``has_aux=True`` (``f`` returns ``(value, aux)``, ``aux`` any pytree of
arrays computed in ``f``) is handled here too: ``aux`` comes back from the same native call.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

import numpy as np

from ..frontend.loops import loop_capture
from ..frontend.tracing import masked_array_error

from .function import GradientFunction


#: The optree namespace tapejit registers plain dataclasses in (see :class:`_Trees`).
NAMESPACE = "tapejit"


class _Trees:
    """optree's functions, with standard-library dataclasses as pytree nodes: optree flattens
    only the dataclasses made with ``optree.dataclasses``, so a plain ``@dataclasses.dataclass``
    instance met in a tree is registered (in :data:`NAMESPACE`, its ``init`` fields as children,
    rebuilt with the constructor) before the tree is flattened."""

    def __init__(self, ot):
        self._ot = ot
        self._registered: set[type] = set()

    def __getattr__(self, name: str):
        return getattr(self._ot, name)

    def _register(self, tree: Any, depth: int = 0) -> None:
        if depth > 100:
            return
        if isinstance(tree, (tuple, list)):
            for x in tree:
                self._register(x, depth + 1)
        elif isinstance(tree, dict):
            for x in tree.values():
                self._register(x, depth + 1)
        elif dataclasses.is_dataclass(tree) and not isinstance(tree, type):
            cls = type(tree)
            names = tuple(f.name for f in dataclasses.fields(tree) if f.init)
            if cls not in self._registered:
                self._registered.add(cls)
                try:
                    self._ot.register_pytree_node(
                        cls,
                        functools.partial(_flatten_dataclass, names=names),
                        functools.partial(_unflatten_dataclass, cls),
                        path_entry_type=self._ot.GetAttrEntry,
                        namespace=NAMESPACE,
                    )
                except ValueError:  # registered already (optree.dataclasses, or by the user)
                    pass
            for n in names:
                self._register(getattr(tree, n), depth + 1)

    def _flatten(self, how: Callable, tree: Any, *args: Any, **kw: Any) -> tuple:
        """``how(tree)`` in :data:`NAMESPACE`; a dataclass not registered yet comes out as a
        leaf: register the tree's dataclasses then and flatten again (the walk runs only then,
        not on every call)."""
        out = how(tree, *args, namespace=NAMESPACE, **kw)
        leaves = out[-2]
        if any(dataclasses.is_dataclass(x) and not isinstance(x, type) for x in leaves):
            self._register(tree)
            out = how(tree, *args, namespace=NAMESPACE, **kw)
        return out

    def tree_flatten(self, tree: Any, *args: Any, **kw: Any):
        return self._flatten(self._ot.tree_flatten, tree, *args, **kw)

    def tree_flatten_with_path(self, tree: Any, *args: Any, **kw: Any):
        return self._flatten(self._ot.tree_flatten_with_path, tree, *args, **kw)


def _static(value: Any) -> bool:
    """A dataclass field that is metadata, not data: a string, ``None``, a bool, a function or a
    class (part of the structure: another value is another specialisation)."""
    return isinstance(value, (str, bytes, bool, type(None), type)) or (
        callable(value) and not isinstance(value, np.ndarray)
    )


def _flatten_dataclass(obj: Any, names: tuple[str, ...]) -> tuple:
    """``(children, metadata, child names)``: the fields that hold data are children, the
    others (:func:`_static`) travel in the tree's structure."""
    data = tuple(n for n in names if not _static(getattr(obj, n)))
    meta = tuple((n, getattr(obj, n)) for n in names if n not in data)
    return tuple(getattr(obj, n) for n in data), (data, meta), data


def _unflatten_dataclass(cls: type, metadata: tuple, children: Any) -> Any:
    data, meta = metadata
    return cls(**dict(zip(data, children)), **dict(meta))


_trees: _Trees | None = None


def optree() -> _Trees:
    """optree (see :class:`_Trees`); ``ImportError`` naming the extra when it is not installed."""
    global _trees
    try:
        import optree as ot
    except ImportError as e:
        raise ImportError(
            "pytree arguments and has_aux need optree: pip install 'tapejit[pytrees]'"
        ) from e
    if _trees is None or _trees._ot is not ot:
        _trees = _Trees(ot)
    return _trees


def is_array_like(a: Any) -> bool:
    """A leaf the compiled code takes directly (no flattening needed)."""
    return isinstance(a, (np.ndarray, float, int, np.floating, np.integer)) and not isinstance(
        a, (bool, np.bool_)
    )


def is_container(a: Any) -> bool:
    """An argument that is a pytree rather than a leaf: a tuple, dict, namedtuple or dataclass
    instance, or a list that holds an array or another container (``[W1, W2]``, as JAX and
    autograd take it). A top-level list of plain numbers is not (numpy users mean an array by
    ``[1.0, 2.0]``: it is rejected with the advice to pass one); lists inside a pytree are nodes
    as usual. Anything else goes to the compiled code as it is, and is validated there."""
    if isinstance(a, list):
        return any(isinstance(x, np.ndarray) or is_container(x) or isinstance(x, list) for x in a)
    return isinstance(a, (tuple, dict)) or (dataclasses.is_dataclass(a) and not isinstance(a, type))


def _path(prefix: str, path: tuple) -> str:
    return prefix + "".join(f"[{k!r}]" for k in path)


class _Structure:
    """The leaves of the arguments: their paths, shapes and which argument owns each."""

    def __init__(self, args: Sequence[Any], names: Sequence[str]):
        ot = optree()
        self.treedefs, self.paths, self.shapes, self.owner, self.leaves = [], [], [], [], []
        for i, (a, name) in enumerate(zip(args, names)):
            paths, leaves, treedef = ot.tree_flatten_with_path(a, none_is_leaf=True)
            self.treedefs.append(treedef)
            for p, leaf in zip(paths, leaves):
                where = _path(name, p)
                if isinstance(leaf, np.ma.MaskedArray):
                    raise masked_array_error(where)
                if not is_array_like(leaf):
                    raise TypeError(
                        f"{where} must be a float64 array or a number, got {type(leaf).__name__}"
                    )
                self.paths.append(where)
                self.shapes.append(np.shape(leaf))
                self.owner.append(i)
                self.leaves.append(leaf)

    def flatten(self, args: Sequence[Any], what: str = "argument") -> list:
        """The leaves of ``args``, checked against the compiled structure (``ValueError`` /
        ``TypeError`` naming the path)."""
        ot = optree()
        if len(args) != len(self.treedefs):
            raise TypeError(
                f"the compiled function takes {len(self.treedefs)} {what}(s), got {len(args)}"
            )
        out = []
        k = 0
        for a, treedef in zip(args, self.treedefs):
            leaves, got = ot.tree_flatten(a, none_is_leaf=True)
            if got != treedef:
                raise ValueError(
                    f"{self.paths[k] if k < len(self.paths) else what} and its siblings: the "
                    f"structure {got} differs from the compiled {treedef}"
                )
            for leaf in leaves:
                if not is_array_like(leaf):
                    raise TypeError(
                        f"{self.paths[k]} must be a float64 array or a number, "
                        f"got {type(leaf).__name__}"
                    )
                if np.shape(leaf) != self.shapes[k]:
                    raise ValueError(
                        f"{self.paths[k]} must have shape {self.shapes[k]}, got {np.shape(leaf)}"
                    )
                out.append(leaf)
                k += 1
        return out

    def unflatten(self, i: int, leaves: Sequence[Any]) -> Any:
        return optree().tree_unflatten(self.treedefs[i], list(leaves))

    def positions(self, i: int) -> list[int]:
        return [k for k, o in enumerate(self.owner) if o == i]


def flat_function(f: Callable, st: _Structure, has_aux: bool, aux_def: list) -> Callable:
    """``f`` as a function of the flat leaves; with ``has_aux`` it returns ``(value,
    *aux leaves)`` and records aux's structure in ``aux_def``."""
    ot = optree()

    def flat(*leaves):
        args, k = [], 0
        for i in range(len(st.treedefs)):
            n = len(st.positions(i))
            args.append(st.unflatten(i, leaves[k : k + n]))
            k += n
        out = loop_capture.prepare(f)(*args)  # the user's function: its loops may be captured
        if not has_aux:
            return out
        if not isinstance(out, tuple) or len(out) != 2:
            from ..frontend.tracing import TracingError

            raise TracingError(
                f"{getattr(f, '__name__', 'f')} was compiled with has_aux=True, so it must return "
                f"(value, aux), got {type(out).__name__}"
                + (f" of length {len(out)}" if isinstance(out, tuple) else "")
            )
        value, aux = out
        leaves_aux, treedef = ot.tree_flatten(aux, none_is_leaf=False)
        aux_def[:] = [treedef]
        return (value, *leaves_aux)

    flat.__name__ = getattr(f, "__name__", "f")
    flat.__qualname__ = getattr(f, "__qualname__", flat.__name__)
    return flat


class TreeGradient:
    """The gradient of ``f`` whose arguments (or ``aux``) are pytrees: calls return gradients in
    the structure of the differentiated arguments (a tuple of them for a tuple ``argnums``),
    ``out=`` takes that structure, and with ``has_aux`` a call returns ``(gradient, aux)`` and
    :meth:`value_and_grad` returns ``((value, aux), gradient)``, as in JAX. Wrong structures,
    shapes or leaf types raise ``ValueError``/``TypeError`` naming the path (``params['W1']``).
    """

    def __init__(
        self,
        f: Callable,
        example_args: Sequence[Any],
        argnums: int | Sequence[int] = 0,
        has_aux: bool = False,
        names: Sequence[str] | None = None,
        **options: Any,
    ):
        import inspect

        if names is None:
            try:
                params = list(inspect.signature(f).parameters)
            except (TypeError, ValueError):
                params = []
            names = [params[i] if i < len(params) else f"args[{i}]" for i in range(len(example_args))]
        self.fn, self.has_aux, self._argnums = f, has_aux, argnums
        self._st = st = _Structure(example_args, names)
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        for a in nums:
            if not isinstance(a, int) or not -len(example_args) <= a < len(example_args):
                raise ValueError(
                    f"argnums entry {a!r} is not a valid index for {len(example_args)} arguments"
                )
        self._nums = tuple(a % len(example_args) for a in nums)
        flat_nums = tuple(k for i in self._nums for k in st.positions(i))
        if not flat_nums:
            raise ValueError(f"argnums {argnums!r} selects arguments without array leaves")
        self._aux_def: list = []
        mode = "grad_aux" if has_aux else "grad"
        self._flat = GradientFunction(
            flat_function(f, st, has_aux, self._aux_def),
            st.leaves,
            flat_nums,
            mode=mode,
            **options,
        )
        self._n_grads = len(flat_nums)
        self._grad_def = optree().tree_structure(
            self._grads([0.0] * self._n_grads), none_is_leaf=True
        )

    def _leaves(self, args: Sequence[Any]) -> list:
        return self._st.flatten(args)

    def _grads(self, flat: Sequence[Any]) -> Any:
        out, k = [], 0
        for i in self._nums:
            n = len(self._st.positions(i))
            out.append(self._st.unflatten(i, flat[k : k + n]))
            k += n
        return out[0] if isinstance(self._argnums, int) else tuple(out)

    def _out(self, out: Any) -> tuple | None:
        if out is None:
            return None
        leaves, got = optree().tree_flatten(out, none_is_leaf=True)
        if got != self._grad_def:
            raise ValueError(f"out: the structure {got} differs from the gradient's {self._grad_def}")
        return tuple(leaves)

    def _split(self, result: Any) -> tuple[float, Any, Any]:
        """``(value, gradient, aux)`` of a flat call's result."""
        if self.has_aux:
            value, *rest = result
            grads, aux_leaves = rest[: self._n_grads], rest[self._n_grads :]
            aux = optree().tree_unflatten(self._aux_def[0], list(aux_leaves))
            return value, self._grads(grads), aux
        value, grads = result
        return value, self._grads(grads), None

    def __call__(self, *args: Any, out: Any = None) -> Any:
        """The gradient at ``args`` (``(gradient, aux)`` with ``has_aux``)."""
        value, grads, aux = self.value_and_grad_flat(args, out)
        return (grads, aux) if self.has_aux else grads

    def value_and_grad(self, *args: Any, out: Any = None) -> Any:
        """``(value, gradient)``; ``((value, aux), gradient)`` with ``has_aux``."""
        value, grads, aux = self.value_and_grad_flat(args, out)
        return ((value, aux), grads) if self.has_aux else (value, grads)

    def value_and_grad_flat(self, args: Sequence[Any], out: Any) -> tuple:
        leaves = self._leaves(args)
        outs = self._out(out)
        if self.has_aux:
            res = self._flat(*leaves)  # a program: (value, *grads, *aux)
            res = res if isinstance(res, tuple) else (res,)
            if outs is not None:
                for o, g in zip(outs, res[1 : 1 + self._n_grads]):
                    o[...] = g
                res = (res[0], *outs, *res[1 + self._n_grads :])
            return self._split(res)
        value, grads = self._flat.value_and_grad(*leaves, out=outs)
        return value, self._grads(grads if isinstance(grads, tuple) else (grads,)), None

    @property
    def stats(self) -> dict:
        return self._flat.stats

    def ir(self, stage: str = "grad") -> str:
        return self._flat.ir(stage)

    def __repr__(self) -> str:
        return f"<TreeGradient of {getattr(self.fn, '__name__', 'f')} wrt argnums={self._argnums!r}>"


class Raveled:
    """A function of pytrees as a function of one flat vector: the leaves of the arguments
    ``argnums`` concatenated (``vec``), the other arguments' leaves after it, and the output's
    leaves concatenated into one vector. How the transformations (:func:`tapejit.jvp`,
    :func:`tapejit.vjp`, :func:`tapejit.jacobian`, :func:`tapejit.hessian`, :func:`tapejit.hvp`)
    take pytrees: the compiled program sees arrays only, and :meth:`blocks` / :meth:`unravel`
    rebuild the results in the arguments' and the output's structures (JAX's nesting: output
    structure outside, argument structure inside)."""

    def __init__(self, f: Callable, args: Sequence[Any], argnums: int | Sequence[int]):
        import inspect

        try:
            params = list(inspect.signature(f).parameters)
        except (TypeError, ValueError):
            params = []
        names = [params[i] if i < len(params) else f"args[{i}]" for i in range(len(args))]
        self.f, self.st = f, _Structure(args, names)
        self.single = isinstance(argnums, int)
        nums = (argnums,) if self.single else tuple(argnums)
        self.nums = tuple(a % len(args) for a in nums)
        self.inside = [k for i in self.nums for k in self.st.positions(i)]
        self.outside = [k for k in range(len(self.st.leaves)) if k not in self.inside]
        self.sizes = [int(np.prod(self.st.shapes[k], dtype=np.int64)) for k in self.inside]
        self.out_def: Any = None
        self.out_shapes: list[tuple[int, ...]] = []
        self.__name__ = getattr(f, "__name__", "f")

    def vector(self, args: Sequence[Any]) -> tuple[np.ndarray, list]:
        """``(vec, other leaves)`` of ``args`` (checked against the compiled structure)."""
        leaves = self.st.flatten(args)
        vec = np.concatenate(
            [np.reshape(np.asarray(leaves[k], dtype=np.float64), -1) for k in self.inside]
        ) if self.inside else np.zeros(0)
        return vec, [leaves[k] for k in self.outside]

    def __call__(self, vec: Any, *others: Any) -> Any:
        """The flat function (traced): unravel, call ``f``, ravel the output."""
        ot = optree()
        leaves: list = [None] * len(self.st.leaves)
        off = 0
        for k, n in zip(self.inside, self.sizes):
            leaves[k] = vec[off : off + n].reshape(self.st.shapes[k])
            off += n
        for k, leaf in zip(self.outside, others):
            leaves[k] = leaf
        args, pos = [], 0
        for i in range(len(self.st.treedefs)):
            n = len(self.st.positions(i))
            args.append(self.st.unflatten(i, leaves[pos : pos + n]))
            pos += n
        out = loop_capture.prepare(self.f)(*args)  # the user's function (loops captured)
        out_leaves, self.out_def = ot.tree_flatten(out, none_is_leaf=False)
        self.out_shapes = [tuple(np.shape(y)) for y in out_leaves]
        if self.out_shapes == [()]:  # a scalar (a loss): kept scalar for grad/hvp/hessian
            return out_leaves[0]
        return np.concatenate([np.reshape(y, -1) for y in out_leaves])

    def _split(self, vec: np.ndarray, shapes: Sequence[tuple]) -> list:
        vec = np.reshape(vec, -1)
        out, off = [], 0
        for s in shapes:
            n = int(np.prod(s, dtype=np.int64))
            piece = vec[off : off + n].reshape(s)
            out.append(float(piece) if s == () else piece)
            off += n
        return out

    def unravel_output(self, vec: np.ndarray) -> Any:
        return optree().tree_unflatten(self.out_def, self._split(vec, self.out_shapes))

    def unravel_args(self, vec: np.ndarray) -> Any:
        """A vector over the ``argnums`` leaves as their trees (one tree, or a tuple)."""
        pieces = self._split(vec, [self.st.shapes[k] for k in self.inside])
        trees, off = [], 0
        for i in self.nums:
            n = len(self.st.positions(i))
            trees.append(self.st.unflatten(i, pieces[off : off + n]))
            off += n
        return trees[0] if self.single else tuple(trees)

    def ravel_like_output(self, tree: Any, what: str) -> np.ndarray:
        leaves, got = optree().tree_flatten(tree, none_is_leaf=False)
        if got != self.out_def:
            raise ValueError(f"{what}: the structure {got} differs from the output's {self.out_def}")
        for k, (leaf, s) in enumerate(zip(leaves, self.out_shapes)):
            if not is_array_like(leaf) or np.shape(leaf) != s:
                got_s = np.shape(leaf) if is_array_like(leaf) else type(leaf).__name__
                raise ValueError(f"{what}: leaf {k} must have shape {s}, got {got_s}")
        flat = np.concatenate([np.reshape(np.asarray(x, dtype=np.float64), -1) for x in leaves])
        return flat.reshape(()) if self.out_shapes == [()] else flat  # a scalar stays one

    def output_zeros(self) -> np.ndarray:
        """A zero cotangent for the output, as the flat program takes it (a scalar output is
        kept scalar: see ``__call__``)."""
        if self.out_shapes == [()]:
            return np.zeros(())
        return np.zeros(sum(int(np.prod(s, dtype=np.int64)) for s in self.out_shapes))

    def ravel_like_args(self, tree: Any, what: str) -> np.ndarray:
        trees = (tree,) if self.single else tuple(tree)
        return self.vector_of(trees, what)

    def vector_of(self, trees: Sequence[Any], what: str) -> np.ndarray:
        ot = optree()
        out = []
        for i, t in zip(self.nums, trees):
            leaves, got = ot.tree_flatten(t, none_is_leaf=True)
            if got != self.st.treedefs[i]:
                raise ValueError(
                    f"{what}: the structure {got} differs from argument {i}'s {self.st.treedefs[i]}"
                )
            for leaf, k in zip(leaves, self.st.positions(i)):
                if not is_array_like(leaf) or np.shape(leaf) != self.st.shapes[k]:
                    got_s = np.shape(leaf) if is_array_like(leaf) else type(leaf).__name__
                    raise ValueError(
                        f"{what}: {self.st.paths[k]} must have shape {self.st.shapes[k]}, got {got_s}"
                    )
                out.append(np.reshape(np.asarray(leaf, dtype=np.float64), -1))
        return np.concatenate(out) if out else np.zeros(0)

    def blocks(self, J: np.ndarray, rows: str = "output") -> Any:
        """Split a matrix over (output or argument leaves) x (argument leaves) into JAX's
        nesting: ``rows`` structure outside, the arguments' structure inside."""
        ot = optree()
        in_shapes = [self.st.shapes[k] for k in self.inside]
        if rows == "output":
            row_shapes, row_def = self.out_shapes, self.out_def
        else:
            row_shapes, row_def = in_shapes, None
        result_rows, r0 = [], 0
        for rs in row_shapes:
            m = int(np.prod(rs, dtype=np.int64))
            cols, c0 = [], 0
            for cs in in_shapes:
                n = int(np.prod(cs, dtype=np.int64))
                cols.append(J[r0 : r0 + m, c0 : c0 + n].reshape(tuple(rs) + tuple(cs)))
                c0 += n
            result_rows.append(self._group_args(cols))
            r0 += m
        if row_def is not None:
            return ot.tree_unflatten(row_def, result_rows)
        return self._group_args(result_rows)

    def _group_args(self, per_leaf: list) -> Any:
        trees, off = [], 0
        for i in self.nums:
            n = len(self.st.positions(i))
            trees.append(self.st.unflatten(i, per_leaf[off : off + n]))
            off += n
        return trees[0] if self.single else tuple(trees)
