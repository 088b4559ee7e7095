"""Command line, argument parsing and the commands: ``tapejit dump FILE.py:FUNC --arg SPEC ...
--stage STAGE [--format F] [--mode MODE]``, ``tapejit stats ... [--json]``, ``tapejit export``,
``tapejit cache info|clear``, ``tapejit ops`` (the table of primitives), ``tapejit --version``.
``tapejit --help`` lists the commands, the stages and the modes. The stats table is
:mod:`tapejit.tools.cli_stats`; the annotated assembly, :mod:`tapejit.tools.cli_annotate`;
the table of primitives, :mod:`tapejit.tools.cli_ops`.

The stages are the pipeline's stages (:data:`tapejit.STAGES`, described in :data:`STAGE_HELP`):
``trace`` (forward graph), ``grad`` (joint graph after reverse mode), ``opt`` (after the
passes), ``plan`` (schedule + memory plan), ``llvm`` (lowered LLVM IR), ``llvm-opt`` (after
LLVM's O3 pipeline), ``asm`` (host assembly, each function headed by a comment naming the part
of the plan it implements: :func:`tapejit.tools.cli_annotate.annotate_asm`).

``--mode`` (``dump`` and ``stats``) compiles another transformation than the gradient,
``tapejit.compile(..., mode=MODE)``: ``jvp``, ``vjp``, ``jacfwd``, ``jacrev``, ``hvp``,
``hessian``, ``value`` (:data:`MODE_HELP` says what each compiled function takes); its
``trace`` stage is the transformation's program (:mod:`tapejit.transforms`).

``--format dot`` prints the trace/grad/opt/plan stage as Graphviz DOT (:mod:`tapejit.tools.dot`);
``--format svg|png -o FILE`` renders it with the optional ``graphviz`` package and Graphviz's
``dot`` program (exit status 2 and a message saying what to install when either is missing).
``tapejit stats`` prints an aligned table at most 100 columns wide
(:func:`tapejit.tools.cli_stats.format_stats`); ``--json`` prints ``grad.stats`` as JSON.

An ``--arg`` SPEC is ``DTYPE[d0,d1,...]`` (``DTYPE`` or ``DTYPE[]`` for a scalar), ``DTYPE`` one
of :data:`DTYPES` (``f64``, ``f32``, ``i64``, ``i32``, ...: what ``tapejit.compile`` converts to
float64 exactly; numpy's names such as ``float32`` too). Example inputs are drawn with a fixed
seed, floats uniformly from [0.1, 1) (a positive range keeps log/sqrt models defined), integers
from [1, 10), and passed in their dtype: the library converts them as it converts any caller's.
Failures print one ``tapejit: error: ...`` line on stderr: exit status 1 when FUNC cannot be
loaded or compiled, 2 for bad usage and missing optional software.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from .cli_annotate import annotate_asm, entry_symbol
from .cli_ops import primitives_markdown
from .cli_stats import format_stats

# -- --arg SPEC: dtype and shape -----------------------------------------------------------------

#: The dtypes an ``--arg`` may name: those whose values ``tapejit.compile`` converts to float64
#: exactly (:func:`tapejit.frontend.tracing._input_type`, :mod:`tapejit.runtime.signature`: a
#: safe cast; not bool, not complex). Short names and numpy's names.
DTYPES = {
    "f64": np.float64, "f32": np.float32, "f16": np.float16,
    "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
    "u64": np.uint64, "u32": np.uint32, "u16": np.uint16, "u8": np.uint8,
}  # fmt: skip
_ALIASES = {np.dtype(d).name: short for short, d in DTYPES.items()}  # float32 -> f32 ...
_SPEC = re.compile(r"^([a-z][a-z0-9]*)(?:\[([0-9,\s]*)\])?$")


def parse_spec(spec: str) -> tuple[str, tuple[int, ...]]:
    """``'f64[3,4]'`` -> ``('f64', (3, 4))``, ``'i64'`` -> ``('i64', ())`` (numpy's names,
    ``float32[3]``, are accepted too). Raises ``ValueError`` with the accepted grammar and
    dtypes (``bool``: tapejit does not take bool arguments)."""
    m = _SPEC.match(spec.strip().lower())
    if not m:
        raise ValueError(
            f"bad --arg {spec!r}: expected DTYPE, DTYPE[] or DTYPE[d0,d1,...], "
            f"DTYPE one of {', '.join(DTYPES)}"
        )
    name = _ALIASES.get(m.group(1), m.group(1))
    if name not in DTYPES:
        why = " (tapejit takes real numbers; pass bool masks as f64 0/1)" if "bool" in name else ""
        raise ValueError(
            f"bad --arg {spec!r}: unknown dtype {m.group(1)!r}{why}; the dtypes tapejit "
            f"converts to float64 exactly are {', '.join(DTYPES)}"
        )
    dims = [d for d in (m.group(2) or "").replace(" ", "").split(",") if d]
    return name, tuple(int(d) for d in dims)


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
    # registered while it runs, as an import is: a dataclass (or pickle) looks its module up
    sys.modules[spec.name] = module
    sys.path.insert(0, str(file.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise
    finally:
        sys.path.pop(0)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"{path} has no function {name!r}")
    return fn


# -- stages and their one-line descriptions ---------------------------------------------------

#: What each stage of :data:`tapejit.STAGES` shows (``tapejit --help`` prints this table).
STAGE_HELP = {
    "trace": "the forward graph traced from FUNC (SSA IR; loop bodies printed under their loop)",
    "grad": "the joint forward + backward graph that reverse mode builds",
    "opt": "the joint graph after the passes (simplification, constant folding, DCE)",
    "plan": "the schedule: fused loop kernels, straight-line code and the memory plan",
    "llvm": "the LLVM IR lowered from the plan, before LLVM optimises it",
    "llvm-opt": "the LLVM IR after LLVM's O3 pipeline",
    "asm": "host assembly; each function headed by a comment naming the plan part it runs",
}

#: The transformations ``--mode`` compiles (``tapejit.compile(..., mode=MODE)``; the modes of
#: :data:`tapejit.transforms.MODES` but ``grad_aux``, which ``has_aux`` selects) and what the
#: compiled function takes and returns (``tapejit --help`` prints this table).
MODE_HELP = {
    "grad": "(*args) -> the gradient of scalar FUNC wrt the --argnums arguments (default)",
    "jvp": "(*args, *tangents) -> (*ys, *tangents of ys): forward mode, one tangent per "
    "--argnums argument",
    "vjp": "(*args, *cotangents) -> (*ys, *gradients): reverse mode, one cotangent per output",
    "jacfwd": "(*args) -> the Jacobian of each output wrt each --argnums argument, shape "
    "y.shape + x.shape (forward mode)",
    "jacrev": "(*args) -> the same Jacobians by reverse mode",
    "hvp": "(*args, v) -> H v, the Hessian of scalar FUNC times v (one --argnums argument)",
    "hessian": "(*args) -> H, shape x.shape + x.shape (scalar FUNC, one --argnums argument)",
    "value": "(*args) -> FUNC's outputs, not differentiated (--argnums defaults to none)",
}


def _modes() -> tuple[str, ...]:
    from ..transforms import MODES

    return tuple(m for m in MODES if m != "grad_aux")


def modes_help() -> str:
    """One line per ``--mode``, with what the compiled function takes and returns."""
    modes = _modes()
    width = max(map(len, modes))
    return "\n".join(f"  {m:<{width}}  {MODE_HELP.get(m, '(see tapejit.compile)')}" for m in modes)


#: The stages ``--format dot|svg|png`` can draw (graphs and the plan; the rest is text).
DOT_STAGES = ("trace", "grad", "opt", "plan")
FORMATS = ("text", "dot", "svg", "png")
PICTURES = ("svg", "png")

#: What to install for ``--format svg|png`` (the error messages when either is missing).
DOT_PROGRAM_HINT = (
    "install Graphviz (apt-get install graphviz, dnf install graphviz, brew install graphviz, "
    "or https://graphviz.org/download/)"
)
GRAPHVIZ_HINT = (
    f"pip install graphviz (the Python package); it runs Graphviz's 'dot' program: "
    f"{DOT_PROGRAM_HINT}"
)


def _stages() -> tuple[str, ...]:
    import tapejit

    return tuple(tapejit.STAGES)


def stages_help() -> str:
    """One line per stage of :data:`tapejit.STAGES`, in pipeline order."""
    stages = _stages()
    width = max(map(len, stages))
    return "\n".join(f"  {s:<{width}}  {STAGE_HELP.get(s, '(see README.md)')}" for s in stages)


# -- the example inputs and the pipeline --------------------------------------------------------


def _example_args(specs: list[str]) -> list:
    """The seeded example inputs for ``--arg`` specs: floats uniform in [0.1, 1), integers
    uniform in [1, 10), as arrays of the spec's dtype (scalars: a Python float for ``f64``, a
    numpy scalar otherwise) that ``tapejit.compile`` converts to float64 as for any caller."""
    rng = np.random.default_rng(0)
    args = []
    for spec in specs:
        name, shape = parse_spec(spec)
        dtype = np.dtype(DTYPES[name])
        if dtype.kind == "f":
            value = rng.uniform(0.1, 1.0, shape)
        else:
            value = rng.integers(1, 10, shape)
        if name == "f64":
            args.append(value if shape else float(value))
        else:
            args.append(value.astype(dtype) if shape else dtype.type(value))
    if not args:
        raise ValueError("give at least one --arg, e.g. --arg 'f64[100]'")
    return args


def _argnums(given: list[int] | None, nargs: int, mode: str = "grad") -> tuple[int, ...]:
    """``--argnums`` as non-negative positions (the checks ``tapejit.compile`` makes); the
    default is ``(0,)``, and ``()`` for ``--mode value`` (nothing differentiated)."""
    nums = tuple(given) if given else (() if mode == "value" else (0,))
    out = []
    for a in nums:
        if not -nargs <= a < nargs:
            raise ValueError(f"argnums entry {a!r} is not a valid index for {nargs} arguments")
        out.append(a % nargs)
    if len(set(out)) != len(out):
        raise ValueError(f"argnums {nums} repeats an argument")
    return tuple(out)


def _compile(ns):
    import tapejit

    fn = load_function(ns.target)
    args = _example_args(ns.arg)
    if ns.argnums:
        argnums = tuple(ns.argnums)
    else:  # tapejit.compile's default (the gradient an array, not a tuple); value: none
        argnums = () if ns.mode == "value" else 0
    return tapejit.compile(fn, *args, argnums=argnums, mode=ns.mode)


def front_end(
    fn, args: list, argnums: tuple[int, ...], upto: str = "plan", mode: str = "grad"
) -> dict[str, Any]:
    """The pipeline's objects up to stage ``upto`` (``trace``, ``grad``, ``opt``, ``plan``):
    the same pure functions ``tapejit.compile(..., mode=mode)`` runs, so the same graphs and
    plan it compiles (the IR is deterministic), without LLVM. For a mode other than ``grad``
    the ``trace`` stage is the transformation's program (:func:`tapejit.transforms.program`)."""
    from .. import pipeline, transforms
    from ..frontend import tracing
    from ..passes import trace_passes

    outputs = "scalar" if mode in transforms.SCALAR_MODES else "any"
    trace, _ = trace_passes(tracing.trace(fn, args, argnums, outputs=outputs))
    if mode != "grad":
        trace = transforms.program(mode, trace, argnums, args)
    if upto == "trace":
        return {"trace": trace}
    f = pipeline.front(trace, argnums, program=mode != "grad")
    return {"trace": trace, "grad": f.grad, "opt": f.opt, "plan": f.plan}


