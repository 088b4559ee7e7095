"""Errors of tracing and where they happened: :class:`TracingError` (and its ``AttributeError`` /
``IndexError`` kinds), the user's ``file:line in function`` a message names (the innermost frame
outside tapejit, numpy and scipy; the scipy function running, if any), and the text
of the user's line that the hints are chosen from. Knows nothing of tracers or traces.
"""

from __future__ import annotations

import os
import sys

#: The tapejit package's folder: its frames (and numpy's, scipy's) are not the user's code.
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TracingError(Exception):
    """``f`` did something that cannot be traced; the message names the user's file and line."""


class _UnsupportedAttribute(TracingError, AttributeError):
    """An ndarray method or attribute tapejit does not trace (``x.cumsum()``, ``x.sort()``).
    Also an ``AttributeError``, so ``hasattr``/``getattr(x, name, default)`` behave as before."""


#: Libraries whose frames are not the user's: a message names the user's line that called them.
_LIBRARIES = tuple(os.sep + name + os.sep for name in ("numpy", "scipy"))


def _is_library(path: str) -> bool:
    """Whether ``path`` (absolute) is tapejit's, numpy's or scipy's source."""
    return path.startswith(_PKG_DIR + os.sep) or any(lib in path for lib in _LIBRARIES)


def _frame_site(code, line: int) -> str:
    return f"{code.co_filename}:{line} in {code.co_name}()"


def _user_site() -> str:
    """``file:line in function`` of the innermost frame outside tapejit, numpy and scipy (the
    user's code); when scipy's code was running, its innermost frame follows in parentheses."""
    frame = sys._getframe(1)
    library = None
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not _is_library(path) and not frame.f_code.co_filename.startswith("<frozen"):
            site = _frame_site(frame.f_code, frame.f_lineno)
            return site + (f" (in {library})" if library else "")
        if library is None and not path.startswith(_PKG_DIR + os.sep) and "scipy" in path:
            library = f"scipy: {os.path.basename(path)}:{frame.f_lineno} in {frame.f_code.co_name}()"
        frame = frame.f_back
    return "<unknown location>"


def _site_of(tb) -> str:
    """``file:line in function`` of the innermost user frame of traceback ``tb``."""
    site = "<unknown location>"
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _is_library(os.path.abspath(code.co_filename)):
            site = _frame_site(code, tb.tb_lineno)
        tb = tb.tb_next
    return site


def _fail(msg: str) -> TracingError:
    return TracingError(f"{_user_site()}: {msg}")


class _IndexOutOfRange(TracingError, IndexError):
    """An index numpy refuses with ``IndexError`` (out of bounds, too many indices, a mask of the
    wrong size). Also an ``IndexError``, so code that catches numpy's error behaves the same."""


def _fail_index(msg: str) -> _IndexOutOfRange:
    return _IndexOutOfRange(f"{_user_site()}: {msg}")


def _source_line() -> str:
    """The text of the user's line being traced (for hints), or ''."""
    import linecache

    frame = sys._getframe(1)
    while frame is not None:
        if not _is_library(os.path.abspath(frame.f_code.co_filename)):
            return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        frame = frame.f_back
    return ""


def _scipy_caller() -> str:
    """``scipy.<module>.<function>`` the user's code called, if scipy's code is running, else
    ''."""
    frame = sys._getframe(1)
    called = ""
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not _is_library(path):
            return called
        name = frame.f_code.co_name
        if os.sep + "scipy" + os.sep in path and not name.startswith(("_", "<", "wrap", "inner")):
            module = frame.f_globals.get("__name__", "scipy")
            public = ".".join(p for p in module.split(".") if not p.startswith("_"))
            called = f"{public}.{frame.f_code.co_name}"
        frame = frame.f_back
    return ""



def masked_array_error(what: str) -> TypeError:
    """The error for a numpy masked array passed where an array is expected: converting it drops
    its mask (every masked element would take part), so it is refused."""
    return TypeError(
        f"{what} is a numpy masked array: tapejit would drop its mask and use every element. "
        "Pass x.filled(value) (masked elements replaced), x.compressed() (only the unmasked "
        "ones), or the data and the mask as two arguments and use tapejit.where(mask, ...)"
    )
