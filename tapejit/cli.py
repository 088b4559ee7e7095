"""Command line: ``tapejit dump FILE.py:FUNC --arg SPEC ... --stage STAGE``, ``tapejit stats ...``,
``tapejit cache info|clear``, ``tapejit ops`` (the table of primitives).

The stages are the pipeline's stages (:data:`tapejit.STAGES`): ``trace`` (forward graph), ``grad``
(joint graph after reverse mode), ``opt`` (after the passes), ``plan`` (schedule + memory plan),
``llvm`` (lowered LLVM IR), ``llvm-opt`` (after LLVM's O3 pipeline), ``asm`` (host assembly).

An ``--arg`` SPEC is ``f64[d0,d1,...]`` (``f64`` or ``f64[]`` for a scalar); example inputs are
drawn uniformly from [0.1, 1) with a fixed seed (a positive range keeps log/sqrt models defined).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import numpy as np

_SPEC = re.compile(r"^f64(?:\[([0-9,\s]*)\])?$")


def parse_spec(spec: str) -> tuple[int, ...]:
    """``'f64[3,4]'`` -> ``(3, 4)``; raises ``ValueError`` with the accepted grammar."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise ValueError(f"bad --arg {spec!r}: expected f64, f64[] or f64[d0,d1,...]")
    dims = [d for d in (m.group(1) or "").replace(" ", "").split(",") if d]
    return tuple(int(d) for d in dims)


def load_function(target: str):
    """Import ``FILE.py:FUNC`` and return the function."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"bad target {target!r}: expected FILE.py:FUNC")
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(f"_tapejit_target_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"{path} has no function {name!r}")
    return fn


def _compile(ns):
    import tapejit

    fn = load_function(ns.target)
    rng = np.random.default_rng(0)
    args = []
    for spec in ns.arg:
        shape = parse_spec(spec)
        args.append(rng.uniform(0.1, 1.0, shape) if shape else float(rng.uniform(0.1, 1.0)))
    if not args:
        raise ValueError("give at least one --arg, e.g. --arg 'f64[100]'")
    argnums = tuple(ns.argnums) if ns.argnums else 0
    return tapejit.compile(fn, *args, argnums=argnums)


def _cache(action: str) -> int:
    from tapejit.api import object_cache

    cache = object_cache(True)
    if cache is None:
        print("tapejit: the on-disk cache is disabled (TAPEJIT_CACHE=0)")
        return 0
    if action == "info":
        info = cache.info()
        print(
            f"directory: {info['directory']}\nentries:   {info['entries']}\nbytes:     {info['bytes']}"
        )
    else:
        print(f"removed {cache.clear()} entries from {cache.directory}")
    return 0


def primitives_markdown() -> str:
    """The table of primitives: each op's group, the numpy names it answers to, whether it has
    a reverse-mode rule, and the accuracy its math row guarantees (README keeps a copy that
    ``tests/test_docs.py`` checks; ``tapejit ops`` prints it)."""
    from tapejit.codegen import mathlib
    from tapejit import ops

    rows = ["| op | group | numpy names | reverse mode | accuracy |", "|---|---|---|---|---|"]
    for name, op in ops.OPS.items():
        if op.group == "leaf":
            continue
        names = ", ".join(f"`{n}`" for n in op.numpy) or "–"
        vjp = "yes" if op.differentiable else "no cotangent (piecewise constant)"
        m = mathlib.MATH.get(name)
        if m is not None and m.body is not None:
            acc = f"≤ {m.ulp_ld:g} ulp (vectorised IR)"
        elif m is not None:
            acc = f"exact (`{m.intrinsic}`)"
        else:
            acc = "IEEE arithmetic" if op.group in ("unary", "binary") else "–"
        rows.append(f"| `{name}` | {op.group} | {names} | {vjp} | {acc} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    from tapejit.api import STAGES

    p = argparse.ArgumentParser(prog="tapejit", description="Inspect tapejit's compilation stages.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("cache", help="inspect or clear the on-disk cache of compiled code")
    c.add_argument("action", choices=("info", "clear"))
    sub.add_parser("ops", help="list the primitives: numpy names, reverse mode, accuracy")
    for name, help in (("dump", "print one stage"), ("stats", "print compile statistics")):
        c = sub.add_parser(name, help=help)
        c.add_argument("target", help="FILE.py:FUNC")
        c.add_argument("--arg", action="append", default=[], help="argument spec, e.g. 'f64[100]'")
        c.add_argument(
            "--argnums", type=int, nargs="*", help="arguments to differentiate (default 0)"
        )
        if name == "dump":
            c.add_argument("--stage", choices=STAGES, default="grad")
    ns = p.parse_args(argv)
    if ns.command == "cache":
        return _cache(ns.action)
    if ns.command == "ops":
        return _emit(primitives_markdown())
    try:
        grad = _compile(ns)
    except Exception as e:  # the CLI reports any failure as one line, exit status 1
        print(f"tapejit: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if ns.command == "dump":
        return _emit(grad.ir(ns.stage))
    return _emit(json.dumps(grad.stats, indent=2, default=str))


def _emit(text: str) -> int:
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`tapejit dump ... | head`): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
