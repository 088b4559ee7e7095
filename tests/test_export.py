"""Ahead-of-time export (``grad.export``, :mod:`tapejit.runtime.export`): the object file and
header are compiled into C programs with the system C compiler, run on inputs written by the
test, and their value and gradients compared with the Python gradient's; the shared library is
called through ctypes; guards, two gradients in one program, dynamic lengths, symbols, errors,
and the example in ``examples/aot``."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj
from tapejit.runtime.export import SharedLibraryError, export_variant

ROOT = Path(__file__).resolve().parents[1]
SENTINEL = -7.25  # what outputs hold before a call; still there after a failed one


def _cc() -> str:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no system C compiler (cc) to build the C test programs")
    return cc


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}:\n{r.stdout}\n{r.stderr}"
    return r


# -- models -------------------------------------------------------------------------------------
def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


_rng = np.random.default_rng(7)
W = _rng.standard_normal((3, 4))
C = _rng.standard_normal(4)


def layer(a, b, s):
    """Captured constants W and C; a scalar argument s that is not differentiated."""
    h = np.tanh(a @ W + b * C)
    return s * np.sum(h * h) + np.sum(np.sin(a)) + np.sum(np.fmod(b, 0.7))


MASK = np.random.default_rng(8).random(50) > 0.5


def masked(x):
    """A captured bool constant (a mask) next to float ones."""
    return np.sum(np.where(MASK, np.sin(x) * np.linspace(0, 1, 50), x * x))


def branchy(x):
    if x[0] > 0:  # the guard
        return np.sum(x * x)
    return np.sum(np.sin(x))


def rolled(x):  # native loops (while_loop, scan over a captured constant): counters, memset
    def body(v):
        inner, _ = tj.scan(lambda h, r: (np.tanh(h * r + v), None), v, W)
        return 0.5 * inner + np.sin(v)

    v = tj.while_loop(lambda v: np.sum(v * v) > 0.1, body, x, max_steps=64)
    return np.sum(v**2)


def scan_loss(p, seq):
    """A dynamic-length argument: seq has any number of rows (dynamic_argnums=1)."""

    def step(h, row):
        return np.tanh(p[0] * h + p[1] * row[0] + p[2] * row[1]), None

    h, _ = tj.scan(step, 0.0, seq)
    return h * h


def _eam_case():
    x = np.random.default_rng(1).random(100)
    return tj.compile(eam, x), (x,)


def _layer_case():
    r = np.random.default_rng(2)
    args = (r.standard_normal(3), r.standard_normal(4), 1.5)
    return tj.compile(layer, *args, argnums=(1, 0)), args


# -- a generic C driver ---------------------------------------------------------------------------
def _driver(specs: list[tuple[str, int, int, int]]) -> str:
    """C source calling each exported gradient ``(name, n_args, n_lengths, n_grads)`` in turn:
    it reads every argument (then each length, as a double) from the binary file argv[1] and
    writes, per gradient, the status, the value and the gradients to argv[2]. Outputs start as
    SENTINEL; sizes come from the headers' macros."""
    L = ["#include <stdio.h>", "#include <stdlib.h>", "#include <stdint.h>"]
    L += [f'#include "{name}.h"' for name, *_ in specs]
    L += [
        "static void get(FILE *f, double *p, size_t n) {",
        '    if (fread(p, sizeof(double), n, f) != n) { fputs("short input\\n", stderr); exit(3); }',
        "}",
        "static void put(FILE *f, const double *p, size_t n) { fwrite(p, sizeof(double), n, f); }",
        "static void *workspace(size_t bytes) {",
        "    bytes = (bytes + 63) / 64 * 64;",
        "    return bytes ? aligned_alloc(64, bytes) : NULL;",
        "}",
        "int main(int argc, char **argv) {",
        "    if (argc != 3) return 2;",
        '    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");',
        "    if (!in || !out) return 2;",
    ]
    for name, n_args, n_len, n_grads in specs:
        up = name.upper()
        call = []
        for i in range(n_args):
            L.append(f"    static double {name}_a{i}[{up}_ARG{i}_SIZE];")
            L.append(f"    get(in, {name}_a{i}, {up}_ARG{i}_SIZE);")
            call.append(f"{name}_a{i}")
        for k in range(n_len):
            L.append(f"    double {name}_l{k}; get(in, &{name}_l{k}, 1);")
            call.append(f"(int64_t){name}_l{k}")
        L.append(f"    double {name}_v = {SENTINEL};")
        call.append(f"&{name}_v")
        for j in range(n_grads):
            L.append(f"    static double {name}_g{j}[{up}_GRAD{j}_SIZE];")
            L.append(
                f"    for (int i = 0; i < {up}_GRAD{j}_SIZE; i++) {name}_g{j}[i] = {SENTINEL};"
            )
            call.append(f"{name}_g{j}")
        L.append(f"    void *{name}_ws = workspace({up}_WORKSPACE_BYTES);")
        call.append(f"{name}_ws")
        L.append(f"    double {name}_st = (double){name}({', '.join(call)});")
        L.append(f"    put(out, &{name}_st, 1); put(out, &{name}_v, 1);")
        for j in range(n_grads):
            L.append(f"    put(out, {name}_g{j}, {up}_GRAD{j}_SIZE);")
        L.append(f"    free({name}_ws);")
    L += ["    fclose(in); fclose(out);", "    return 0;", "}"]
    return "\n".join(L) + "\n"


