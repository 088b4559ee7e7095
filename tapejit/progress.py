"""Feedback on long compiles: every stage logs through :mod:`logging` (logger ``"tapejit"``), and
a compile that runs past :data:`DELAY` seconds shows its stages on a terminal.

Logging: ``DEBUG`` records give each stage's name, duration and size (IR nodes, kernels), an
``INFO`` record says what was compiled, how long it took and whether the on-disk cache hit. The
library adds no handler (``logging.basicConfig(level=logging.INFO)`` shows them).

Progress on a terminal: a timer started with the compile; if the compile is still running after
:data:`DELAY` seconds and standard error is a terminal, the current stage and each following one
are shown — as a ``tqdm`` bar when that package is installed, else as plain lines. It is off when
standard error is not a terminal, when ``$TAPEJIT_PROGRESS`` is ``0``/``off``/``false``/``no``,
or when ``compile(..., progress=False)``; ``progress=True`` shows it even when not a terminal.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

log = logging.getLogger("tapejit")

#: Seconds a compile runs before its progress is shown.
DELAY = 1.0

#: The stages a compile reports, in order (a cache hit skips from ``cache`` to ``bind``).
STEPS = ("trace", "cache", "autodiff", "passes", "plan", "lower", "llvm", "bind")


def wanted(progress: bool | None) -> bool:
    """Whether to show progress: ``progress`` if given, else on a terminal unless turned off
    by ``$TAPEJIT_PROGRESS``."""
    if progress is not None:
        return bool(progress)
    if os.environ.get("TAPEJIT_PROGRESS", "1").strip().lower() in ("0", "off", "false", "no"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """One compile's stages: ``with Progress(name, show) as p: p.step("llvm", "12 functions")``.

    :meth:`step` logs the stage that ended (with its duration) and names the next one; the
    display, if any, starts :data:`DELAY` seconds after the compile began.
    """

    def __init__(self, name: str, show: bool):
        self.name = name
        self.t0 = self.t_step = time.perf_counter()
        self.current, self.detail = STEPS[0], ""
        self._lock = threading.Lock()
        self._bar: Any = None
        self._shown = False
        self._timer = threading.Timer(DELAY, self._show) if show else None
        if self._timer is not None:
            self._timer.daemon = True

    def __enter__(self) -> "Progress":
        if self._timer is not None:
            self._timer.start()
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._bar is not None:
                self._bar.close()
            elif self._shown:
                print(f"tapejit: {self.name}: done in {self.elapsed:.1f} s", file=sys.stderr)
            self._timer = None

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def step(self, name: str, detail: str = "") -> None:
        """The stage before ``name`` ended (``detail``: what it produced); ``name`` begins."""
        now = time.perf_counter()
        log.debug(
            "%s: %s took %.1f ms%s", self.name, self.current, 1e3 * (now - self.t_step),
            f" ({detail})" if detail else "",
        )
        with self._lock:
            self.current, self.detail, self.t_step = name, detail, now
            if self._shown:
                self._render()

    def _show(self) -> None:
        with self._lock:
            if self._timer is None:  # finished meanwhile
                return
            self._shown = True
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(
                    total=len(STEPS), desc=f"tapejit: compiling {self.name}", unit="stage",
                    leave=False, file=sys.stderr,
                )
            self._render()

    def _render(self) -> None:
        k = STEPS.index(self.current) if self.current in STEPS else len(STEPS)
        text = self.current + (f" ({self.detail})" if self.detail else "")
        if self._bar is not None:
            self._bar.n = k
            self._bar.set_postfix_str(text)
        else:
            print(
                f"tapejit: compiling {self.name}: {text} [{self.elapsed:.1f} s]",
                file=sys.stderr,
                flush=True,
            )
