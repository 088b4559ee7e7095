"""Ahead-of-time export of a compiled gradient for C, C++ or Fortran programs (no Python at run
time): ``grad.export(path, name=None, shared=False)`` (:meth:`GradientFunction.export`) calls
:func:`export_variant`.

**Files.** ``path`` is a directory (created, with its parents, when missing): the files are
``DIR/NAME.o``, ``DIR/NAME.h`` and, with ``shared=True``, ``DIR/libNAME.so``. A path that is not
an existing directory and ends in ``.o``, ``.h`` or ``.so`` names the files instead, by their
stem: ``export("build/eam_grad.o")`` writes ``build/eam_grad.o``, ``build/eam_grad.h`` and
``build/libeam_grad.so``. ``NAME`` — the C symbol and (upper-cased) the header's macro prefix —
is ``name``, by default the Python function's name; it must be a C identifier that is not a
C/C++ keyword (nor ``main``).

- ``NAME.o``: a relocatable, position-independent ELF object for the host CPU (it uses the
  host's instruction set, e.g. AVX-512, and runs on CPUs that have it), optimised as the JIT
  optimises. Its only global symbol is ``NAME``; the kernel, the math library it calls and
  the embedded constants are local symbols, so objects exported from different gradients link
  into one program. It needs nothing but libc/libm at link time (LLVM may call ``memset``,
  ``memcpy``, ``fmod`` ...): link with ``-lm``. Builds into executables and shared libraries.
- ``NAME.h``: the declaration, the shapes and sizes as macros, and the contract below.
- ``libNAME.so`` (``shared=True``): ``NAME.o`` linked with ``$CC`` (default ``cc``)
  ``-shared ... -lm``; loadable with ``dlopen``/``ctypes``.

**Signature**::

    int32_t NAME(const double *arg0, ..., double *value, double *grad0, ..., void *workspace);

one pointer per runtime argument of ``f`` in order (C-contiguous float64; a scalar argument is a
pointer to one double), the primal value (one double), one gradient per entry of ``argnums`` in
that order (C-contiguous float64 of its argument's shape), and the workspace: at least
``NAME_WORKSPACE_BYTES`` bytes, aligned to 64 bytes, whose contents on entry do not matter (NULL
is allowed when the size is 0). Outputs must not overlap the arguments or each other; arrays
must be 8-byte aligned. The header defines ``NAME_N_ARGS``, ``NAME_ARGi_SIZE`` (elements of
argument i), ``NAME_N_GRADS``, ``NAME_GRADj_SIZE``, ``NAME_GRADj_ARG`` (the argument gradient j
belongs to), ``NAME_WORKSPACE_BYTES``, ``NAME_WORKSPACE_ALIGN`` (64) and ``NAME_N_GUARDS``
(macro prefixes are ``NAME`` in upper case).

**Captured constants** (numpy arrays ``f`` closes over) are embedded in the object as read-only
64-byte aligned data, bit for bit the snapshot taken when ``f`` was traced, and the exported
function passes them to the kernel itself: the C caller never sees them (unlike
``grad.address``, whose kernel takes them as arguments). Changing the array in Python
afterwards changes nothing; export again.

**Dynamic-length arguments** (``dynamic_argnums``) are supported with an explicit length: the
signature gains one ``int64_t lenK`` per such argument (in argument order) after the argument
pointers, the number of rows actually passed (``1 <= len <= NAME_ARGi_CAPACITY``, the capacity
the gradient was compiled for; ``NAME_ARGi_ROW_SIZE`` elements per row).

**Status** (the return value): ``0`` success; ``k > 0``: guard ``k`` failed — Python control
flow on a traced value (``if x[0] > 0:``, ``range(int(x[0]))``, a ``while_loop`` reaching
``max_steps``) goes another way for this input than for the example the gradient was compiled
for, so the compiled code does not compute ``f`` there. The header lists each guard's source
line; the Python runtime would recompile, C cannot: export a variant for that branch (compile
with an example taking it) or write ``f`` branch-free (``tapejit.where``). ``-1``
(``NAME_BAD_LENGTH``, only with dynamic-length arguments): a length outside ``[1, capacity]``.
On any non-zero status nothing was written to ``value`` or the gradients.

**Threads.** The code is re-entrant and keeps no state between calls (the Python runtime's
loop-iteration counters are left out of exported code): concurrent calls are safe as long as
each uses its own workspace and outputs. It never allocates memory.

**Errors.** ``ValueError`` for a ``name`` that is not a C identifier; an ``OSError`` of the
original kind (``PermissionError``, ``NotADirectoryError``, ``FileExistsError`` ...) naming the
path when the files cannot be written; :class:`SharedLibraryError` (a ``RuntimeError``) when
``shared=True`` and no C compiler is found or linking fails — the object and header are written
first and the error's ``result`` holds their paths.
"""

