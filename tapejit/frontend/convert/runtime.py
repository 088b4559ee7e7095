"""The operators converted code calls (:mod:`tapejit.frontend.convert.transform`), by the
names the rewritten code uses: each decides, from the values it is given, whether its statement
runs as written or becomes IR — loops (:mod:`~tapejit.frontend.convert.loops`), branches
(:mod:`~tapejit.frontend.convert.branches`) and what they share
(:mod:`~tapejit.frontend.convert.common`, which also keeps the record :func:`report` reads).
"""

from __future__ import annotations

from .appends import last, sum_
from .branches import if_stmt, ifexp
from .common import (_log, and_, args, aug, fallbacks, getitem, kept, not_, or_, report,
                     max2, min2, setitem, start, to_int)  # fmt: skip
from .loops import enumerate_, for_stmt, range_, zip_

#: The operators by the names the rewritten code calls them.
OPERATORS = {
    "_tj_for_stmt": for_stmt, "_tj_if_stmt": if_stmt, "_tj_ifexp": ifexp, "_tj_args": args,
    "_tj_and": and_, "_tj_or": or_, "_tj_not": not_, "_tj_getitem": getitem,
    "_tj_range": range_, "_tj_enumerate": enumerate_, "_tj_zip": zip_, "_tj_mkslice": slice,
    "_tj_to_int": to_int, "_tj_aug": aug, "_tj_kept": kept,
    "_tj_setitem": setitem, "_tj_max2": max2, "_tj_min2": min2, "_tj_last": last,
    "_tj_sum": sum_,
}

__all__ = ["OPERATORS", "fallbacks", "report", "start", "_log"]