def _build(tmp: Path, specs, objects: list[Path], include: Path, cc: str) -> Path:
    src = tmp / "driver.c"
    src.write_text(_driver(specs))
    exe = tmp / "driver"
    cmd = [
        cc,
        "-std=c11",
        "-O1",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-I{include}",
        "-o",
        str(exe),
        str(src),
        *map(str, objects),
        "-lm",
    ]
    _run(cmd)
    return exe


def _call(exe: Path, tmp: Path, inputs: list[np.ndarray]) -> np.ndarray:
    np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in inputs]).tofile(
        tmp / "in.bin"
    )
    _run([str(exe), str(tmp / "in.bin"), str(tmp / "out.bin")])
    return np.fromfile(tmp / "out.bin")


def _split(raw: np.ndarray, grad_shapes) -> tuple[int, float, list[np.ndarray], np.ndarray]:
    """(status, value, gradients, rest) of one gradient's record in a driver's output."""
    status, value, k, grads = int(raw[0]), raw[1], 2, []
    for s in grad_shapes:
        n = int(np.prod(s))
        grads.append(raw[k : k + n].reshape(s))
        k += n
    return status, value, grads, raw[k:]


def _check(grad, args, status, value, grads):
    want_v, want_g = grad.value_and_grad(*args)
    want_g = want_g if isinstance(want_g, tuple) else (want_g,)
    assert status == 0
    np.testing.assert_allclose(value, want_v, rtol=1e-12)
    assert len(grads) == len(want_g)
    for g, w in zip(grads, want_g):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12, atol=1e-300)


# -- tests ----------------------------------------------------------------------------------------
def test_eam_from_c_matches_python(tmp_path):
    cc = _cc()
    grad, (x,) = _eam_case()
    files = grad.export(tmp_path / "out")
    assert files.object == tmp_path / "out" / "eam.o" and files.object.is_file()
    assert files.header == tmp_path / "out" / "eam.h" and files.shared is None
    h = files.header.read_text()
    assert "#define EAM_WORKSPACE_BYTES 0" in h and "#define EAM_ARG0_SIZE 100" in h
    assert "int32_t eam(const double *arg0, double *value, double *grad0, void *workspace);" in h
    exe = _build(tmp_path, [("eam", 1, 0, 1)], [files.object], files.header.parent, cc)
    for seed in range(3):  # the example and other inputs
        xs = x if seed == 0 else np.random.default_rng(seed).normal(size=100)
        status, value, grads, rest = _split(_call(exe, tmp_path, [xs]), [(100,)])
        assert rest.size == 0
        _check(grad, (xs,), status, value, grads)


def test_constants_and_tuple_argnums_from_c(tmp_path):
    cc = _cc()
    grad, _ = _layer_case()
    assert grad.constants, "the model must capture constants for this test"
    files = grad.export(tmp_path)
    h = files.header.read_text()
    assert files.constants_bytes >= W.nbytes
    decl = " ".join(h.split('extern "C" {\n#endif')[1].split(";")[0].split()) + ";"
    assert decl == (
        "int32_t layer(const double *arg0, const double *arg1, const double *arg2, "
        "double *value, double *grad0, double *grad1, void *workspace);"
    )
    assert "#define LAYER_GRAD0_ARG 1" in h and "#define LAYER_GRAD1_ARG 0" in h
    exe = _build(tmp_path, [("layer", 3, 0, 2)], [files.object], tmp_path, cc)
    r = np.random.default_rng(5)
    for _ in range(3):
        a = (r.standard_normal(3), r.standard_normal(4), float(r.uniform(0.5, 2)))
        status, value, grads, _ = _split(_call(exe, tmp_path, list(a)), [(4,), (3,)])
        _check(grad, a, status, value, grads)


