"""The SSA IR: types, hash-consed nodes, graphs, a printer and a verifier (the scheduled form
codegen lowers is :mod:`tapejit.core.program`).

This module is the contract between the front end (tracing, autodiff, passes) and ``codegen/``.
It knows no op rules: the shape/dtype rule of each op lives in :mod:`tapejit.core.ops`, which the
verifier consults through a hook so that the dependency stays one-way (``ir`` <- ``ops``).

Grammar of the printed form (what tests and the CLI show)::

    graph NAME(%i: TYPE [active|inactive|const], ...) -> (TYPE, ...)
      %k = OP %a, %b {attr=value, ...} : TYPE
      return %r, ...

    TYPE  := f64[d0,d1,...] | bool[...] | f64[]   (f64[] is a scalar)

A ``Node`` is immutable and interned: building the same ``(op, args, attrs, type)`` twice returns
the same object, so common-subexpression elimination happens at construction.
"""

from __future__ import annotations

import hashlib
import math
import struct
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

DTYPES = ("f64", "bool", "i64")
NUMPY_DTYPE = {"f64": "float64", "bool": "bool", "i64": "int64"}
ITEMSIZE = {"f64": 8, "bool": 1, "i64": 8}


#: Shapes already validated (a tuple of non-negative ints is valid whatever the dtype).
_CHECKED_SHAPES: set[tuple[int, ...]] = set()


@dataclass(frozen=True, slots=True)
class Type:
    """Static type of an SSA value: a shape (tuple of ints, ``()`` for a scalar) and a dtype."""

    shape: tuple[int, ...]
    dtype: str = "f64"

    def __post_init__(self):
        if self.shape in _CHECKED_SHAPES and self.dtype in DTYPES:
            return  # a shape seen before (types are built for every node: keep this cheap)
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {DTYPES}")
        if type(self.shape) is not tuple or not all(type(d) is int and d >= 0 for d in self.shape):
            raise ValueError(f"shape must be a tuple of non-negative ints, got {self.shape!r}")
        if len(_CHECKED_SHAPES) < 65536:
            _CHECKED_SHAPES.add(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * ITEMSIZE[self.dtype]

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


_PLAIN = (int, str, bool, type(None))


def _attr_key(value: Any) -> Any:
    """Hashable key of an attribute that tells -0.0 from 0.0 (CSE must not merge them)."""
    t = type(value)
    if t is tuple:
        for v in value:
            if type(v) not in _PLAIN:
                return tuple(_attr_key(v) for v in value)
        return value  # ints, strings, bools, None: the tuple is its own key (the common case)
    if t in _PLAIN:
        return value
    if t is float:
        return ("f", struct.pack("<d", value))
    if t is slice:
        return ("s", value.start, value.stop, value.step)
    if isinstance(value, float):  # numpy floats
        return ("f", struct.pack("<d", value))
    return value


class Node:
    """One SSA value: ``op`` applied to ``args`` (other nodes) with static ``attrs``.

    Nodes are immutable and interned (hash-consed); compare them with ``is``. ``attrs`` is a
    tuple of hashable values whose meaning is given by the op's row in :mod:`tapejit.core.ops`.

    Common-subexpression elimination happens here, at construction: building an equal
    ``(op, args, attrs, type)`` returns the existing node, and the operands of a commutative op
    (:data:`commutative`) are put in a canonical order first — by :func:`digest`, which is the
    same in every run and process — so ``a*b`` and ``b*a`` are one node and the printed graph
    (the on-disk cache key) does not depend on which order the user wrote.
    """

    #: ``_digest``, ``_checked`` and ``_sched`` cache facts derived from the node alone (so never
    #: stale): its :func:`digest`, whether :func:`verify` passed it, and its scheduling class
    #: (:func:`tapejit.passes.fusion.classify`). Slots, because a side table keyed by node
    #: costs a weak reference per node and a Python-level lookup per query.
    __slots__ = ("op", "args", "attrs", "type", "_digest", "_checked", "_sched", "__weakref__")

    op: str
    args: tuple["Node", ...]
    attrs: tuple
    type: Type

    def __new__(cls, op: str, args: Iterable["Node"], attrs: tuple, type: Type) -> "Node":
        if args.__class__ is not tuple:
            args = tuple(args)
        if op in commutative and len(args) == 2:
            x, y = args
            if x is not y and y._digest < x._digest:
                args = (y, x)
        # the Type's fields, not the Type: a dataclass hashes in Python, tuples and strs in C
        key = (op, _attr_key(attrs) if attrs else (), type.shape, type.dtype, *map(id, args))
        ref = _table.get(key)
        if ref is not None:
            node = ref()
            if node is not None and node.args == args:
                return node
        node = object.__new__(cls)
        text = f"{op}|{attrs!r}|{type_text(type)}|".encode()
        _set_op(node, op)  # slot descriptors: immutable to everyone else (see __setattr__)
        _set_args(node, args)
        _set_attrs(node, attrs)
        _set_type(node, type)
        _set_digest(
            node, _blake2b(b"".join([text, *[a._digest for a in args]]), digest_size=16).digest()
        )
        _set_checked(node, False)  # see verify()
        _set_sched(node, None)
        _table[key] = weakref.ref(node)
        if len(_table) > _sweep_at[0]:
            _sweep()
        return node

    def __setattr__(self, name, value):
        raise AttributeError("IR nodes are immutable")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.type.shape)

    def __repr__(self) -> str:
        return f"<Node {self.op} {self.type} attrs={self.attrs}>"


