"""The options of :func:`tapejit.compile`, validated once, and the on-disk cache they select."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..codegen.cache import ObjectCache

#: Rows a dynamic-length argument is compiled for at first (grown by doubling when exceeded).
DYNAMIC_CAPACITY = 1024

CacheSpec = bool | str | os.PathLike | ObjectCache


def object_cache(cache: CacheSpec = True) -> ObjectCache | None:
    """The on-disk cache of compiled objects to use, or ``None`` for none.

    ``True`` (the default) means: the directory ``$TAPEJIT_CACHE_DIR`` if set, else the user cache
    directory of the platform (``platformdirs.user_cache_dir("tapejit")``), unless
    ``$TAPEJIT_CACHE`` is ``0``/``off``/``false``/``no``. ``False`` disables it; a path or an
    :class:`~tapejit.codegen.cache.ObjectCache` selects one.
    """
    if isinstance(cache, ObjectCache):
        return cache
    if cache is False or cache is None:
        return None
    if cache is True:
        if os.environ.get("TAPEJIT_CACHE", "1").strip().lower() in ("0", "off", "false", "no"):
            return None
        directory = os.environ.get("TAPEJIT_CACHE_DIR")
        if not directory:
            import platformdirs  # imported only when needed: ~3 ms of a warm-cache start

            directory = platformdirs.user_cache_dir("tapejit")
        return ObjectCache(directory)
    return ObjectCache(cache)


def capacity_for(n: int) -> int:
    """Rows to compile a dynamic-length argument of ``n`` rows for."""
    return max(DYNAMIC_CAPACITY, 1 << max(0, int(n) - 1).bit_length())


@dataclass(frozen=True)
class Options:
    """What :func:`tapejit.compile` was asked for, as given (``argnums`` an int or a tuple) and
    checked against the example arguments (:meth:`check`)."""

    argnums: int | tuple[int, ...] = 0
    cache: Any = True
    on_guard_failure: str = "recompile"
    max_specialisations: int = 8
    dynamic_argnums: int | tuple[int, ...] = ()
    on_max_steps: str = "warn"
    progress: bool | None = None
    mode: str = "grad"
    nargs: int | None = None  # the function's arguments (a program takes more: tangents...)

    def __post_init__(self):
        from ..transforms import MODES

        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {self.mode!r}")
        if self.mode != "grad" and self.dynamic_argnums not in ((), None):
            raise ValueError(f"dynamic_argnums works with mode='grad' only, not {self.mode!r}")
        if self.on_guard_failure not in ("recompile", "raise"):
            raise ValueError(
                f"on_guard_failure must be 'recompile' or 'raise', got {self.on_guard_failure!r}"
            )
        if self.on_max_steps not in ("warn", "raise"):
            raise ValueError(f"on_max_steps must be 'warn' or 'raise', got {self.on_max_steps!r}")
        m = self.max_specialisations
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            raise ValueError(f"max_specialisations must be an int >= 1, got {m!r}")
        if self.progress not in (None, True, False):
            raise TypeError(f"progress must be None, True or False, got {self.progress!r}")

    @property
    def tuple_result(self) -> bool:
        """Whether gradients come back as a tuple (``argnums`` given as a sequence)."""
        return not isinstance(self.argnums, int)

    def order(self, nargs: int) -> tuple[int, ...]:
        """``argnums`` as non-negative positions in the order given; raises ``ValueError``."""
        a = self.argnums
        nums = (a,) if isinstance(a, int) else tuple(a)
        if not nums and self.mode != "value":  # (a value program differentiates nothing)
            raise ValueError("argnums is empty: nothing to differentiate")
        out = []
        for k in nums:
            if not isinstance(k, int) or isinstance(k, bool) or not -nargs <= k < nargs:
                raise ValueError(f"argnums entry {k!r} is not a valid index for {nargs} arguments")
            out.append(k % nargs)
        if len(set(out)) != len(out):
            raise ValueError(f"argnums {nums} repeats an argument")
        return tuple(out)

    def dynamic(self, args: Sequence[Any], order: tuple[int, ...]) -> tuple[int, ...]:
        """``dynamic_argnums`` as sorted positions, checked against ``args``."""
        d = self.dynamic_argnums
        dyn = (d,) if isinstance(d, int) else tuple(d)
        out = []
        for k in dyn:
            if not isinstance(k, int) or not -len(args) <= k < len(args):
                raise ValueError(
                    f"dynamic_argnums entry {k!r} is not a valid index for {len(args)} arguments"
                )
            k %= len(args)
            if k in order:
                raise ValueError(
                    f"argument {k} cannot be both differentiated (argnums) and of dynamic length "
                    "(dynamic_argnums): its gradient's shape would change from call to call"
                )
            if np.ndim(args[k]) < 1 or np.shape(args[k])[0] < 1:
                raise ValueError(
                    f"argument {k} is in dynamic_argnums but has no leading axis to vary"
                )
            out.append(k)
        return tuple(sorted(set(out)))