# -- pictures -----------------------------------------------------------------------------------


class RenderError(Exception):
    """``--format svg|png`` cannot render: the message says what to install."""


def render(dot_text: str, fmt: str) -> bytes:
    """``dot_text`` rendered by Graphviz to ``fmt`` (``svg``, ``png``) through the optional
    ``graphviz`` package; :class:`RenderError` naming what to install when the package or the
    ``dot`` program is missing."""
    try:
        import graphviz
    except ImportError:
        raise RenderError(
            f"--format {fmt} needs the optional 'graphviz' Python package: {GRAPHVIZ_HINT}"
        ) from None
    try:
        # quiet: dot's warnings (a font without metrics) are noise; its errors raise below
        return graphviz.Source(dot_text).pipe(format=fmt, quiet=True)
    except graphviz.ExecutableNotFound:
        raise RenderError(
            f"--format {fmt} needs Graphviz's 'dot' program, which is not on PATH: "
            f"{DOT_PROGRAM_HINT}"
        ) from None
    except graphviz.CalledProcessError as e:  # a bug in the DOT text: say what dot said
        err = (e.stderr or b"").decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"Graphviz's dot failed: {err[0] if err else e}") from None


def _cache(action: str) -> int:
    from ..api import object_cache

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


# -- the command line ---------------------------------------------------------------------------