_set_op, _set_args, _set_attrs, _set_type = (
    Node.op.__set__, Node.args.__set__, Node.attrs.__set__, Node.type.__set__
)  # fmt: skip
_set_digest, _set_checked, _set_sched = (
    Node._digest.__set__, Node._checked.__set__, Node._sched.__set__
)  # fmt: skip
_blake2b = hashlib.blake2b

#: The interning table: key -> weak reference to the node. Plain weak references (no callback)
#: are the cheapest to make; dead entries are swept when the table has doubled since the last
#: sweep, so its size stays within twice the live nodes (amortised O(1) per node). A key holds
#: the ids of the arguments, which a live node keeps alive, so a live entry's key is never stale.
_table: dict[tuple, "weakref.ref[Node]"] = {}
_sweep_at = [1 << 16]

#: Set by :mod:`tapejit.core.ops`: the binary ops whose operands may be swapped.
commutative: frozenset[str] = frozenset()


def _sweep() -> None:
    """Drop the entries of dead nodes. Safe while other threads build nodes: it walks a snapshot
    (``dict.copy()`` allocates one object and calls no Python code, so no thread switch can
    happen inside it; ``list(dict.items())`` allocates a tuple per entry, which can start a
    garbage collection whose finalizers let another thread insert mid-walk) and removes an entry
    only if it still holds the dead reference (a race can at worst drop a live entry: a missed
    merge, never a wrong node)."""
    for key, ref in _table.copy().items():
        if ref() is None and _table.get(key) is ref:
            _table.pop(key, None)
    _sweep_at[0] = max(1 << 16, 2 * len(_table))


def digest(n: Node) -> bytes:
    """A digest of ``n``'s whole expression (op, attributes, type, operands' digests; inputs by
    position and name): equal for equal expressions, in every run and every process. A Merkle
    hash (blake2b, 16 bytes) computed when the node is built, from its operands' digests."""
    return n._digest


_type_texts: dict[tuple, str] = {}


def type_text(t: Type) -> str:
    """``str(t)``, remembered (few distinct types occur; formatting one costs a join; digests
    and kernel keys format one per node). Keyed by the fields: a Type's own hash and equality
    run in Python."""
    key = (t.shape, t.dtype)
    s = _type_texts.get(key)
    if s is None:
        s = _type_texts[key] = str(t)
        if len(_type_texts) > 65536:
            _type_texts.clear()
    return s


