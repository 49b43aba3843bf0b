"""The package version (its own module, so that every layer can read it without a cycle)."""

__version__ = "0.3.0"
