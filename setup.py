"""The package is described in pyproject.toml; it has no compiled parts (the extender is Python only)."""

from setuptools import setup

setup()
