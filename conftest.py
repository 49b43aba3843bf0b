"""pytest plugin: let nbval execute the book's MyST Markdown notebooks (``book/*.md``).

nbval collects only ``.ipynb`` files. This hook hands it ``book/*.md`` too and makes it read them
with ``jupytext`` instead of ``nbformat``. It lives in the top-level ``conftest.py`` because a hook
in ``tests/conftest.py`` is not applied to files under ``book/`` (nbval then collects nothing).
Run with ``pytest --nbval-lax --nbval-current-env book``.
"""

from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parent / "book"


def pytest_collect_file(file_path, parent):
    opt = parent.config.option
    if not (getattr(opt, "nbval", False) or getattr(opt, "nbval_lax", False)):
        return None
    if file_path.suffix != ".md" or file_path.parent != BOOK:
        return None
    if "jupytext" not in file_path.read_text(encoding="utf-8")[:400]:
        return None  # plain Markdown page, not a notebook
    import jupytext
    import nbval.plugin

    class MystNotebook(nbval.plugin.IPyNbFile):
        def collect(self):
            with pytest.MonkeyPatch.context() as mp:   # nbval reads the file with jupytext
                mp.setattr(nbval.plugin.nbformat, "read", lambda path, as_version=4: jupytext.read(path))
                yield from super().collect()

    return MystNotebook.from_parent(parent, path=file_path)
