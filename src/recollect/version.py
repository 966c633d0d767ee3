"""The package version (one place, imported by the package and the checkpoint format)."""

__version__ = "0.1.0"
