"""pytest plugin: let nbval execute the book's MyST Markdown notebooks (``book/*.md``).

nbval collects only ``.ipynb`` files. This hook hands it ``book/*.md`` too and makes it read them
with ``jupytext`` instead of ``nbformat``. It lives in the top-level ``conftest.py`` because a hook
in ``tests/conftest.py`` is not applied to files under ``book/`` (nbval then collects nothing).
Run with ``pytest --nbval-lax --nbval-current-env book``.
"""

from pathlib import Path

BOOK = Path(__file__).resolve().parent / "book"


class _JupytextAsNbformat:
    """Stands in for the ``nbformat`` module inside nbval: ``read`` goes through jupytext."""

    def __init__(self, nbformat):
        self._nbformat = nbformat

    def __getattr__(self, name):
        return getattr(self._nbformat, name)

    @staticmethod
    def read(path, as_version=4):
        import jupytext
        return jupytext.read(path)


def pytest_collect_file(file_path, parent):
    opt = parent.config.option
    if not (getattr(opt, "nbval", False) or getattr(opt, "nbval_lax", False)):
        return None
    if file_path.suffix != ".md" or file_path.parent != BOOK:
        return None
    if "jupytext" not in file_path.read_text(encoding="utf-8")[:400]:
        return None  # plain Markdown page, not a notebook
    import nbval.plugin

    class MystNotebook(nbval.plugin.IPyNbFile):
        def collect(self):
            original = nbval.plugin.nbformat
            nbval.plugin.nbformat = _JupytextAsNbformat(original)
            try:
                yield from super().collect()
            finally:
                nbval.plugin.nbformat = original

    return MystNotebook.from_parent(parent, path=file_path)
