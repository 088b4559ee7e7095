"""Pickling compiled gradients: ``pickle``, ``copy.deepcopy``, multiprocessing, Dask.

A :class:`~tapejit.runtime.function.GradientFunction` pickles to what it needs to run without
recompiling: for every compiled specialisation its object code, calling convention, captured
constants (numpy arrays: out-of-band buffers under protocol 5 with a ``buffer_callback``),
guards and printed stages; the compile options; the *host key* — tapejit's version and a digest
of its sources, llvmlite's and LLVM's versions, the target triple, CPU name and feature string;
and, optionally, what a retrace needs: ``f`` and the example arguments, as bytes (plain pickle,
or ``cloudpickle`` by value — always for an ``f`` defined in ``__main__``, which another
interpreter cannot import) or the reason they could not be pickled.

The pickle is ``restore(FORMAT, digest, state, constants)``: ``state`` is the pickled plain
data above, ``constants`` the arrays, and ``digest`` a SHA-256 over every byte of both (the
constants' dtypes and shapes included). Unpickling checks, before any native code runs:

1. the digest — a flipped bit or a truncation anywhere in the state or a constant;
2. that the state is consistent in itself — each constant's dtype, shape and byte length as the
   variant declares them, the signature's argument and result shapes against the kernel's, the
   hidden lengths of dynamic arguments, counts, the guards — and, once the object code is linked
   (linking runs none of it), that the calling convention embedded in the machine code
   (:func:`tapejit.pipeline.abi`) is the one the state describes, so that even a state edited
   with its digest recomputed is never read or written past an end.

Any failure raises :class:`GradientUnpicklingError` (a ``pickle.UnpicklingError``) saying what
is wrong. Damage to the few bytes of the pickle stream's own framing (the opcodes around these
four arguments) is reported by ``pickle`` itself, before tapejit code runs.

In a process with the same host key the object code is linked (no LLVM work: ~1-2 ms per
specialisation). With another host key the code is never run: ``f`` is recompiled at the example
arguments, or, when ``f`` is not available, :class:`GradientUnpicklingError` names the
difference. ``f`` is needed only to compile a new specialisation: an unpickled gradient whose
``f`` could not be pickled or loaded runs its compiled variants, and a call that needs a new
one (a guard failure, a longer dynamic argument) raises :class:`~tapejit.GuardError` saying why
it cannot recompile.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import pickle
import struct
import zlib
from typing import Any

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from .. import pipeline
from ..codegen import target
from ..codegen.jit import CodeLibrary
from ..progress import log
from .dispatch import Dispatcher, GuardError
from .function import GradientFunction, register_pickling
from .options import Options
from .signature import Signature
from .variant import Variant

FORMAT = "tapejit-gradient-2"

#: Gradients restored in this process (how tests see that Dask ships one per worker).
restored = 0


class GradientUnpicklingError(pickle.UnpicklingError):
    """A pickled gradient cannot be restored here: a damaged, inconsistent or foreign payload,
    or code compiled for another host whose ``f`` is not available (the message says which)."""


def host_key() -> dict[str, str]:
    """What must match for pickled machine code to run in this process."""
    triple, cpu, features = target.host()
    return {
        "tapejit": pipeline.VERSION,
        "compiler": pipeline.compiler_digest(),
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
        "triple": triple,
        "cpu": cpu,
        "features": features,
    }


def _pack(obj: Any, by_value: bool = False) -> tuple[str, Any]:
    """``obj`` as bytes: ``("pickle", data)`` or ``("cloudpickle", data)`` (tried first when
    ``by_value``), else ``("missing", why)``. Loaded only when needed (:func:`_unpack`)."""
    reasons = []
    try:
        import cloudpickle
    except ImportError:
        cloudpickle = None
        reasons.append("install cloudpickle to pickle it by value")
    ways = [("pickle", pickle.dumps)]
    if cloudpickle is not None:
        ways.insert(0 if by_value else 1, ("cloudpickle", cloudpickle.dumps))
    for kind, dumps in ways:
        try:
            return kind, dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - any failure means: not picklable this way
            reasons.insert(0, f"{kind}: {type(e).__name__}: {e}")
    return "missing", "; ".join(reasons)


def _unpack(packed: Any, what: str) -> tuple[Any, str | None]:
    """``(object or None, why it is missing)`` of :func:`_pack`'s result."""
    kind, data = packed
    if kind == "missing":
        return None, f"{what} could not be pickled ({data})"
    try:
        return pickle.loads(data), None
    except Exception as e:  # noqa: BLE001 - e.g. f defined in another process's __main__
        why = f"{type(e).__name__}: {e}"
        return None, f"{what} was pickled ({kind}) but cannot be loaded here ({why})"


