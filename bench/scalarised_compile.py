"""Cold compiles of the scalarised models (``bench/scalarised_models.py``), their gradient
against the hand-written C of ``bench/scalarised_c.py``, and recompiles on new data.

    python bench/scalarised_compile.py [--sizes all|small|large] [--budget SECONDS]
                                       [--models morse,springs,...] [--steps 1000] [--json PATH]

For each model and size, a fresh subprocess with an empty temporary ``TAPEJIT_CACHE_DIR``:

* **compile s**: ``tapejit.compile(f, x)``, cold (nothing cached on disk or in the process);
* **gradient µs / C µs / ratio**: one ``grad(x, out=g)`` call from Python against one call of
  the C gradient through cffi (best of 5 repeats), ratio = tapejit / C; **err**: the largest
  |tapejit - C| over the largest |C| entry;
* **workspace**: ``grad.workspace_bytes`` (the kernel's scratch per concurrent call);
* **recompiles**: compiles after the first while calling the gradient on new data — 10 inputs
  moved by up to ``Case.jitter`` per entry; for ``ljcut`` a velocity-Verlet run of ``--steps``
  steps whose forces are ``-grad(pos)`` (pairs cross the cutoff as the atoms move), with the
  number of steps at which the set of pairs inside the cutoff changed. Counted by the
  dispatcher's ``compiles`` (``tapejit/runtime/dispatch.py``), which counts every variant
  compiled, also those dropped beyond ``max_specialisations``.

A size is skipped when the model's previous size took longer than ``--budget`` seconds to
compile (default 60); a velocity-Verlet run stops when it has run for ``--budget`` seconds. A
compile that raises is reported with its error text; a subprocess is stopped after
``--timeout`` seconds, and one that crashes or times out is reported with the phases it finished
(the child prints its results after each phase). Prints the tapejit commit measured (and whether
tapejit/ has uncommitted changes) and a markdown table on standard output, progress on standard
error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

HERE = Path(__file__).resolve().parent
MARK = "SCALARISED-RESULT "


# -- the child: one model at one size ------------------------------------------------------------
def _per_call_us(fn, repeat: int = 5, min_time: float = 0.05) -> float:
    """Best of ``repeat`` timings of ``fn()``, each ``number`` calls taking at least
    ``min_time`` seconds, in µs per call."""
    number, t = 1, 0.0
    while True:
        t = timeit.timeit(fn, number=number)
        if t >= min_time or number >= 1 << 20:
            break
        number *= max(2, min(10, int(min_time / max(t, 1e-9)) + 1))
    return min([t] + timeit.repeat(fn, number=number, repeat=repeat - 1)) / number * 1e6


def _compiles(grad) -> int:
    """Variants compiled so far (the dispatcher's count; else the variants kept)."""
    d = getattr(grad, "_dispatcher", None)
    if d is not None and hasattr(d, "compiles"):
        return int(d.compiles)
    return len(grad.specialisations)


def _emit(res: dict) -> None:
    """Print ``res`` as the result so far: a crash later leaves the phases done reported."""
    print(MARK + json.dumps(res), flush=True)


def _md(grad, case, steps: int, budget: float, res: dict, dt: float = 0.002):
    """Velocity Verlet, unit masses, forces -grad(pos); stops after ``budget`` seconds. Fills
    ``res`` (emitted whenever the compile count changes, and every 100 steps); returns the last
    positions."""
    import numpy as np

    import scalarised_models as M

    rng = np.random.default_rng(7)
    pos = case.x.copy()
    vel = 0.3 * rng.standard_normal(pos.shape)
    vel -= vel.mean(axis=0)
    acc = np.empty_like(pos)
    iu = np.triu_indices(len(pos), 1)

    def inside(p):
        d = p[:, None, :] - p[None, :, :]
        return (np.einsum("ijk,ijk->ij", d, d) < M.LJ_RC2)[iu]

    before, t0 = _compiles(grad), time.perf_counter()
    grad(pos, out=acc)
    acc *= -1.0
    mask = inside(pos)
    res.update(recompiles=0, steps=0, md_s=0.0, cutoff_changes=0, moved=0.0)
    for step in range(steps):
        if time.perf_counter() - t0 > budget:
            break
        vel += 0.5 * dt * acc
        pos += dt * vel
        grad(pos, out=acc)
        acc *= -1.0
        vel += 0.5 * dt * acc
        m = inside(pos)
        recompiles = _compiles(grad) - before
        report = recompiles != res["recompiles"] or step % 100 == 99
        res.update(
            recompiles=recompiles,
            steps=step + 1,
            md_s=time.perf_counter() - t0,
            cutoff_changes=res["cutoff_changes"] + int((m != mask).any()),
            moved=float(np.max(np.linalg.norm(pos - case.x, axis=1))),
            new_data=f"velocity Verlet {step + 1} steps",
        )
        mask = m
        if report:
            _emit(res)
    return pos


def child(model: str, size, steps: int, budget: float) -> dict:
    import numpy as np

    import scalarised_c as SC
    import scalarised_models as M
    from benchutil import GCC, CCompiler

    import tapejit as tj

    case = M.build(model, size)
    res: dict = {"model": model, "label": case.label, "phase": "C reference"}
    ref = None
    if GCC is not None:
        cc = CCompiler(Path(tempfile.mkdtemp(prefix="scalarised-c-")))
        ref = SC.load(cc, case)
        res["c_us"] = _per_call_us(ref)
    res["phase"] = "compile"
    _emit(res)
    t0 = time.perf_counter()
    try:
        grad = tj.compile(case.f, case.x)
    except Exception as exc:  # noqa: BLE001 - the error is the result
        res["compile_s"] = time.perf_counter() - t0
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["phase"] = "done"
        return res
    res["compile_s"] = time.perf_counter() - t0
    res["phase"] = "gradient"
    _emit(res)
    g = np.empty_like(case.x)
    grad(case.x, out=g)
    res["grad_us"] = _per_call_us(lambda: grad(case.x, out=g))
    if ref is not None:
        gc = ref.grad(case.x)
        res["err"] = float(np.max(np.abs(g - gc)) / np.max(np.abs(gc)))
    ws = getattr(grad, "workspace_bytes", None)
    res["workspace"] = int(ws) if ws is not None else None
    res["phase"] = "new data"
    _emit(res)
    try:
        if model == "ljcut":
            final = _md(grad, case, steps, budget, res)
        else:
            rng = np.random.default_rng(1)
            before = _compiles(grad)
            for _ in range(10):
                final = case.perturb(rng)
                grad(final, out=g)
            res["recompiles"] = _compiles(grad) - before
            res["new_data"] = "10 perturbed inputs"
        if ref is not None:
            gc = ref.grad(final)
            res["err_new"] = float(np.max(np.abs(grad(final) - gc)) / np.max(np.abs(gc)))
    except Exception as exc:  # noqa: BLE001
        res["new_data_error"] = f"{type(exc).__name__}: {exc}"
    res["phase"] = "done"
    return res


# -- the parent: a subprocess per (model, size), the table ---------------------------------------
def run_one(model: str, size, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="tapejit-cold-") as cache:
        env = dict(os.environ, TAPEJIT_CACHE_DIR=cache, TAPEJIT_PROGRESS="0")
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, "1")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", model, json.dumps(size),
               "--steps", str(args.steps), "--budget", str(args.budget)]  # fmt: skip
        t0 = time.perf_counter()
        try:
            done = subprocess.run(
                cmd, env=env, capture_output=True, text=True, timeout=args.timeout, check=False
            )
            out, err, rc = done.stdout, done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            out, err, rc = _text(exc.stdout), _text(exc.stderr), None
        res = {"model": model, "size": size, "compile_s": time.perf_counter() - t0}
        for line in reversed(out.splitlines()):
            if line.startswith(MARK):
                res = json.loads(line[len(MARK) :])
                break
        if res.get("phase") in (None, "C reference", "compile"):  # the compile did not finish
            res["compile_s"] = time.perf_counter() - t0
        if rc is None:
            res["timeout"] = f"stopped after {args.timeout:.0f} s in phase {res.get('phase', '?')}"
        elif rc != 0 or res.get("phase") != "done":
            why = next((ln for ln in err.splitlines() if "Fatal Python error" in ln), None)
            why = why or (err.strip().splitlines() or ["no output"])[-1]
            res["crash"] = f"exit {rc} in phase {res.get('phase', '?')}: {why.strip()}"
        return res


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def _fmt(v, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def _cell(text: str, width: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def table(rows: list[dict]) -> str:
    head = ("| model | size | compile s | gradient µs | C µs | ratio | err | workspace | "
            "recompiles on new data | notes |")  # fmt: skip
    out = [head, "|" + "---|" * 10]
    for r in rows:
        notes = []
        c_us, g_us = r.get("c_us"), r.get("grad_us")
        ratio = g_us / c_us if g_us and c_us else None
        ws = r.get("workspace")
        ws_s = "n/a" if ws is None and "grad_us" in r else ("–" if ws is None else f"{ws:,} B")
        rec = r.get("recompiles")
        rec_s = "–" if rec is None else str(rec)
        if r.get("model") == "ljcut" and "steps" in r:
            rec_s += (f" in {r['steps']} MD steps ({r['md_s']:.2f} s; cutoff set changed at "
                      f"{r['cutoff_changes']} steps; max move {r['moved']:.2f})")  # fmt: skip
        elif rec is not None:
            rec_s += f" ({r['new_data']})"
        if "err_new" in r:
            notes.append(f"err on new data {r['err_new']:.1e}")
        for key in ("error", "new_data_error", "crash"):
            if key in r:
                notes.append(_cell(r[key]))
        if "timeout" in r:
            notes.append(r["timeout"])
        if "skipped" in r:
            notes.append(r["skipped"])
        compile_s = r.get("compile_s")
        if "skipped" in r:
            comp = "skipped"
        elif r.get("phase") in (None, "C reference", "compile") and "error" not in r:
            comp = ("timeout " if "timeout" in r else "crash ") + f"after {compile_s or 0:.0f} s"
        else:
            comp = ("error after " if "error" in r else "") + _fmt(compile_s, ".2f")
        out.append(
            f"| {r['model']} | {r['label']} | {comp} | {_fmt(g_us, '.2f')} | {_fmt(c_us, '.2f')} "
            f"| {_fmt(ratio, '.2f')} | {_fmt(r.get('err'), '.1e')} | {ws_s} | {rec_s} | "
            f"{'; '.join(notes)} |"
        )
    return "\n".join(out)


def tapejit_version() -> str:
    """The tapejit commit measured, and how many of its files differ from it (work in progress)."""
    repo = HERE.parent

    def git(*a: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *a], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "tapejit", "codegen").splitlines()
    flags = " ".join(f"{k}={v}" for k, v in os.environ.items() if k.startswith("TAPEJIT_"))
    text = f"tapejit {head}"
    if dirty:
        text += f" + {len(dirty)} uncommitted changes in tapejit/, codegen/"
    return text + (f"; {flags}" if flags else "")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="all", choices=["all", "small", "large"],
                   help="all sizes, or each model's first (small) or the rest (large)")  # fmt: skip
    p.add_argument("--budget", type=float, default=60.0,
                   help="skip a size when the previous one compiled slower (s)")  # fmt: skip
    p.add_argument("--models", default="", help="comma-separated models (default: all)")
    p.add_argument("--steps", type=int, default=1000, help="velocity-Verlet steps (ljcut)")
    p.add_argument("--timeout", type=float, default=1800.0, help="per subprocess (s)")
    p.add_argument("--json", default="", help="also write the results to this JSON file")
    p.add_argument("--child", nargs=2, metavar=("MODEL", "SIZE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sys.path.insert(0, str(HERE))
    if args.child:
        size = json.loads(args.child[1])
        res = child(args.child[0], tuple(size) if isinstance(size, list) else size,
                    args.steps, args.budget)  # fmt: skip
        print(MARK + json.dumps(res), flush=True)
        return 0

    import scalarised_models as M

    models = [m for m in args.models.split(",") if m] or list(M.MODELS)
    unknown = set(models) - set(M.MODELS)
    if unknown:
        p.error(f"unknown models {sorted(unknown)}; the models are {', '.join(M.MODELS)}")
    rows = []
    for model in models:
        sizes = M.MODELS[model][1]
        sizes = {"all": sizes, "small": sizes[:1], "large": sizes[1:]}[args.sizes]
        over = None
        for size in sizes:
            label = M.build(model, size).label
            if over is not None:
                rows.append({"model": model, "label": label, "skipped": over})
                print(f"{model} {label}: skipped ({over})", file=sys.stderr, flush=True)
                continue
            t0 = time.perf_counter()
            r = run_one(model, size, args)
            r.setdefault("label", label)
            rows.append(r)
            took = r.get("compile_s") or 0.0
            print(f"{model} {label}: compile {took:.2f} s, subprocess "
                  f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)  # fmt: skip
            if took > args.budget or ("timeout" in r and "grad_us" not in r):
                over = f"{label} compiled in {took:.0f} s > budget {args.budget:.0f} s"
    print(f"{tapejit_version()}; budget {args.budget:.0f} s\n")
    print(table(rows))
    errors = [r for r in rows if any(k in r for k in ("error", "new_data_error", "crash"))]
    for r in errors:
        for key in ("error", "new_data_error", "crash"):
            if key in r:
                print(f"\n{r['model']} {r['label']} ({key}): {r[key]}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