def test_bool_constants_are_embedded(tmp_path):
    cc = _cc()
    x = np.random.default_rng(6).standard_normal(50)
    grad = tj.compile(masked, x)
    assert any(c.dtype == np.bool_ for c in grad.constants)
    files = grad.export(tmp_path)
    exe = _build(tmp_path, [("masked", 1, 0, 1)], [files.object], tmp_path, cc)
    status, value, grads, _ = _split(_call(exe, tmp_path, [x]), [(50,)])
    _check(grad, (x,), status, value, grads)


def test_shared_library_through_ctypes(tmp_path):
    _cc()
    grad, _ = _layer_case()
    files = grad.export(tmp_path / "layer_grad.o", shared=True)
    assert files.object == tmp_path / "layer_grad.o"
    assert files.header == tmp_path / "layer_grad.h"
    assert files.shared == tmp_path / "liblayer_grad.so" and files.shared.is_file()
    lib = ctypes.CDLL(str(files.shared))
    fn = lib.layer
    fn.restype = ctypes.c_int32
    fn.argtypes = [ctypes.c_void_p] * 7
    a, b, s = np.random.default_rng(3).standard_normal(3), np.ones(4), np.array(0.75)
    value = np.full((), SENTINEL)
    gb, ga = np.empty(4), np.empty(3)
    raw = np.zeros(files.workspace_bytes + 64, np.uint8)
    ws = raw[(-raw.ctypes.data) % 64 :]
    ptrs = [v.ctypes.data for v in (a, b, s, value, gb, ga)]
    assert fn(*ptrs, ws.ctypes.data) == 0
    _check(grad, (a, b, float(s)), 0, float(value), [gb, ga])


def test_concurrent_calls_with_a_workspace_each(tmp_path):
    """ctypes releases the GIL around the call: threads run the exported code at once."""
    import threading

    _cc()
    grad, _ = _layer_case()
    files = grad.export(tmp_path, shared=True)
    assert files.workspace_bytes > 0
    fn = ctypes.CDLL(str(files.shared)).layer
    fn.restype, fn.argtypes = ctypes.c_int32, [ctypes.c_void_p] * 7
    r = np.random.default_rng(11)
    ins = [(r.standard_normal(3), r.standard_normal(4), np.array(1.0 + k)) for k in range(4)]
    want = [grad.value_and_grad(a, b, float(s)) for a, b, s in ins]
    errors = []

    def work(k: int) -> None:
        raw = np.zeros(files.workspace_bytes + 64, np.uint8)
        ws = raw[(-raw.ctypes.data) % 64 :]
        value, gb, ga = np.zeros(()), np.zeros(4), np.zeros(3)
        ptrs = [v.ctypes.data for v in (*ins[k], value, gb, ga, ws)]
        v_want, (gb_want, ga_want) = want[k]
        for _ in range(2000):
            st = fn(*ptrs)
            if (
                st != 0
                or value != v_want
                or not (np.array_equal(gb, gb_want) and np.array_equal(ga, ga_want))
            ):
                errors.append((k, st, float(value), gb.copy(), ga.copy()))
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_failed_guard_returns_its_number_and_writes_nothing(tmp_path):
    cc = _cc()
    x = np.array([0.5, -1.0, 2.0])
    grad = tj.compile(branchy, x)
    files = grad.export(tmp_path)
    h = files.header.read_text()
    assert "#define BRANCHY_N_GUARDS 1" in h
    line = next(
        i
        for i, t in enumerate(Path(__file__).read_text().splitlines(), 1)
        if "if x[0] > 0:  # the guard" in t
    )
    assert f"test_export.py:{line}" in h
    exe = _build(tmp_path, [("branchy", 1, 0, 1)], [files.object], tmp_path, cc)
    status, value, grads, _ = _split(_call(exe, tmp_path, [x + 1.0]), [(3,)])
    _check(grad, (x + 1.0,), status, value, grads)
    status, value, grads, _ = _split(_call(exe, tmp_path, [-x]), [(3,)])
    assert status == 1
    assert value == SENTINEL and np.all(grads[0] == SENTINEL)


def clipped_cubes(x):
    e = 0.0
    for i in range(len(x)):
        e = e + max(x[i], 0.0) ** 3  # a guard per iteration, re-rolled into one vector guard
    return e


