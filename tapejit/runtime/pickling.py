"""Pickling compiled gradients: ``pickle``, ``copy.deepcopy``, multiprocessing, Dask.

A :class:`~tapejit.runtime.function.GradientFunction` pickles to what it needs to run without
recompiling: for every compiled specialisation its object code (with a SHA-256 that is checked
before the code is linked), calling convention, captured constants (numpy arrays: out-of-band
buffers under protocol 5 with a ``buffer_callback``), guards and printed stages; the compile
options; the example arguments; the *host key* — tapejit's version and a digest of its
sources, llvmlite's and LLVM's versions, the target triple, CPU name and feature string; and
``f`` itself when it can be pickled (plainly, else with ``cloudpickle`` when that is installed;
otherwise the reason why not).

Unpickling in a process with the same host key links the object code (no LLVM work: ~1-2 ms per
specialisation). With another host key — another CPU or feature set, another llvmlite/LLVM or
tapejit — the code is never run: ``f`` is recompiled at the example arguments, or, when ``f``
was not pickled, :class:`GradientUnpicklingError` names the difference. A guard failure in an
unpickled gradient whose ``f`` was not pickled raises :class:`~tapejit.GuardError` saying why it
cannot recompile. A truncated, corrupted or foreign payload raises
:class:`GradientUnpicklingError` (a ``pickle.UnpicklingError``), never crashes.
"""

from __future__ import annotations

import hashlib
import pickle
import zlib
from typing import TYPE_CHECKING, Any

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from .. import pipeline
from ..codegen import target
from ..codegen.jit import CodeLibrary
from ..progress import log
from .options import Options
from .signature import Signature
from .variant import Variant

if TYPE_CHECKING:
    from .function import GradientFunction

FORMAT = "tapejit-gradient-1"

#: Gradients restored in this process (how tests see that Dask ships one per worker).
restored = 0


class GradientUnpicklingError(pickle.UnpicklingError):
    """A pickled gradient cannot be restored here: a damaged or foreign payload, or code
    compiled for another host whose ``f`` was not pickled (the message says which)."""


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


def _pack_f(f: Any) -> tuple[str, Any]:
    """``f`` as pickle data: itself when plain pickle can take it, cloudpickle bytes when only
    cloudpickle can, else the reason it cannot be pickled."""
    try:
        pickle.dumps(f, protocol=pickle.HIGHEST_PROTOCOL)
        return "object", f
    except Exception as e:  # noqa: BLE001 - any failure means: not picklable this way
        reason = f"{type(e).__name__}: {e}"
    try:
        import cloudpickle
    except ImportError:
        return "missing", f"{reason} (install cloudpickle to pickle it by value)"
    try:
        return "cloudpickle", cloudpickle.dumps(f)
    except Exception as e:  # noqa: BLE001
        return "missing", f"{reason}; cloudpickle: {type(e).__name__}: {e}"


def _unpack_f(packed: tuple[str, Any]) -> tuple[Any, str | None]:
    """``(f or None, why it is missing)``."""
    kind, data = packed
    if kind == "object":
        return data, None
    if kind == "cloudpickle":
        try:
            import cloudpickle  # noqa: F401 - the payload needs its functions

            return pickle.loads(data), None
        except Exception as e:  # noqa: BLE001
            return None, f"f was pickled with cloudpickle and cannot be loaded here: {e}"
    return None, f"f could not be pickled ({data})"


def _variant_state(v: Variant) -> dict[str, Any]:
    b = v._built
    obj = v._lib.object_code()
    sig = v.signature
    return {
        "symbol": b.symbol,
        "n_inputs": b.n_inputs,
        "n_outputs": b.n_outputs,
        "shapes": b.shapes,
        "consts": list(b.consts),
        "stats": v.stats,
        "object": obj,
        "sha256": hashlib.sha256(obj).hexdigest(),
        "llvm": b.llvm if isinstance(b.llvm, bytes) else zlib.compress(b.llvm.encode(), 1),
        "llvm_opt": zlib.compress(v._lib.llvm_ir.encode(), 1),
        "guards": [(None, bool(e), str(w)) for _, e, w in v.guards],
        "texts": v.texts(),
        "signature": (
            sig.name, sig.shapes, sig.argnums, sig.tuple_result, dict(sig.dynamic), sig.grad_shapes
        ),
    }


