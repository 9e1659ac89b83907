"""The command line's grammar: each subcommand's arguments, light enough to parse before anything heavy loads.

A module here per subcommand, ``register(subparsers)``, imports only the standard library and light
constants, never pyiceberg, pyarrow, SQLAlchemy or Airflow: ``--version``, ``--help`` and a usage error
cost the interpreter's start and little more. The parser's ``func`` is a ``Command`` naming the function
that runs the subcommand, whose module (and whatever it needs) is imported only once the arguments parsed.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any


class Command:
    """The function ``name`` of the module ``module``, imported when first called."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __call__(self, args: argparse.Namespace) -> dict[str, Any]:
        run = getattr(importlib.import_module(self.module), self.name)
        result: dict[str, Any] = run(args)
        return result
