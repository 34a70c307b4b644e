"""The package's version, in a module of its own so that any layer can read it without importing the
client (the root package's exports load lazily)."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
