"""Headless Chromium (Debian's `chromium`, installed by .ci/setup-host) for tests of the pages trainimg writes:
load a page, save a screenshot, read back the DOM as rendered; or drive one browser through many pages over the
DevTools protocol (`DevTools`: scripts run in each page, its console errors kept).

The flags are what this machine needs: no sandbox as root, no GPU, and none of Chromium's background network
traffic (this machine's network is closed; each attempt would be refused)."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


def render_in_chromium(page: Path, screenshot: Path, profile: Path) -> str:
    """Load `page`: save a screenshot at `screenshot` (its path printed), return the DOM as rendered."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed (.ci/setup-host installs it)")
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    shot = chromium(f"--screenshot={screenshot}", "--window-size=1800,500", page.as_uri(), profile=profile)
    assert screenshot.is_file() and screenshot.stat().st_size > 0, shot.stderr[-2000:]
    print(f"matrix screenshot: {screenshot}")
    dom = chromium("--dump-dom", page.as_uri(), profile=profile)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


class DevTools:
    """One headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON messages
    ended by NUL on file descriptors 3 and 4; no port, no websocket library): open pages, run a script in them,
    and keep every console message and uncaught exception a page gave. A context manager: the browser is closed
    (and killed if it hangs) on leaving."""

    def __init__(self, profile: Path) -> None:
        if CHROMIUM is None:
            pytest.fail("chromium is not installed here (.ci/setup-host installs it)")
        ours_read, theirs_write = os.pipe()
        theirs_read, ours_write = os.pipe()

        def descriptors() -> None:  # in the child: its fd 3 reads what we write, fd 4 writes what we read
            os.dup2(theirs_read, 3)
            os.dup2(theirs_write, 4)

        self.process = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                                         "about:blank"], pass_fds=(3, 4), preexec_fn=descriptors,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(theirs_read)
        os.close(theirs_write)
        self._out = os.fdopen(ours_write, "wb", buffering=0)
        self._in = os.fdopen(ours_read, "rb", buffering=0)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def __enter__(self) -> DevTools:
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self.call("Browser.close")
            self.process.wait(timeout=20)
        except (OSError, EOFError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(timeout=20)

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer within the time allowed")
            ready, _, _ = select.select([self._in], [], [], 1.0)
            if ready:
                chunk = self._in.read(1 << 16)
                if not chunk:
                    raise EOFError("Chromium closed its DevTools pipe")
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, params: dict[str, Any] | None = None, session: bool = False,
             timeout: float = 60) -> dict[str, Any]:
        """Send one command and wait for its answer; the events that come meanwhile are kept in `events`."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        self._out.write(json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            got = self._receive(deadline)
            if got.get("id") == self._next_id:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                return dict(got.get("result", {}))
            self.events.append(got)

    def open(self, url: str, timeout: float = 60) -> None:
        """Navigate to `url` and wait for its load event."""
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session=True)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._receive(deadline))

    def evaluate(self, expression: str) -> Any:
        """The JSON value of `expression` evaluated in the open page."""
        answer = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression[:80]}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def console_errors(self) -> list[str]:
        """Every console error, uncaught exception and error log entry (a resource that failed) since `open`."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append("console." + params["type"] + ": " + " ".join(
                    str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                found.append(f"uncaught: {details.get('exception', {}).get('description') or details.get('text')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                found.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
        return found
