"""What a run of the ``iceberg-maint`` command in the health tests gave (tests/health/conftest.py's ``cli``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass
class Ran:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)
