"""The package's version, in a module of its own so that anything may read it without
importing the package (and torch) first; pyproject.toml reads it from here too."""

__version__ = "0.1.0"
