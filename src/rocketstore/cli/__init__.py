"""The ``rocketstore`` command: a thin layer over the library (see ``app.py``)."""

from rocketstore.cli.app import main

__all__ = ["main"]