from __future__ import annotations

import errno
import math
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..frontend import tracing
from ..codegen import aot, blas

if TYPE_CHECKING:
    from .variant import Variant

#: The workspace's required alignment in bytes (generated code uses aligned vector accesses).
WORKSPACE_ALIGN = 64

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: C (C23) and C++ keywords and alternative tokens: not usable as the exported function's name.
_RESERVED = frozenset(
    """
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue
    co_await co_return co_yield decltype default delete do double dynamic_cast else enum
    explicit export extern false float for friend goto if inline int long mutable namespace new
    noexcept not not_eq nullptr operator or or_eq private protected public register
    reinterpret_cast requires restrict return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid typename
    typeof typeof_unqual union unsigned using virtual void volatile wchar_t while xor xor_eq
    _Alignas _Alignof _Atomic _BitInt _Bool _Complex _Decimal128 _Decimal32 _Decimal64 _Generic
    _Imaginary _Noreturn _Static_assert _Thread_local main
    """.split()
)


@dataclass(frozen=True)
class ExportedGradient:
    """What :func:`export_variant` wrote: the C symbol ``name``, the ``object`` file, the
    ``header``, the ``shared`` library (``None`` unless asked for), and the sizes the caller
    needs (``workspace_bytes``) or may want to know (``constants_bytes`` embedded)."""

    name: str
    object: Path
    header: Path
    shared: Path | None
    workspace_bytes: int
    constants_bytes: int


class SharedLibraryError(RuntimeError):
    """``shared=True`` could not link the shared library (no C compiler, or the link failed).
    ``result`` is the :class:`ExportedGradient` of the object and header, which were written."""

    def __init__(self, message: str, result: ExportedGradient):
        super().__init__(message)
        self.result = result


def check_name(name: object) -> str:
    """``name`` if it can be the exported C function's name, else ``ValueError``."""
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ValueError(
            f"export: name must be a C identifier (letters, digits and '_', not starting with a "
            f"digit), got {name!r}; pass name='...' to choose the exported symbol's name"
        )
    if name in _RESERVED:
        raise ValueError(f"export: name {name!r} is a C/C++ keyword or 'main'; choose another")
    return name


def _destination(path: str | os.PathLike, name: str) -> tuple[Path, str]:
    """(directory, file stem) of the files to write (see the module docstring)."""
    raw = os.fspath(path)
    if not isinstance(raw, str):
        raw = os.fsdecode(raw)
    if not raw:
        raise ValueError("export: path is empty; pass a directory or a file stem")
    p = Path(raw)
    if not raw.endswith((os.sep, "/")) and not p.is_dir():
        for suffix in (".o", ".h", ".so"):
            if p.name.endswith(suffix) and len(p.name) > len(suffix):
                return p.parent, p.name[: -len(suffix)]
    return p, name


def _os_error(e: OSError, what: str, where: Path) -> OSError:
    """``e`` again, of the same kind, with a message that names what was being written."""
    reason = e.strerror or str(e)
    err = type(e)(e.errno, f"export: cannot write {what} to {where}: {reason}", str(where))
    return err