def toposort(outputs: Iterable[Node], stop: dict | set | None = None) -> list[Node]:
    """All nodes reachable from ``outputs``, each after its arguments (iterative DFS); the
    nodes whose ids are in ``stop`` are listed but not descended into."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in outputs:
        if id(root) in seen:
            continue
        stack = [(root, iter(() if stop and id(root) in stop else root.args))]
        seen.add(id(root))
        while stack:
            node, it = stack[-1]
            for arg in it:
                if id(arg) not in seen:
                    seen.add(id(arg))
                    stack.append((arg, iter(() if stop and id(arg) in stop else arg.args)))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def substitute(outputs: tuple[Node, ...], mapping: dict[int, Node]) -> tuple[Node, ...]:
    """``outputs`` rebuilt with every node whose id is in ``mapping`` replaced by its image
    (re-interned, so unchanged subgraphs stay the same nodes)."""
    memo: dict[int, Node] = dict(mapping)
    for n in toposort(outputs, mapping):  # nothing below a replaced node is needed
        if id(n) in memo:
            continue
        args = tuple(memo[id(a)] for a in n.args)
        same = all(a is b for a, b in zip(args, n.args))
        memo[id(n)] = n if same else Node(n.op, args, n.attrs, n.type)
    return tuple(memo[id(o)] for o in outputs)


INPUT_KINDS = ("active", "inactive", "const")


@dataclass(frozen=True)
class Graph:
    """A function in SSA form.

    ``inputs`` are nodes of op ``input`` (attrs ``(position, name)``); ``kinds[i]`` says whether
    input i is *active* (differentiated), *inactive* (a runtime argument that is not
    differentiated), or *const* (a numpy array captured by the traced function, snapshotted at
    compile time and held in ``bindings``). ``outputs`` are the returned nodes.
    """

    name: str
    inputs: tuple[Node, ...]
    kinds: tuple[str, ...]
    outputs: tuple[Node, ...]
    bindings: dict[int, Any] = field(default_factory=dict, compare=False)
    output_names: tuple[str, ...] = ()
    #: Guards recorded by tracing: ``(condition, expected, source)`` — a bool scalar node, the
    #: outcome the trace took, and the user's file:line. Generated code checks each one, and
    #: returns its number (1, 2, ... in this order) when it fails. An entry whose condition is
    #: a bool vector of shape ``(T,)`` stands for ``T`` consecutive guards of one source, one
    #: per element (a Python loop's guards re-rolled: :mod:`tapejit.passes.reroll.guards`),
    #: with one outcome or a tuple of ``T`` outcomes; :func:`flat_guards` numbers them.
    guards: tuple[tuple["Node", bool, str], ...] = ()
    #: (loops, iterations) of Python loops that tracing captured (``tapejit.frontend.loops.loop_capture``)
    captured: tuple[int, int] = field(default=(0, 0), compare=False)

    def __post_init__(self):
        if len(self.inputs) != len(self.kinds):
            raise ValueError("one kind per input")
        for k in self.kinds:
            if k not in INPUT_KINDS:
                raise ValueError(f"unknown input kind {k!r}")

    @property
    def nodes(self) -> list[Node]:
        """Every node the outputs and guards depend on, in topological order (a new list each
        time; the order is computed once per graph, which is immutable)."""
        order = self.__dict__.get("_order")
        if order is None:
            order = toposort(self.outputs + tuple(c for c, _, _ in self.guards))
            object.__setattr__(self, "_order", order)
        return list(order)

    def replace(self, **changes) -> "Graph":
        d = dict(
            name=self.name,
            inputs=self.inputs,
            kinds=self.kinds,
            outputs=self.outputs,
            bindings=self.bindings,
            output_names=self.output_names,
            guards=self.guards,
            captured=self.captured,
        )
        d.update(changes)
        g = Graph(**d)
        order = self.__dict__.get("_order")
        if order is not None and g.outputs == self.outputs and g.guards == self.guards:
            object.__setattr__(g, "_order", order)  # same outputs and guards: same nodes
        return g

    def users(self) -> dict[int, list[Node]]:
        """Map ``id(node)`` -> the nodes that use it as an argument (with repetition)."""
        users: dict[int, list[Node]] = {}
        for n in self.nodes:
            for a in n.args:
                users.setdefault(id(a), []).append(n)
        return users

    def __str__(self) -> str:
        return format_graph(self, bodies=True)


def _fmt_attr(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, slice):
        return f"{'' if v.start is None else v.start}:{'' if v.stop is None else v.stop}" + (
            "" if v.step in (None, 1) else f":{v.step}"
        )
    if isinstance(v, tuple):
        return "(" + ",".join(_fmt_attr(x) for x in v) + ")"
    return str(v)


def format_graph(g: Graph, names: dict[int, str] | None = None, bodies: bool = False) -> str:
    """The text form of ``g`` (see the module docstring for the grammar).

    ``bodies=True`` (what ``str(graph)``, ``grad.ir(stage)`` and ``tapejit dump`` print) also
    prints the sub-graphs of every ``loop`` node indented under it, recursively — its body, and
    its condition for a ``while_loop``::

      %1 = loop %x, %x, %0 {loop(...)} : f64[83]
        body:
          graph body(%l1i: f64[] inactive, ...) -> (f64[5], ...)
            %0 = mul %h1h0, %l1c0 : f64[5]
            return %0, ...

    (a body numbers its values from ``%0`` again: it is a graph of its own). Digests and keys
    (:class:`tapejit.core.ops.LoopSpec`) use the default ``bodies=False``, where a loop shows only
    its attribute, which names its body by digest.
    """
    names = {} if names is None else names
    for i, n in enumerate(g.inputs):
        names[id(n)] = f"%{n.attrs[1]}" if len(n.attrs) > 1 else f"%in{i}"
    head = ", ".join(f"{names[id(n)]}: {n.type} {k}" for n, k in zip(g.inputs, g.kinds))
    outs = ", ".join(str(o.type) for o in g.outputs)
    lines = [f"graph {g.name}({head}) -> ({outs})"]
    k = 0
    for n in g.nodes:
        if n.op == "input":
            continue
        names[id(n)] = f"%{k}"
        k += 1
        args = ", ".join(names[id(a)] for a in n.args)
        attrs = ""
        if n.attrs:
            attrs = " {" + ", ".join(_fmt_attr(a) for a in n.attrs) + "}"
        sep = " " if args else ""
        lines.append(f"  {names[id(n)]} = {n.op}{sep}{args}{attrs} : {n.type}")
        if bodies and n.attrs:
            lines.extend(_loop_subgraph_lines(n))
    k = 1
    for c, expected, where in g.guards:
        size = guard_size(c)
        label = f"guard {k}" if c.shape == () else f"guards {k}-{k + size - 1}"
        lines.append(f"  {label}: {names[id(c)]} == {outcomes_text(expected)}   # {where}")
        k += size
    ret = ", ".join(names[id(o)] for o in g.outputs)
    lines.append(f"  return {ret}")
    return "\n".join(lines)


def _loop_subgraph_lines(n: Node) -> list[str]:
    """The sub-graphs of node ``n`` — a ``loop``, whose attribute (``tapejit.core.ops.LoopSpec``)
    holds its ``body`` and ``cond`` graphs — printed with their own loops' sub-graphs and
    indented under the node; none for any other node."""
    spec = n.attrs[0]
    lines: list[str] = []
    subs = (("body", getattr(spec, "body", None)), ("condition", getattr(spec, "cond", None)))
    for label, sub in subs:
        if isinstance(sub, Graph):
            lines.append(f"    {label}:")
            # a fresh name table: a node may occur in both graphs (interned constants)
            text = format_graph(sub, {}, bodies=True)
            lines.extend("      " + line for line in text.split("\n"))
    return lines


def depends(n: Node, decide: Callable[[Node], bool | None], memo: dict[int, tuple]) -> bool:
    """Whether ``n`` depends on a node for which ``decide`` says ``True``: ``decide(m)`` is
    ``True`` or ``False`` for a node whose answer it knows (an input, a constant, a node of a
    set) and ``None`` for one answered by its operands (any of them). Iterative; ``memo``
    (``id -> (node, answer)``, the node kept alive so its id stays its own) may be shared
    between calls with one ``decide``."""
    todo = [n]
    while todo:
        m = todo[-1]
        if id(m) in memo:
            todo.pop()
            continue
        known = decide(m)
        if known is None:
            pending = [a for a in m.args if id(a) not in memo]
            if pending:
                todo.extend(pending)
                continue
            known = any(memo[id(a)][1] for a in m.args)
        memo[id(m)] = (m, known)
        todo.pop()
    return memo[id(n)][1]


def guard_size(c: Node) -> int:
    """How many guards a ``Graph.guards`` entry with condition ``c`` stands for: 1 for a bool
    scalar, ``T`` for a bool vector of shape ``(T,)`` (one guard per element)."""
    return c.shape[0] if c.shape else 1


def outcomes_text(expected) -> str:
    """A guard entry's outcome as printed: ``True``, ``False``, or for an outcome per element
    ``[T True, F False]`` with their counts."""
    if not isinstance(expected, tuple):
        return str(expected)
    yes = sum(expected)
    return f"[{yes} True, {len(expected) - yes} False]"


def flat_guards(guards: Sequence[tuple]) -> tuple[tuple, ...]:
    """``guards`` (``Graph.guards``) with one ``(condition, expected, source)`` per guard
    *number*: entry ``k - 1`` is the guard whose failure returns status ``k``. A vector entry
    is repeated once per element (its condition is the whole vector), each with its own
    outcome when the entry has one per element."""
    out: list[tuple] = []
    for c, expected, where in guards:
        if isinstance(expected, tuple):  # an outcome per element
            out.extend((c, e, where) for e in expected)
        else:
            out.extend([(c, expected, where)] * guard_size(c))
    return tuple(out)


class VerifyError(Exception):
    """The IR breaks an invariant (a bug in tapejit, never a user error)."""


def mark_verified(n: Node) -> None:
    """Record that ``n``'s type was computed by its op's rule (the builders in
    :mod:`tapejit.core.ops` do this), so :func:`verify` skips the per-node check for it. Nodes are
    immutable, so a node that was well formed stays so: verifying after every pass costs
    O(new nodes)."""
    _set_checked(n, True)


#: Set by :mod:`tapejit.core.ops`: ``(op, arg types, attrs) -> Type``; raises on a bad node.
type_rule: Callable[[str, tuple[Type, ...], tuple], Type] | None = None


def verify(g: Graph) -> Graph:
    """Check that ``g`` is well formed: known ops, types agree with the op table, inputs declared.

    Returns ``g``; raises :class:`VerifyError` naming the first bad node.
    """
    declared = {id(n) for n in g.inputs}
    if len(declared) != len(g.inputs):
        raise VerifyError("an input is declared twice")
    for n in g.nodes:
        if n.op == "input":
            if id(n) not in declared:
                raise VerifyError(f"input {n.attrs} is used but not declared in {g.name}")
            continue
        if n._checked:
            continue  # immutable and checked before: still well formed
        if n.op == "const":
            if n.args or len(n.attrs) != 1:
                raise VerifyError(f"const node {n!r} must have no args and one value")
            continue
        if type_rule is not None:
            try:
                t = type_rule(n.op, tuple(a.type for a in n.args), n.attrs)
            except Exception as e:  # noqa: BLE001 - re-raised with context
                raise VerifyError(f"bad node {n!r}: {e}") from e
            if t != n.type:
                raise VerifyError(f"node {n!r} has type {n.type}, its op rule gives {t}")
        mark_verified(n)
    for c, expected, _ in g.guards:
        outcomes = (
            isinstance(expected, bool)
            or c.ndim == 1
            and isinstance(expected, tuple)
            and len(expected) == c.shape[0]
            and all(isinstance(e, bool) for e in expected)
        )
        if c.dtype != "bool" or c.ndim > 1 or c.type.size == 0 or not outcomes:
            raise VerifyError(
                f"guard condition {c!r} must be a bool scalar or non-empty vector with a bool "
                "outcome (a vector: or one per element)"
            )
    for i, k in enumerate(g.kinds):
        if k == "const" and i not in g.bindings:
            raise VerifyError(f"const input {i} of {g.name} has no binding")
    return g
