"""Progress for long work: rich on a terminal, plain prefixed lines in CI, nothing with quiet.

Every line a build prints goes through here, so the choice is made once (`--progress auto|plain|quiet`).
Several builds may report at once (variants build concurrently), so every method takes one lock.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Mapping
from typing import TextIO

_SHOWN_RE = re.compile(r"^#\d+ (\[(?!internal\]).*\]|CACHED|DONE|ERROR|.*ERROR:)")


class Progress:
    def __init__(self, mode: str, env: Mapping[str, str], stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        if mode == "auto":
            interactive = self.stream.isatty() and not env.get("CI")
            mode = "rich" if interactive else "plain"
        self.mode = mode
        self._lock = threading.Lock()
        self._active: list[str] = []
        self._status = None
        self._console = None
        if mode == "rich":
            from rich.console import Console

            self._console = Console(file=self.stream)

    def start(self, task: str) -> None:
        with self._lock:
            self._active.append(task)
            if self.mode == "rich":
                if self._status is None:
                    self._status = self._console.status(task)  # type: ignore[union-attr]
                    self._status.start()
                self._status.update(", ".join(self._active))
            elif self.mode == "plain":
                print(f"trainimg: {task}", file=self.stream, flush=True)

    def line(self, task: str, line: str) -> None:
        """A line of the work's own output: steps shown, the chatter dropped unless it is an error."""
        if not _SHOWN_RE.match(line):
            return
        with self._lock:
            if self.mode == "rich" and self._status is not None:
                self._status.update(f"{task}: {line[:100]}")
            elif self.mode == "plain":
                print(f"[{task}] {line}", file=self.stream, flush=True)

    def done(self, task: str, message: str) -> None:
        with self._lock:
            if task in self._active:
                self._active.remove(task)
            if self.mode == "rich":
                self._console.print(message)  # type: ignore[union-attr]
                if not self._active and self._status is not None:
                    self._status.stop()
                    self._status = None
            elif self.mode == "plain":
                print(f"trainimg: {message}", file=self.stream, flush=True)
