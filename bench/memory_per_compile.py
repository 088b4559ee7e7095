"""Native memory per compile (docs/runtime.md): RSS growth over many compiles of distinct small
functions after the gradients are collected, and of LLVM's O3 pipeline alone.

Run: ``python bench/memory_per_compile.py [N]`` (Linux: reads /proc/self/statm)."""

from __future__ import annotations

import gc
import os
import sys

import llvmlite.binding as llvm
import numpy as np

import tapejit as tj
from tapejit.codegen import target


def rss() -> int:
    with open(f"/proc/{os.getpid()}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def per_run(fn, n: int) -> float:
    for _ in range(20):
        fn(0)
    gc.collect()
    r0 = rss()
    for k in range(n):
        fn(k)
    gc.collect()
    return (rss() - r0) / n / 1024


def main(n: int) -> None:
    def compile_one(k):
        tj.compile(lambda x: np.sum(np.exp(x * (k + 0.5)) + x * x), np.ones(16), cache=False)

    text = tj.compile(lambda x: np.sum(np.exp(x * 1.5) + x * x), np.ones(16), cache=False)._llvm
    tm = target.target_machine()

    def optimise(_):
        target.optimise(llvm.parse_assembly(text), tm)

    def pipeline(_):
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        pm = pb.getModulePassManager()
        pm.close()
        pb.close()

    # LLVM first: after many compiles, freed heap is reused and hides what LLVM keeps
    print(f"LLVM parse + O3 pipeline:       {per_run(optimise, n):6.1f} KB per run")
    print(f"building the pipeline, closed:  {per_run(pipeline, n):6.1f} KB per run")
    print(f"tj.compile, distinct functions: {per_run(compile_one, n):6.1f} KB per compile")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
