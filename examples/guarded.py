"""A model with Python control flow: guards keep the compiled gradient honest.

    python examples/guarded.py

A clipped quadratic penalty branches on a traced value. tapejit traces the branch the example
input takes, records a guard, and the native code re-checks it on every call: an input on the
other side is retraced and compiled once, then both variants are reused. The branch-free form
with ``tj.where`` compiles to one variant with no guard.
"""

from __future__ import annotations

import numpy as np

import tapejit as tj


def penalty(x, limit=1.0):
    s = np.sum(x * x)
    if s > limit:  # Python control flow on a traced value: a guard
        return limit + 2.0 * np.sqrt(limit) * (np.sqrt(s) - np.sqrt(limit))
    return s


def penalty_where(x, limit=1.0):
    s = np.sum(x * x)
    return tj.where(s > limit, limit + 2.0 * np.sqrt(limit) * (np.sqrt(s) - np.sqrt(limit)), s)


def hand_gradient(x, limit=1.0):
    s = np.sum(x * x)
    return 2 * np.sqrt(limit) * x / np.sqrt(s) if s > limit else 2 * x


def main() -> None:
    rng = np.random.default_rng(0)
    grad = tj.compile(penalty, rng.normal(0, 1, 5))
    branch_free = tj.compile(penalty_where, rng.normal(0, 1, 5))
    out = np.empty(5)
    worst = 0.0
    for scale in (1.0, 0.1, 2.0, 0.05, 1.0):
        x = rng.normal(0, scale, 5)
        for g in (grad, branch_free):
            g(x, out=out)
            worst = max(worst, float(np.max(np.abs(out - hand_gradient(x)))))
    print(f"variants compiled for the guarded model: {len(grad.specialisations)}")
    for k, v in enumerate(grad.specialisations):
        print(
            f"  variant {k}: " + ", ".join(f"{g['source']} -> {g['outcome']}" for g in v["guards"])
        )
    print(f"variants for the tj.where model: {len(branch_free.specialisations)}")
    print(f"max abs error against the hand-derived gradient: {worst:.1e}")
    assert worst < 1e-12
    print("gradient check: OK")


if __name__ == "__main__":
    main()