def _in_main(f: Any) -> bool:
    return getattr(f, "__module__", None) in ("__main__", "__mp_main__")


def _variant_state(v: Variant, consts: list[np.ndarray]) -> dict[str, Any]:
    """Plain data of ``v``; its constants are appended to ``consts`` (referred to by index)."""
    b = v._built
    sig = v.signature
    first = len(consts)
    consts.extend(np.ascontiguousarray(c) for c in b.consts)
    return {
        "symbol": b.symbol,
        "n_inputs": b.n_inputs,
        "n_outputs": b.n_outputs,
        "shapes": b.shapes,
        "out_shapes": b.out_shapes,
        "consts": [(first + k, c.dtype.str, c.shape) for k, c in enumerate(b.consts)],
        "stats": v.stats,
        "object": v._lib.object_code(),
        "llvm": b.llvm if isinstance(b.llvm, bytes) else zlib.compress(b.llvm.encode(), 1),
        "llvm_opt": zlib.compress(v._lib.llvm_ir.encode(), 1),
        "guards": [(None, bool(e), str(w)) for _, e, w in v.guards],
        "texts": v.texts(),
        "signature": (
            sig.name, sig.shapes, sig.argnums, sig.tuple_result, dict(sig.dynamic), sig.grad_shapes
        ),
    }


def digest(state: bytes, consts: Any) -> str:
    """The hex SHA-256 of a pickled gradient: the state's bytes and every constant's dtype, shape
    and bytes (each framed by its length, so nothing can move between fields)."""
    h = hashlib.sha256(FORMAT.encode())
    h.update(struct.pack("<QQ", len(state), len(consts)))
    h.update(state)
    for c in consts:
        head = f"{c.dtype.str}:{c.shape}".encode()
        h.update(struct.pack("<QQ", len(head), c.nbytes))
        h.update(head)
        h.update(np.ascontiguousarray(c).reshape(-1).view(np.uint8))
    return h.hexdigest()


def reduce(g: "GradientFunction") -> tuple:
    """``g.__reduce__()``: rebuild with :func:`restore` (see the module docstring)."""
    d = g._dispatcher
    variants = list(d.variants)
    if g._primary not in variants:
        variants.append(g._primary)
    consts: list[np.ndarray] = []
    state = {
        "host": host_key(),
        "f": _pack(g.fn, by_value=_in_main(g.fn)),
        "example": _pack(tuple(g._example)),
        "options": d.options.__dict__.copy(),
        "variants": [_variant_state(v, consts) for v in variants],
        "current": len(d.variants),  # the first `current` variants form the dispatch list
        "primary": variants.index(g._primary),
        "compiles": d.compiles,
    }
    data = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    return (restore, (FORMAT, digest(data, consts), data, tuple(consts)))


def token(g: "GradientFunction") -> str:
    """The digest of ``g``'s pickle (Dask's token for ``g``), cached until its variants change."""
    d = g._dispatcher
    key = (d.compiles, tuple(map(id, d.variants)), id(g._primary))
    cached = g.__dict__.get("_token")
    if cached is None or cached[0] != key:
        cached = g.__dict__["_token"] = (key, "tapejit-" + reduce(g)[1][1])
    return cached[1]


def _bad(msg: str) -> GradientUnpicklingError:
    return GradientUnpicklingError(f"cannot restore a pickled tapejit gradient: {msg}")


def _load_state(args: tuple) -> tuple[dict[str, Any], tuple[np.ndarray, ...]]:
    """The state and constants of ``restore``'s arguments, once their digest matches."""
    if len(args) != 4 or args[0] != FORMAT:
        got = args[0] if args and isinstance(args[0], str) else type(args[0] if args else None)
        if args and isinstance(args[0], dict):  # tapejit-gradient-1 pickled one dict
            got = args[0].get("format")
        raise _bad(f"unknown format {got!r} (expected {FORMAT!r}; pickled by another version?)")
    _, want, data, consts = args
    if not isinstance(data, bytes) or not isinstance(consts, tuple):
        raise _bad("the payload is malformed (state or constants of the wrong type)")
    if not all(type(c) is np.ndarray for c in consts):
        raise _bad("the payload is malformed (a constant is not a numpy array)")
    if digest(data, consts) != want:
        raise _bad(
            "the payload is damaged: its SHA-256 does not match (over the object code, "
            "constants, signatures, options and every other restored byte)"
        )
    try:
        state = pickle.loads(data)
    except Exception as e:  # noqa: BLE001 - cannot happen with a matching digest unless forged
        raise _bad(f"the state does not load ({type(e).__name__}: {e})") from None
    need = {"host", "f", "example", "options", "variants", "current", "primary", "compiles"}
    if not isinstance(state, dict) or not need <= state.keys() or not state["variants"]:
        have = state.keys() if isinstance(state, dict) else ()
        raise _bad(f"the payload lacks {sorted(need - set(have)) or ['variants']}")
    return state, consts