def _write(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` atomically (a temporary file renamed over it), so a build
    reading the file never sees half of it."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise _os_error(e, "the exported gradient", target) from e


def _dims(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _comment(text: str) -> str:
    """``text`` safe inside a C block comment."""
    return text.replace("*/", "* /").replace("\n", " ")


def header_text(variant: "Variant", name: str, code: aot.ObjectCode, n_consts: int) -> str:
    """The C header of an exported gradient (see the module docstring)."""
    sig = variant.signature
    up = name.upper()
    guard = f"TAPEJIT_EXPORT_{up}_H"
    dyn = sorted(sig.dynamic)
    grads_of = {a: j for j, a in enumerate(sig.argnums)}

    params = [f"const double *arg{i}" for i in range(len(sig.shapes))]
    params += [f"int64_t len{k}" for k in range(len(dyn))]
    params += ["double *value"] + [f"double *grad{j}" for j in range(len(sig.argnums))]
    params += ["void *workspace"]
    decl = f"int32_t {name}(" + ", ".join(params) + ");"
    if len(decl) > 90:  # one parameter per line
        indent = " " * len(f"int32_t {name}(")
        decl = f"int32_t {name}(" + f",\n{indent}".join(params) + ");"

    L: list[str] = []
    add = L.append
    add(
        f"/* {name}.h: the gradient of {_comment(variant.name)}, compiled ahead of time by tapejit."
    )
    add(" *")
    for line in decl.splitlines():
        add(f" *   {line}")
    add(" *")
    add(f" * Computes value = {_comment(variant.name)}(arg0, ...) and its gradient with respect to")
    add(
        " * argument(s) " + ", ".join(map(str, sig.argnums)) + " in one call. Link with "
        f"{name}.o and -lm (or with lib{name}.so)."
    )
    add(" *")
    add(" * Arguments: C-contiguous float64 (double) arrays, 8-byte aligned, read only; a scalar")
    add(" * is a pointer to one double.")
    for i, shape in enumerate(sig.shapes):
        size = math.prod(shape)
        if i in sig.dynamic:
            cap = sig.dynamic[i]
            k = dyn.index(i)
            row = math.prod(shape[1:])
            add(
                f" *   arg{i}: argument {i}, shape (len{k}, {', '.join(map(str, shape[1:]))})"
                f" with 1 <= len{k} <= {cap} (a dynamic length; {row} double(s) per row,"
                f" compiled capacity {size} doubles); not differentiated"
            )
        else:
            d = f"gradient in grad{grads_of[i]}" if i in grads_of else "not differentiated"
            add(f" *   arg{i}: argument {i}, shape {_dims(shape)}, {size} double(s); {d}")
    for k, i in enumerate(dyn):
        add(f" *   len{k}: the number of rows of arg{i} (int64_t)")
    add(" *")
    add(" * Outputs: written only when the call returns 0; must not overlap the arguments or")
    add(" * each other; C-contiguous, 8-byte aligned.")
    add(f" *   value: one double, {_comment(variant.name)} at the arguments")
    for j, (a, shape) in enumerate(zip(sig.argnums, sig.grad_shapes)):
        add(f" *   grad{j}: d value / d arg{a}, shape {_dims(shape)}, {math.prod(shape)} double(s)")
    add(" *")
    add(
        f" * workspace: at least {up}_WORKSPACE_BYTES ({code.workspace_bytes}) bytes, aligned to"
        f" {WORKSPACE_ALIGN} bytes"
    )
    add(" * (e.g. aligned_alloc(64, size rounded up to 64)); its contents on entry do not matter;")
    add(" * may be NULL when the size is 0.")
    add(" *")
    add(" * Returns (nothing is written to value or the gradients unless it returns 0):")
    add(" *    0  success")
    if variant.guards:
        add(
            " *   k > 0: guard k failed: for this input, Python control flow in the traced function"
        )
        add(" *      goes another way than for the example it was compiled for, so this code does")
        add(" *      not compute the function there (export a gradient compiled for that branch,")
        add(" *      or make the code branch-free with tapejit.where). The guards, by number:")
        runs: list[list] = []  # consecutive guards of one source and outcome (a loop's): one line
        for k, (_, expected, where) in enumerate(variant.guards, start=1):
            if runs and runs[-1][2:] == [expected, where]:
                runs[-1][1] = k
            else:
                runs.append([k, k, expected, where])
        for first, last, expected, where in runs:
            if tracing.is_max_steps_site(where):
                what = "the loop stopped at max_steps with its condition still true"
            else:
                what = f"compiled for the condition being {expected}"
            number = f"{first:2d}" if first == last else f"{first}-{last}"
            add(f" *   {number}  {_comment(where)}:")
            add(f" *       {what}")
    else:
        add(" *   (no guards: no other status is possible)" if not dyn else " *   (no guards)")
    if dyn:
        add(f" *   -1  {up}_BAD_LENGTH: a length argument outside [1, capacity]")
    add(" *")
    add(" * Thread safety: re-entrant, no state kept between calls, no memory allocated;")
    add(" * concurrent calls are safe when each has its own workspace and outputs.")
    if n_consts:
        add(
            f" * Captured constants: {n_consts} array(s), {code.constants_bytes} bytes, embedded in"
        )
        add(f" * {name}.o (the snapshot taken when the function was traced).")
    add(" */")
    add(f"#ifndef {guard}")
    add(f"#define {guard}")
    add("")
    add("#include <stdint.h>")
    add("")
    add(f"#define {up}_N_ARGS {len(sig.shapes)}")
    for i, shape in enumerate(sig.shapes):
        add(f"#define {up}_ARG{i}_SIZE {math.prod(shape)}")
        if i in sig.dynamic:
            add(f"#define {up}_ARG{i}_CAPACITY {sig.dynamic[i]}")
            add(f"#define {up}_ARG{i}_ROW_SIZE {math.prod(shape[1:])}")
    add(f"#define {up}_N_GRADS {len(sig.argnums)}")
    for j, (a, shape) in enumerate(zip(sig.argnums, sig.grad_shapes)):
        add(f"#define {up}_GRAD{j}_SIZE {math.prod(shape)}")
        add(f"#define {up}_GRAD{j}_ARG {a}")
    add(f"#define {up}_WORKSPACE_BYTES {code.workspace_bytes}")
    add(f"#define {up}_WORKSPACE_ALIGN {WORKSPACE_ALIGN}")
    add(f"#define {up}_N_GUARDS {len(variant.guards)}")
    add(f"#define {up}_OK 0")
    if dyn:
        add(f"#define {up}_BAD_LENGTH ({aot.BAD_LENGTH})")
    add("")
    add("#ifdef __cplusplus")
    add('extern "C" {')
    add("#endif")
    add("")
    add(decl)
    add("")
    add("#ifdef __cplusplus")
    add("}")
    add("#endif")
    add("")
    add(f"#endif /* {guard} */")
    return "\n".join(L) + "\n"


def compiler() -> list[str] | None:
    """The C compiler command (``$CC``, default ``cc``), or ``None`` when it is not found."""
    cmd = shlex.split(os.environ.get("CC", "") or "cc")
    if not cmd or shutil.which(cmd[0]) is None:
        return None
    return cmd


def link_shared(obj: Path, so: Path) -> None:
    """Link ``obj`` into the shared library ``so`` with the system C compiler; ``RuntimeError``
    naming the command when there is none or it fails."""
    cc = compiler()
    if cc is None:
        raise RuntimeError(
            f"no C compiler found (looked for {os.environ.get('CC') or 'cc'!r}; set CC)"
        )
    cmd = [*cc, "-shared", "-o", str(so), str(obj), "-lm"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(f"{shlex.join(cmd)} failed: {e}") from e
    if r.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(cmd)} failed (exit status {r.returncode}): {r.stderr.strip()}"
        )


def export_variant(
    variant: "Variant", path: str | os.PathLike, name: str, shared: bool = False
) -> ExportedGradient:
    """Write ``variant`` as ``NAME.o`` and ``NAME.h`` (and ``libNAME.so`` with ``shared``)
    under ``path``; returns the paths written. See the module docstring for the files, the C
    signature, constants, guards, status codes, threads and the errors raised."""
    name = check_name(name)
    if variant.program:
        raise ValueError(
            "export writes gradients (compile(..., mode='grad')); a transformation's program "
            "(jvp, vjp, a Jacobian, an HVP, a Hessian) has no C header layout yet"
        )
    llvm = variant.ir("llvm")
    lapack = ((blas.SYEVD_SYMBOL, "np.linalg.eigh"), (blas.GESDD_SYMBOL, "np.linalg.svd"))
    for symbol, what in lapack:
        if symbol in llvm:
            raise ValueError(
                f"export: this gradient calls LAPACK ({what}) through scipy at run time, which "
                "an exported object file cannot bind; compute the decomposition outside the "
                "exported function, or pickle the compiled gradient instead"
            )
    directory, stem = _destination(path, name)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _os_error(e, "the exported gradient", directory) from e
    if not directory.is_dir():
        raise NotADirectoryError(
            errno.ENOTDIR,
            f"export: cannot write the exported gradient to {directory}: not a directory",
            str(directory),
        )
    if not os.access(directory, os.W_OK):
        raise PermissionError(
            errno.EACCES,
            f"export: cannot write the exported gradient to {directory}: permission denied",
            str(directory),
        )

    sig = variant.signature
    prog = variant.stages()["plan"]
    capacities = [sig.dynamic[i] for i in sorted(sig.dynamic)]
    code = aot.object_code(prog, name, len(sig.shapes), capacities)
    n_consts = len(aot.constants_of(prog))
    if len(prog.graph.outputs) != 1 + len(sig.argnums):
        raise AssertionError("the program must output the value and one gradient per argnum")

    obj = directory / f"{stem}.o"
    hdr = directory / f"{stem}.h"
    _write(obj, code.data)
    _write(hdr, header_text(variant, name, code, n_consts).encode())
    result = ExportedGradient(name, obj, hdr, None, code.workspace_bytes, code.constants_bytes)
    if not shared:
        return result
    so = directory / f"lib{stem}.so"
    try:
        link_shared(obj, so)
    except RuntimeError as e:
        raise SharedLibraryError(
            f"export: could not build {so}: {e}. {obj} and {hdr} were written; link them "
            f"yourself, e.g. cc -shared -o {so} {obj} -lm",
            result,
        ) from e
    return ExportedGradient(name, obj, hdr, so, code.workspace_bytes, code.constants_bytes)
