"""Progress and logs for every verb: one policy, decided here once (`--progress auto|plain|quiet`).

`auto` is rich on a terminal (outside CI), plain prefixed lines otherwise (a pipe, a file, CI); only `quiet` is
silent. A second policy elsewhere once made `trainimg run ... > job.log` drop every line the training program
printed, so builds, conformance and jobs all print through `Progress`.
Several builds may report at once (variants build concurrently), so every method takes one lock.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

PROGRESS_MODES = ("auto", "plain", "quiet")
DEFAULT_PROGRESS = "auto"
_SHOWN_RE = re.compile(r"^#\d+ (\[(?!internal\]).*\]|CACHED|DONE|ERROR|.*ERROR:|importing cache manifest from )")


def resolve_mode(mode: str, env: Mapping[str, str], stream: TextIO) -> str:
    """`rich`, `plain` or `quiet` for a `--progress` value: auto is rich only on a terminal outside CI."""
    if mode == "auto":
        return "rich" if stream.isatty() and not env.get("CI") else "plain"
    return mode


def log_printer(mode: str, env: Mapping[str, str]) -> Callable[[str, str], None] | None:
    """What a verb passes as `on_log` for its containers' output: None (nothing streamed) only for quiet."""
    progress = Progress(mode, env)
    return None if progress.mode == "quiet" else progress.log


class Progress:
    def __init__(self, mode: str, env: Mapping[str, str], stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.mode = resolve_mode(mode, env, self.stream)
        self._lock = threading.Lock()
        self._active: list[str] = []
        self._status: Status | None = None
        self._console: Console | None = None  # set exactly when the mode is rich
        if self.mode == "rich":  # the resolved mode: `auto` on a terminal is rich too
            from rich.console import Console  # only rich mode pays for importing rich

            self._console = Console(file=self.stream)

    def start(self, task: str) -> None:
        with self._lock:
            self._active.append(task)
            if self._console is not None:
                if self._status is None:
                    self._status = self._console.status(task)
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

    def log(self, task: str, line: str) -> None:
        """A line a container printed (a replica, a trial): every one is shown, prefixed with its task."""
        with self._lock:
            if self._console is not None:
                self._console.print(f"[{task}] {line}", markup=False, highlight=False)
            elif self.mode == "plain":
                print(f"[{task}] {line}", file=self.stream, flush=True)

    def done(self, task: str, message: str) -> None:
        with self._lock:
            if task in self._active:
                self._active.remove(task)
            if self._console is not None:
                self._console.print(message)
                if not self._active and self._status is not None:
                    self._status.stop()
                    self._status = None
            elif self.mode == "plain":
                print(f"trainimg: {message}", file=self.stream, flush=True)
