"""The one check against the live index: pypi.org, as `trainimg outdated` and `compat add` read it by default.
Skipped, saying why, where pypi.org does not answer; everything else reads the recorded answers
(tests/localindex.py)."""

from __future__ import annotations

import json

import pytest
import requests
from conftest import ROOT

from trainimg.cli.app import main
from trainimg.options import PYPI_SIMPLE


@pytest.fixture(scope="module")
def live() -> str:
    try:
        answered = requests.get(f"{PYPI_SIMPLE}torch/", headers={"Accept": "application/vnd.pypi.simple.v1+json"},
                                timeout=10)
    except requests.RequestException as exc:
        pytest.fail(f"{PYPI_SIMPLE} does not answer here ({type(exc).__name__}): CI's machines reach PyPI")
    if answered.status_code != 200:
        pytest.fail(f"{PYPI_SIMPLE} answered HTTP {answered.status_code}")
    return PYPI_SIMPLE


def test_live_outdated_and_compat_add(live: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["outdated", "--recipes", str(ROOT / "recipes"), "--index-url", live, "--json"])
    captured = capsys.readouterr()
    assert rc in (0, 1), captured.err
    items = json.loads(captured.out)
    assert all(i["source"].startswith("http") for i in items) and any(not i["held"] for i in items) == (rc == 1)
    # read from the live index: the recipes pin torch 2.13.0, behind what pypi.org serves (2.15.0 and later)
    assert [i["current"] for i in items if i["kind"] == "framework" and i["name"] == "torch"
            and i["source"].startswith(live)].count("2.13.0") == 1, items
    assert main(["compat", "add", "torch==2.15.0", "--index-url", live, "--no-archs", "--dry-run"]) == 0
    assert "agree with compat.yaml" in capsys.readouterr().out
