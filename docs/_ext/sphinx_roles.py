"""A griffe extension for the API reference: Sphinx roles in docstrings become Markdown.

tapejit's docstrings use reST roles (:func:`compile`, :class:`~tapejit.core.program.Kernel`). mkdocstrings
renders docstrings as Markdown, where a role would show up as literal text. This rewrites each
role to a code span, linked to its entry in the API reference when it names a public object
(a name in ``tapejit.__all__``). Loaded by mkdocs.yml (mkdocstrings, python handler).
"""

from __future__ import annotations

import ast
import pathlib
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|data|mod|meth|attr|exc|obj):`(~?)([^`]+)`")
INIT = pathlib.Path(__file__).resolve().parents[2] / "tapejit" / "__init__.py"


def _public() -> set[str]:
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


PUBLIC = _public()


def _replace(m: re.Match) -> str:
    tilde, target = m.groups()
    name = target.removeprefix("tapejit.")
    shown = target.rsplit(".", 1)[-1] if tilde else target
    if name in PUBLIC:
        return f"[`{shown}`][tapejit.{name}]"
    return f"`{shown}`"


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        doc = obj.docstring
        if doc is not None and ":" in doc.value:
            doc.value = ROLE.sub(_replace, doc.value)
