"""Headless Chromium (Debian's `chromium`, installed by .ci/setup-host) for tests of the pages trainimg writes:
load a page, save a screenshot, read back the DOM as rendered.

The flags are what this machine needs: no sandbox as root, no GPU, and none of Chromium's background network
traffic (this machine's network is closed; each attempt would be refused)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

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