def test_a_rolled_loop_guard_returns_the_number_of_the_failing_element(tmp_path, unconverted):
    cc = _cc()
    x = np.random.default_rng(8).uniform(0.1, 1.0, 40)
    grad = tj.compile(clipped_cubes, x, cache=False)
    assert grad.stats["reroll"]["guards"] == 40
    files = grad.export(tmp_path)
    h = files.header.read_text()
    assert "#define CLIPPED_CUBES_N_GUARDS 40" in h
    assert " *   1-40  " in h  # one line for the loop's guards
    exe = _build(tmp_path, [("clipped_cubes", 1, 0, 1)], [files.object], tmp_path, cc)
    status, value, grads, _ = _split(_call(exe, tmp_path, [x]), [(40,)])
    _check(grad, (x,), status, value, grads)
    y = x.copy()
    y[13] = -0.5
    status, value, grads, _ = _split(_call(exe, tmp_path, [y]), [(40,)])
    assert status == 14
    assert value == SENTINEL and np.all(grads[0] == SENTINEL)


def test_two_exported_gradients_link_into_one_program(tmp_path):
    cc = _cc()
    g1, (x,) = _eam_case()
    g2, args = _layer_case()
    g3 = tj.compile(eam, np.random.default_rng(4).random(7))  # same kernel names, other shapes
    f1 = g1.export(tmp_path / "a")
    f2 = g2.export(tmp_path / "b")
    f3 = g3.export(tmp_path / "c", name="eam7")
    inc = tmp_path / "inc"
    inc.mkdir()
    for f in (f1, f2, f3):
        shutil.copy(f.header, inc)
    specs = [("eam", 1, 0, 1), ("layer", 3, 0, 2), ("eam7", 1, 0, 1)]
    exe = _build(tmp_path, specs, [f1.object, f2.object, f3.object], inc, cc)
    x7 = np.linspace(-1, 1, 7)
    raw = _call(exe, tmp_path, [x, *args, x7])
    st, v, gs, raw = _split(raw, [(100,)])
    _check(g1, (x,), st, v, gs)
    st, v, gs, raw = _split(raw, [(4,), (3,)])
    _check(g2, args, st, v, gs)
    st, v, gs, raw = _split(raw, [(7,)])
    _check(g3, (x7,), st, v, gs)
    assert raw.size == 0


