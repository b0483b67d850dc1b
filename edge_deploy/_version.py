"""The package version, importable by every stage without loading the package root."""
__version__ = "0.1.0"
