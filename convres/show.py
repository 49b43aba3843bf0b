"""What the chapters show of the package: its real source, so that text and library never fork.

:func:`source` returns the code of functions without their docstrings (which the API pages
show), as a highlighted Markdown code block in a notebook and as plain text elsewhere.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

__all__ = ["source", "Source"]


class Source(str):
    """Source code that a notebook displays as a highlighted Python block."""

    def _repr_markdown_(self) -> str:
        return f"```python\n{self}\n```"


def _without_docstring(obj) -> str:
    code = textwrap.dedent(inspect.getsource(obj))
    body = ast.parse(code).body[0]
    lines = code.splitlines()
    inner = getattr(body, "body", None)
    first = inner[0] if inner else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        del lines[first.lineno - 1:first.end_lineno]
    return "\n".join(lines)


def source(*objs) -> Source:
    """The source of each function or class in ``objs`` (docstrings removed), one after another."""
    return Source("\n\n".join(_without_docstring(o) for o in objs))