def restore(*args: Any) -> "GradientFunction":
    """The gradient pickled as ``(FORMAT, digest, state, constants)`` (see the module
    docstring); raises :class:`GradientUnpicklingError`."""
    global restored
    restored += 1
    state, consts = _load_state(args)
    try:
        options = Options(**state["options"])
    except (TypeError, ValueError) as e:
        raise _bad(f"its options do not validate ({e})") from None
    here, there = host_key(), state["host"]
    if here != there:
        if not isinstance(there, dict):
            raise _bad("the payload is malformed (host key)")
        diff = ", ".join(
            f"{k}: {there.get(k)!r} there, {here[k]!r} here"
            for k in here
            if there.get(k) != here[k]
        )
        f, missing = _unpack(state["f"], "f")
        example, missing_example = _unpack(state["example"], "the example arguments")
        if f is None or example is None:
            raise _bad(
                f"it was compiled for another host or toolchain ({diff}) and "
                f"{missing or missing_example}"
            )
        log.info("recompiling a pickled gradient for this host (%s)", diff)
        kw = {k: v for k, v in options.__dict__.items() if k not in ("argnums", "nargs")}
        return GradientFunction(f, example, options.argnums, **kw)
    try:
        n = len(state["variants"])
        current, primary = int(state["current"]), int(state["primary"])
        if not (1 <= current <= n and 0 <= primary < n):
            raise _bad(
                f"the payload is inconsistent: {current} current and variant {primary} of {n}"
            )
        checked = [_checked(k, v, consts) for k, v in enumerate(state["variants"])]
        f, missing = _unpack(state["f"], "f")
        example, _ = _unpack(state["example"], "the example arguments")
        g = GradientFunction.__new__(GradientFunction)
        g.fn = f
        g._example = tuple(example) if example is not None else ()
        d = _Restored(f, options, g._point)
        d.missing = missing
        variants = [_variant(v, d) for v in checked]
        d.variants = variants[:current]
        d.compiles = int(state["compiles"])
        d._relink()
        g._dispatcher = d
        g._primary = variants[primary]
        g._point(d.variants[0])
    except GradientUnpicklingError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise _bad(f"the payload is malformed ({type(e).__name__}: {e})") from None
    return g


class _Restored(Dispatcher):
    """The dispatcher of an unpickled gradient, whose ``f`` may be missing (``fn`` is None):
    then a call that needs a new specialisation says why it cannot compile one."""

    def _compile(self, args: Any, **spec: Any) -> Variant:
        if self.fn is None:
            raise GuardError(
                f"{self.name}: this input needs a new specialisation (a longer dynamic "
                f"argument or another path), and it cannot recompile here: {self.missing}"
            )
        return super()._compile(args, **spec)


def _shapes(x: Any, what: str) -> tuple[tuple[int, ...], ...]:
    """``x`` as a tuple of shapes of non-negative ints, or :func:`_bad`."""
    try:
        out = tuple(tuple(operator.index(d) for d in s) for s in x)
    except TypeError:
        raise _bad(f"the payload is inconsistent: {what} are not shapes ({x!r})") from None
    if any(d < 0 for s in out for d in s):
        raise _bad(f"the payload is inconsistent: {what} {out} have a negative extent")
    return out