def reduce(g: "GradientFunction") -> tuple:
    """``g.__reduce__()``: rebuild with :func:`restore` from a plain-data state."""
    d = g._dispatcher
    variants = list(d.variants)
    if g._primary not in variants:
        variants.append(g._primary)
    state = {
        "format": FORMAT,
        "host": host_key(),
        "f": _pack_f(g.fn),
        "options": d.options.__dict__.copy(),
        "example": tuple(g._example),
        "variants": [_variant_state(v) for v in variants],
        "current": len(d.variants),  # the first `current` variants form the dispatch list
        "primary": variants.index(g._primary),
        "compiles": d.compiles,
    }
    return (restore, (state,))


def _bad(msg: str) -> GradientUnpicklingError:
    return GradientUnpicklingError(f"cannot restore a pickled tapejit gradient: {msg}")


def _check(state: Any) -> None:
    """Raise :class:`GradientUnpicklingError` unless ``state`` has the expected structure."""
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise _bad(f"unknown format {got!r} (expected {FORMAT!r}; pickled by another version?)")
    need = {"host", "f", "options", "example", "variants", "current", "primary", "compiles"}
    if not need <= state.keys() or not state["variants"]:
        raise _bad(f"the payload lacks {sorted(need - state.keys()) or ['variants']}")
    for v in state["variants"]:
        obj = v.get("object") if isinstance(v, dict) else None
        if not isinstance(obj, (bytes, bytearray)) or (
            hashlib.sha256(obj).hexdigest() != v.get("sha256")
        ):
            raise _bad("the object code is damaged (its SHA-256 does not match)")


def restore(state: dict[str, Any]) -> "GradientFunction":
    """The gradient pickled as ``state`` (see the module docstring)."""
    from .dispatch import Dispatcher
    from .function import GradientFunction

    global restored
    restored += 1
    _check(state)
    f, missing = _unpack_f(state["f"])
    try:
        options = Options(**state["options"])
    except (TypeError, ValueError) as e:
        raise _bad(f"its options do not validate ({e})") from None
    here, there = host_key(), state["host"]
    if here != there:
        diff = ", ".join(
            f"{k}: {there.get(k)!r} there, {here[k]!r} here" for k in here if there.get(k) != here[k]
        )
        if f is None:
            raise _bad(f"it was compiled for another host or toolchain ({diff}) and {missing}")
        log.info("recompiling a pickled gradient for this host (%s)", diff)
        kw = {k: v for k, v in options.__dict__.items() if k not in ("argnums", "nargs")}
        return GradientFunction(f, state["example"], options.argnums, **kw)
    try:
        g = GradientFunction.__new__(GradientFunction)
        g.fn = f
        g._example = tuple(state["example"])
        d = Dispatcher(f, options, g._point)
        d.missing = missing
        variants = [_variant(v, d) for v in state["variants"]]
        d.variants = variants[: state["current"]]
        d.compiles = int(state["compiles"])
        d._relink()
        g._dispatcher = d
        g._primary = variants[state["primary"]]
        g._point(d.variants[0])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise _bad(f"the payload is malformed ({type(e).__name__}: {e})") from None
    return g


def _variant(s: dict[str, Any], dispatcher: Any) -> Variant:
    lib = CodeLibrary.load(bytes(s["object"]), s["llvm_opt"])
    consts = [np.ascontiguousarray(c) for c in s["consts"]]
    shapes = tuple(tuple(int(d) for d in sh) for sh in s["shapes"])
    name, arg_shapes, argnums, tuple_result, dynamic, out_shapes = s["signature"]
    out_shapes = tuple(map(tuple, out_shapes))
    built = pipeline.Built(
        s["symbol"], int(s["n_inputs"]), int(s["n_outputs"]), shapes, consts, s["stats"],
        s["llvm"], lib, out_shapes,
    )
    sig = Signature(
        name, tuple(map(tuple, arg_shapes)), tuple(argnums), tuple_result, dynamic, out_shapes
    )
    return Variant(
        built, None, None, sig, s["stats"], dispatcher, guards=s["guards"], texts=s["texts"]
    )