def _nm(*args: str) -> list[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    return _run([nm, *args]).stdout.split()


@pytest.mark.parametrize("model", ["eam", "layer", "rolled"])
def test_object_exports_one_symbol_and_needs_only_libc_and_libm(tmp_path, model):
    cc = _cc()
    if model == "eam":
        grad, _ = _eam_case()
    elif model == "layer":
        grad, _ = _layer_case()
    else:
        grad = tj.compile(rolled, np.random.default_rng(0).random(4))
    files = grad.export(tmp_path)
    defined = _nm("-g", "--defined-only", "-j", str(files.object))
    assert defined == [model]
    # every undefined symbol resolves in libc/libm alone: no libgcc, compiler-rt or Python
    _run(
        [
            cc,
            "-shared",
            "-nodefaultlibs",
            "-Wl,-z,defs",
            "-o",
            str(tmp_path / "t.so"),
            str(files.object),
            "-lm",
            "-lc",
        ]
    )
    # and no writable state is left that concurrent calls could race on (loop counters)
    assert not any(".iterations" in s for s in _nm(str(files.object)))


def test_dynamic_length_arguments_take_an_explicit_length(tmp_path):
    cc = _cc()
    r = np.random.default_rng(9)
    p, seq = r.standard_normal(3) * 0.5, r.standard_normal((5, 2))
    grad = tj.compile(scan_loss, p, seq, dynamic_argnums=1)
    files = grad.export(tmp_path)
    h = files.header.read_text()
    assert "int64_t len0" in h and "#define SCAN_LOSS_BAD_LENGTH (-1)" in h
    cap = int(h.split("#define SCAN_LOSS_ARG1_CAPACITY ")[1].split()[0])
    assert cap >= 5
    exe = _build(tmp_path, [("scan_loss", 2, 1, 1)], [files.object], tmp_path, cc)
    padded = np.zeros((cap, 2))
    for n in (1, 3, 5, cap):
        padded[:] = 0.0
        padded[:n] = r.standard_normal((n, 2))
        status, value, grads, _ = _split(_call(exe, tmp_path, [p, padded, n]), [(3,)])
        _check(grad, (p, padded[:n].copy()), status, value, grads)
    for n in (0, -2, cap + 1):
        status, value, grads, _ = _split(_call(exe, tmp_path, [p, padded, n]), [(3,)])
        assert status == -1 and value == SENTINEL and np.all(grads[0] == SENTINEL)


def test_header_compiles_as_cplusplus_and_strict_c(tmp_path):
    cc = _cc()
    grad, _ = _layer_case()
    files = grad.export(tmp_path)
    src = tmp_path / "twice.c"
    src.write_text(
        '#include "layer.h"\n#include "layer.h"\nint main(void) { return LAYER_N_ARGS - 3; }\n'
    )
    _run(
        [
            cc,
            "-std=c99",
            "-pedantic",
            "-Wall",
            "-Werror",
            f"-I{tmp_path}",
            "-fsyntax-only",
            str(src),
        ]
    )
    cxx = shutil.which("c++")
    if cxx is not None:
        cpp = tmp_path / "use.cpp"
        cpp.write_text(
            '#include "layer.h"\nint main() { return layer(0, 0, 0, 0, 0, 0, 0) == 0; }\n'
        )
        _run(
            [
                cxx,
                "-Wall",
                "-Werror",
                f"-I{tmp_path}",
                "-o",
                str(tmp_path / "use"),
                str(cpp),
                str(files.object),
                "-lm",
            ]
        )


def test_bad_paths_raise_os_errors_naming_the_path(tmp_path):
    grad, _ = _eam_case()
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    for bad in (blocker / "x", blocker / "x" / "eam.o", str(blocker) + "/"):
        with pytest.raises(OSError) as e:
            grad.export(bad)
        assert str(blocker) in str(e.value)
    with pytest.raises(OSError, match="hostname"):
        grad.export("/etc/hostname/x")
    if os.geteuid() != 0:  # root ignores permissions
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            with pytest.raises(PermissionError, match=str(ro)):
                grad.export(ro)
        finally:
            ro.chmod(0o700)


@pytest.mark.parametrize("name", ["1eam", "e-am", "e am", "", "int", "main", "é", 3, "a.b"])
def test_bad_names_raise_value_error(tmp_path, name):
    grad, _ = _eam_case()
    with pytest.raises(ValueError, match="name"):
        export_variant(grad._primary, tmp_path, name)
    assert not any(tmp_path.iterdir())


def test_missing_compiler_for_shared_raises_after_writing_the_object(tmp_path, monkeypatch):
    grad, _ = _eam_case()
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(SharedLibraryError, match="no C compiler") as e:
        grad.export(tmp_path, shared=True)
    assert e.value.result.object.is_file() and e.value.result.header.is_file()
    assert not (tmp_path / "libeam.so").exists()


def test_the_aot_example_runs_end_to_end(tmp_path):
    cc = _cc()
    ex = ROOT / "examples" / "aot"
    out = tmp_path / "build"
    r = _run([sys.executable, str(ex / "export_eam.py"), str(out)])
    py_line = next(t for t in r.stdout.splitlines() if t.startswith("python:"))
    _run(
        [
            cc,
            "-O2",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{out}",
            "-o",
            str(out / "eam_demo"),
            str(ex / "main.c"),
            str(out / "eam.o"),
            "-lm",
        ]
    )
    c_line = _run([str(out / "eam_demo")]).stdout.strip()
    want = [float(t.split("=")[1]) for t in py_line.split(":", 1)[1].split(",")]
    got = [float(t.split("=")[1]) for t in c_line.split(":", 1)[1].split(",")]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_export_refuses_a_transformation_clearly(tmp_path):
    def f(x):
        return np.sum(np.exp(x))

    h = tj.compile(f, np.ones(4), mode="hvp", cache=False)
    with pytest.raises(ValueError, match="export writes gradients"):
        h.export(tmp_path)
    assert not list(tmp_path.iterdir())  # nothing written


def factored(a):  # above the composition size: the lu and cholesky primitives
    s = a @ a.T + np.eye(a.shape[0])
    return np.sum(np.linalg.solve(a, np.arange(6.0))) + np.sum(np.log(np.diag(np.linalg.cholesky(s))))


def test_factorisations_run_in_an_exported_object(tmp_path):
    """An object file cannot bind scipy's LAPACK: it calls its own stand-ins for dgetrf,
    dpotrf and dtrsm (codegen/lower/fallback.py), with the same results up to rounding."""
    cc = _cc()
    a = np.random.default_rng(8).standard_normal((6, 6)) + 3 * np.eye(6)
    grad = tj.compile(factored, a)
    files = grad.export(tmp_path)
    exe = _build(tmp_path, [("factored", 1, 0, 1)], [files.object], tmp_path, cc)
    for seed in range(3):
        x = a if seed == 0 else a + 0.1 * np.random.default_rng(seed).standard_normal((6, 6))
        status, value, (g,), _ = _split(_call(exe, tmp_path, [x]), [(6, 6)])
        want_v, want_g = grad.value_and_grad(x)
        assert status == 0
        np.testing.assert_allclose(value, want_v, rtol=1e-11)
        np.testing.assert_allclose(g, want_g, rtol=1e-9, atol=1e-12)