def _checked(k: int, s: dict[str, Any], consts: tuple[np.ndarray, ...]) -> dict[str, Any]:
    """Variant ``k``'s state with typed fields, checked to be consistent in itself (see the
    module docstring, item 2): raises :func:`_bad` naming what disagrees."""

    def bad(msg: str) -> GradientUnpicklingError:
        return _bad(f"the payload is inconsistent: specialisation {k}: {msg}")

    shapes = _shapes(s["shapes"], "argument shapes")
    out_shapes = _shapes(s["out_shapes"], "result shapes")
    name, arg_shapes, argnums, tuple_result, dynamic, grad_shapes = s["signature"]
    arg_shapes = _shapes(arg_shapes, "signature argument shapes")
    grad_shapes = _shapes(grad_shapes, "signature result shapes")
    argnums = tuple(operator.index(i) for i in argnums)
    dynamic = {operator.index(i): operator.index(c) for i, c in dict(dynamic).items()}
    stats = s["stats"]
    workspace = stats["workspace_bytes"]
    if not isinstance(name, str) or not isinstance(s["symbol"], str):
        raise bad("its name or symbol is not a string")
    if type(tuple_result) is not bool:
        raise bad(f"its result kind is {tuple_result!r}, not a bool")
    if not isinstance(workspace, int) or workspace < 0:
        raise bad(f"its workspace size is {workspace!r}")
    # the constants: each as declared, dtype, shape and bytes
    arrays = []
    for j, ref in enumerate(s["consts"]):
        i, dtype, shape = ref
        if not 0 <= operator.index(i) < len(consts):
            raise bad(f"constant {j} refers to array {i} of {len(consts)}")
        c = consts[i]
        shape = _shapes([shape], "constant shapes")[0]
        if c.dtype.str != dtype or c.dtype.kind not in "biuf" or c.shape != shape:
            raise bad(
                f"constant {j} is {c.dtype.str}{list(c.shape)}, declared {dtype}{list(shape)}"
            )
        if c.nbytes != c.dtype.itemsize * math.prod(shape):
            raise bad(f"constant {j} holds {c.nbytes} bytes, not those of its shape {shape}")
        arrays.append(np.ascontiguousarray(c))
    # the signature against the kernel's inputs and outputs
    n_hidden = len(dynamic)
    if s["n_inputs"] != len(shapes) + len(arrays):
        raise bad(
            f"the kernel takes {s['n_inputs']} inputs, but {len(shapes)} arguments "
            f"and {len(arrays)} constants are declared"
        )
    if s["n_outputs"] != 1 + len(out_shapes) or grad_shapes != out_shapes:
        raise bad(
            f"results {list(grad_shapes)} in the signature, {list(out_shapes)} and "
            f"{s['n_outputs']} outputs (the value included) in the kernel"
        )
    if arg_shapes != shapes[: len(shapes) - n_hidden] or any(shapes[len(arg_shapes) :]):
        raise bad(
            f"argument shapes {list(arg_shapes)} in the signature, {list(shapes)} in the "
            f"kernel ({n_hidden} hidden lengths)"
        )
    for i, cap in dynamic.items():
        if not (0 <= i < len(arg_shapes) and arg_shapes[i] and arg_shapes[i][0] == cap):
            raise bad(f"dynamic argument {i} with capacity {cap} does not match its shape")
    if any(not 0 <= i < len(arg_shapes) for i in argnums):
        raise bad(f"argnums {argnums} for {len(arg_shapes)} arguments")
    if not stats.get("program") and grad_shapes != tuple(arg_shapes[i] for i in argnums):
        raise bad(
            f"gradient shapes {list(grad_shapes)} for arguments of shapes "
            f"{[arg_shapes[i] for i in argnums]} (argnums {argnums})"
        )
    for guard in s["guards"]:
        if not (len(guard) == 3 and type(guard[1]) is bool and isinstance(guard[2], str)):
            raise bad(f"a guard is malformed ({guard!r})")
    return {
        **s,
        "shapes": shapes,
        "out_shapes": out_shapes,
        "arrays": arrays,
        "signature": Signature(name, arg_shapes, argnums, tuple_result, dynamic, out_shapes),
        "abi": pipeline.abi(
            shapes, arrays, out_shapes, workspace, stats.get("fast_slots", 0), tuple_result,
            tuple(sorted(dynamic)), not dynamic,
        ),
        "k": k,
    }


def _variant(s: dict[str, Any], dispatcher: Any) -> Variant:
    """A :class:`Variant` of a :func:`_checked` state. Its object code is linked (nothing runs)
    and the calling convention embedded in it compared with the state's before it is bound."""
    lib = CodeLibrary.load(bytes(s["object"]), s["llvm_opt"])
    try:
        embedded = lib.record(s["symbol"] + pipeline.ABI_SUFFIX)
    except (KeyError, ValueError) as e:
        raise _bad(f"specialisation {s['k']}: the object code has no calling convention ({e})")
    if embedded != s["abi"]:
        there, here = json.loads(embedded), json.loads(s["abi"])
        diff = "; ".join(
            f"{key}: {there.get(key)!r} in the code, {here.get(key)!r} in the state"
            for key in sorted(set(there) | set(here)) if there.get(key) != here.get(key)
        )
        raise _bad(
            f"the payload is inconsistent: specialisation {s['k']} was compiled for "
            f"another calling convention ({diff})"
        )
    built = pipeline.Built(
        s["symbol"], int(s["n_inputs"]), int(s["n_outputs"]), s["shapes"], s["arrays"],
        s["stats"], s["llvm"], lib, s["out_shapes"],
    )
    return Variant(
        built, None, None, s["signature"], s["stats"], dispatcher, guards=s["guards"],
        texts=s["texts"],
    )


# how GradientFunction pickles (it reaches this module only through the registration)
register_pickling(reduce, token)
