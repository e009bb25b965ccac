"""The support matrix page as people read it: in headless Chromium at a laptop's 1280 px and a phone's 390 px, no
element is wider than the window (no sideways scroll), every digest shows its start and holds the whole (hover,
copy), and the CUDA, cuDNN and NCCL columns are there.

Layout, not pixels: the page, with a measuring script added (the published page has none), is shown in a frame of
the width under test (headless Chromium keeps its windows at least 500 px wide; a frame is a viewport of any width,
media queries included). The script writes the frame's width and every element that sticks out of it into the outer
page, which `--dump-dom` reads back. A screenshot at each width is kept under reports/ for a person to look at.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from chromium import CHROMIUM, chromium
from conftest import ROOT

from trainimg.publish.lockfile import LockEntry, write_lock
from trainimg.publish.matrix import COLUMNS, render_matrix

WIDTHS = {"laptop": 1280, "phone": 390}
# Every element's box against the window; the result goes into <pre id="layout"> for --dump-dom to carry out.
MEASURE = """<script>
(function () {
  var width = document.documentElement.clientWidth, wide = [];
  document.querySelectorAll("body *").forEach(function (el) {
    var box = el.getBoundingClientRect();
    if (box.right > width + 0.5 || box.left < -0.5) {
      wide.push(el.tagName + "." + el.className + " " + Math.round(box.left) + ".." + Math.round(box.right));
    }
  });
  parent.document.getElementById("layout").textContent = JSON.stringify({
    width: width, inner: window.innerWidth, scroll: document.documentElement.scrollWidth, wide: wide});
})();
</script>"""
FRAME = """<!doctype html><html><body style="margin:0"><pre id="layout"></pre>
<iframe style="border:0;display:block" width="{width}" height="900" srcdoc="{page}"></iframe></body></html>"""
# Long, real-looking names: the longest framework, a CUDA build, a registry with a path, both tags.
RELEASED = [("tensorflow", "2.21.0", "cu125", "3.12", "12.5.82", "9.3.0", "2.23.4"),
            ("pytorch", "2.14.1", "cu130", "3.12", "13.0.96", "9.13.0.50", "2.28.9"),
            ("jax", "0.10.2", "cu126", "3.12", "12.6.77", "9.5.1", "2.21.5"),
            ("pytorch", "2.13.0", "cpu", "3.11", None, None, None)]


def _entry(framework: str, version: str, build: str, python: str, cuda: str | None, cudnn: str | None,
           nccl: str | None) -> LockEntry:
    name = f"{framework}-{version}-{build}-py{python}"
    tag = f"trainimg/{framework}:{version}-{build}-py{python}"
    registry = "registry.example.com/machine-learning/platform-team"
    digest = "sha256:" + (name.encode().hex() * 8)[:64]
    return LockEntry(variant=name, recipe=f"recipes/{framework}.yaml", tag=tag, image_id="sha256:" + "1" * 64,
                     base_image="nvidia/cuda:13.0.3-base-ubuntu24.04", base_digest="sha256:" + "2" * 64,
                     versions={"framework": version, "cuda": cuda, "cudnn": cudnn, "nccl": nccl, "python": python},
                     pushed={f"{registry}/{tag}": digest,
                             f"{registry}/trainimg/{framework}:{version.rsplit('.', 1)[0]}-{build}": digest},
                     conformance={"passed": True, "counts": {"passed": 14, "failed": 0, "skipped": 3, "warning": 1},
                                  "failed": [], "platform": "vertex", "replicas": 2},
                     size=7_612_000_000, released="2026-11-26T13:27:41Z")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("matrix")
    lock = folder / "images.lock"
    write_lock(lock, [_entry(*r) for r in RELEASED])
    text = render_matrix(str(lock), "html")
    return folder, text


def _layout(folder: Path, text: str, name: str, width: int) -> tuple[dict[str, object], str]:
    if CHROMIUM is None:
        pytest.fail("chromium is not installed (.ci/setup-host installs it)")
    measured = folder / f"{name}.html"
    inner = html.escape(text.replace("</body>", MEASURE + "\n</body>"), quote=True)
    measured.write_text(FRAME.format(width=width, page=inner), encoding="utf-8")
    shot = ROOT / "reports" / f"matrix-{name}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    size = f"--window-size={max(width, 500)},960"
    chromium(f"--screenshot={shot}", size, measured.as_uri(), profile=folder / f"profile-{name}")
    dom = chromium("--dump-dom", size, measured.as_uri(), profile=folder / f"profile-{name}")
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:]
    print(f"matrix at {width} px: {shot}")
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")), dom.stdout


@pytest.mark.parametrize("name", sorted(WIDTHS))
def test_no_element_is_wider_than_the_window(page: tuple[Path, str], name: str) -> None:
    folder, text = page
    layout, _ = _layout(folder, text, name, WIDTHS[name])
    assert layout["inner"] == WIDTHS[name], layout  # the window is the width asked for
    assert layout["wide"] == [] and layout["scroll"] <= layout["width"], layout


def test_digests_show_their_start_and_hold_the_whole(page: tuple[Path, str]) -> None:
    folder, text = page
    layout, _ = _layout(folder, text, "laptop", WIDTHS["laptop"])
    assert layout["wide"] == [], layout  # each field fits its cell
    fields = re.findall(r'<input class="digest" readonly value="([^"]+)" title="([^"]+)"[^>]*size="(\d+)"', text)
    assert len(fields) == len(RELEASED), text[:3000]
    for value, title, size in fields:
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", value) and title == value  # hover and copy give the whole
        assert int(size) == len("sha256:") + 12  # the field shows sha256: and 12 hex digits, as `docker images`


def test_cuda_cudnn_nccl_are_columns(page: tuple[Path, str]) -> None:
    _, text = page
    assert {"CUDA", "cuDNN", "NCCL"} <= set(COLUMNS)
    row = re.search(r'<tr data-variant="pytorch-2.14.1-cu130-py3.12".*?</tr>', text).group(0)  # type: ignore[union-attr]
    for column, value in (("cuda", "13.0.96"), ("cudnn", "9.13.0.50"), ("nccl", "2.28.9")):
        assert f'<td class="{column}" data-label=' in row and f">{value}</td>" in row, (column, row)
