"""The protocol every client script here speaks with tests/test_platform_clients.py: a JSON list of cases on stdin,
a JSON list of answers on stdout, one per case and in order.

Each case holds the ``env`` a replica would see; the client's own code reads it from ``os.environ`` (where the real
library looks), so the process environment is swapped for the case's before each call. A client that raises for a
case answers ``{"error": "Type: message"}``: a refusal is an answer to compare, not a crash of the batch. Standard
library only: it runs inside each framework's venv.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

# What the venv itself needs (PATH, HOME, log levels); every platform variable comes from the case alone.
_BASE = dict(os.environ)


def use_env(env: dict[str, str]) -> None:
    """Make `env` (over the venv's own variables) this process's environment."""
    os.environ.clear()
    os.environ.update(_BASE)
    os.environ.update(env)


def serve(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Answer every case on stdin with `answer`, under the case's environment."""
    out = []
    for case in json.load(sys.stdin):
        use_env(case["env"])
        try:
            out.append(answer(case))
        except Exception as err:  # noqa: BLE001 - the client's refusal is the answer
            out.append({"error": f"{type(err).__name__}: {err}"})
    json.dump(out, sys.stdout)