_EXAMPLES = """\
examples:
  tapejit dump examples/eam.py:eam --arg 'f64[100]' --stage plan
  tapejit dump examples/eam.py:eam --arg 'f64[100]' --stage plan --format svg -o eam.svg
  tapejit dump examples/eam.py:eam --arg 'f64[100]' --stage asm
  tapejit stats examples/eam.py:eam --arg 'f64[100]'
  tapejit stats examples/eam.py:eam --arg 'f64[100]' --mode hessian
  tapejit export examples/eam.py:eam --arg 'f64[100]' -o build
  tapejit cache info"""

_ARG_HELP = (
    "an argument of FUNC: f64 (or f64[]) for a scalar, f64[d0,d1,...] for an array, another "
    f"dtype in place of f64 ({', '.join(DTYPES)}); once per argument, in order. Example inputs "
    "are drawn with a fixed seed: floats uniformly from [0.1, 1), integers from [1, 10)"
)


def _para(text: str) -> str:
    return textwrap.fill(text, 88)


def _function_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments naming the function to compile: FILE.py:FUNC, --arg SPEC..., --argnums."""
    c.add_argument("target", metavar="FILE.py:FUNC", help="the function to differentiate")
    c.add_argument("--arg", action="append", default=[], metavar="SPEC", help=_ARG_HELP)
    c.add_argument(
        "--argnums",
        type=int,
        nargs="*",
        metavar="N",
        help="positions of the arguments to differentiate (default: 0)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``tapejit`` argument parser (its ``--help`` lists the commands and the stages)."""
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="tapejit",
        formatter_class=raw,
        description=_para(
            "Inspect how tapejit compiles the gradient of a numpy-style function: "
            "print any stage of the pipeline, draw its graphs, show compile statistics, manage "
            "the cache of compiled code."
        ),
        epilog=f"stages (tapejit dump --stage STAGE), in pipeline order:\n{stages_help()}\n\n"
        f"modes (tapejit dump|stats --mode MODE; the compiled function's call):\n"
        f"{modes_help()}\n\n"
        f"{_EXAMPLES}\n\nRun 'tapejit COMMAND --help' for the options of a command.",
    )
    p.add_argument("--version", action="version", version=f"tapejit {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name in ("dump", "stats"):
        if name == "dump":
            c = sub.add_parser(
                "dump",
                formatter_class=raw,
                help="print one stage of FUNC's gradient: text, Graphviz DOT, SVG or PNG",
                description=_para(
                    "Compile the gradient of FUNC in FILE.py for the given argument "
                    "shapes and print one stage of the pipeline. The IR stages print as text "
                    "(loop bodies under their loop node); --format dot prints a Graphviz DOT graph "
                    "of the "
                    "trace, grad, opt or plan stage (in the plan, each fused loop kernel is a "
                    "cluster), --format svg|png renders it (needs the graphviz package and "
                    "Graphviz's dot program)."
                ),
                epilog=f"stages:\n{stages_help()}\n\n{_EXAMPLES}",
            )
            c.set_defaults(usage_error=c.error)
        else:
            c = sub.add_parser(
                "stats",
                formatter_class=raw,
                help="print compile statistics: nodes, kernels, memory, cache, pass and timings",
                description=_para(
                    "Compile the gradient of FUNC in FILE.py and print grad.stats: "
                    "node counts per stage, loop kernels and loop nodes, workspace and constant "
                    "bytes, cache hit or miss, what each pass did, and the time each compile "
                    "stage took (ms). --json prints the dict as JSON instead, for programs."
                ),
                epilog="example:\n  tapejit stats examples/eam.py:eam --arg 'f64[100]' --json",
            )
        _function_arguments(c)
        c.add_argument(
            "--mode",
            choices=_modes(),
            default="grad",
            help="what to compile: the gradient (default) or another transformation, "
            "tapejit.compile(..., mode=MODE); the list is in 'tapejit --help'",
        )
        if name == "dump":
            c.add_argument(
                "--stage",
                choices=_stages(),
                default="grad",
                help="the stage to print (default: grad; the list is below)",
            )
            c.add_argument(
                "--format",
                choices=FORMATS,
                default="text",
                help="text (default); dot: Graphviz DOT of the trace, grad, opt or plan stage; "
                "svg, png: that graph rendered by Graphviz (needs -o FILE)",
            )
            c.add_argument(
                "-o",
                "--output",
                metavar="FILE",
                help="write to FILE instead of standard output (required for svg and png)",
            )
            c.add_argument(
                "--no-annotate",
                dest="annotate",
                action="store_false",
                help="asm stage: print the assembly exactly as grad.ir('asm'), without the "
                "comments naming the plan part of each function",
            )
        else:
            c.add_argument("--json", action="store_true", help="print grad.stats as JSON")
    c = sub.add_parser(
        "export",
        formatter_class=raw,
        help="write FUNC's gradient as an object file and a C header, for use from C",
        description=_para(
            "Compile the gradient of FUNC in FILE.py for the given argument shapes and write it "
            "as a relocatable object file (NAME.o, position-independent, for this CPU) and a C "
            "header (NAME.h: the signature, shapes, workspace size, guards and status codes); "
            "--shared also links libNAME.so with the system C compiler. Captured arrays are "
            "embedded in the object."
        ),
        epilog="example:\n  tapejit export examples/eam.py:eam --arg 'f64[100]' -o build --shared",
    )
    _function_arguments(c)
    c.add_argument(
        "-o", "--output", required=True, metavar="DIR",
        help="directory to write into (created if missing), or FILE.o to name the files",
    )  # fmt: skip
    c.add_argument("--name", help="the C function's name (default: FUNC)")
    c.add_argument("--shared", action="store_true", help="also link a shared library")
    c.set_defaults(usage_error=c.error, mode="grad")
    c = sub.add_parser(
        "cache",
        help="inspect or clear the on-disk cache of compiled code",
        description=_para(
            "info: where the cache of compiled machine code is, its entries and "
            "bytes; clear: remove every entry. $TAPEJIT_CACHE_DIR moves it, TAPEJIT_CACHE=0 "
            "turns it off."
        ),
    )
    c.add_argument("action", choices=("info", "clear"), help="info or clear")
    sub.add_parser(
        "ops",
        help="list the primitives: numpy names, reverse mode, accuracy",
        description=_para(
            "Print the table of primitive ops (Markdown): each op's group, the numpy "
            "names it answers to, whether it has a reverse-mode rule, and its accuracy."
        ),
    )
    return p


def _version() -> str:
    from .. import __version__

    return __version__


def _fail(message: str, status: int = 1) -> int:
    print(f"tapejit: error: {message}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "cache":
        return _cache(ns.action)
    if ns.command == "ops":
        return _emit(primitives_markdown())
    if ns.command == "export":
        return _export(ns)
    if ns.command == "stats":
        try:
            grad = _compile(ns)
        except Exception as e:  # the CLI reports any failure as one line, exit status 1
            return _fail(f"{type(e).__name__}: {e}")
        if ns.json:
            return _emit(json.dumps(grad.stats, indent=2, default=str))
        nums = _argnums(ns.argnums, len(ns.arg), ns.mode)
        what = {"grad": "gradient", "value": "value"}.get(ns.mode, f"mode {ns.mode}")
        title = f"{ns.target}({', '.join(ns.arg)}), {what} wrt argnums {nums}"
        return _emit(format_stats(grad.stats, title))
    return _dump(ns)


def _export(ns) -> int:
    """``tapejit export``: compile, then write the object file and header (and library)."""
    from ..runtime.export import SharedLibraryError

    try:
        grad = _compile(ns)
    except Exception as e:  # the CLI reports any failure as one line, exit status 1
        return _fail(f"{type(e).__name__}: {e}")
    try:
        result = grad.export(ns.output, name=ns.name, shared=ns.shared)
    except ValueError as e:
        ns.usage_error(str(e))
    except SharedLibraryError as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"{type(e).__name__}: {e}")
    written = [result.object, result.header] + ([result.shared] if result.shared else [])
    return _emit("\n".join(f"wrote {w}" for w in written))


def _dump(ns) -> int:
    fmt = ns.format
    if fmt != "text" and ns.stage not in DOT_STAGES:
        ns.usage_error(
            f"--format {fmt} draws the stages {', '.join(DOT_STAGES)}, not {ns.stage!r} "
            "(it is text: use --format text)"
        )
    if fmt in PICTURES and not ns.output:
        ns.usage_error(f"--format {fmt} writes a picture: give the file with -o FILE")
    try:
        if fmt == "text":
            grad = _compile(ns)
            text = grad.ir(ns.stage)
        else:
            fn = load_function(ns.target)
            args = _example_args(ns.arg)
            nums = _argnums(ns.argnums, len(args), ns.mode)
            stages = front_end(fn, args, nums, upto=ns.stage, mode=ns.mode)
            obj = stages[ns.stage]
            from .dot import to_dot

            title = None if ns.stage == "plan" else f"{obj.name}: {ns.stage}"
            text = to_dot(obj, title)
    except Exception as e:  # the CLI reports any failure as one line, exit status 1
        return _fail(f"{type(e).__name__}: {e}")
    if fmt == "text" and ns.stage == "asm" and ns.annotate:
        text = _annotated(text, ns)
    if fmt in PICTURES:
        try:
            data = render(text, fmt)
        except RenderError as e:
            return _fail(str(e), 2)
        except Exception as e:
            return _fail(f"{type(e).__name__}: {e}")
        return _write(ns.output, data)
    if ns.output:
        return _write(ns.output, (text + "\n").encode())
    return _emit(text)


def _annotated(asm: str, ns) -> str:
    """``asm`` annotated with the plan (the plan is rebuilt with the front end's pure
    functions); on any failure the plain assembly and a warning on stderr."""
    try:
        fn = load_function(ns.target)
        args = _example_args(ns.arg)
        nums = _argnums(ns.argnums, len(args), ns.mode)
        prog = front_end(fn, args, nums, mode=ns.mode)["plan"]
        return annotate_asm(asm, prog, entry_symbol(prog.graph))
    except Exception as e:  # an annotation is a convenience: never lose the assembly for it
        print(f"tapejit: warning: assembly not annotated: {type(e).__name__}: {e}", file=sys.stderr)
        return asm


def _write(path: str, data: bytes) -> int:
    try:
        Path(path).write_bytes(data)
    except OSError as e:
        return _fail(f"cannot write {path}: {e.strerror or e}")
    return 0


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
