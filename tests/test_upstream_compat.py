"""`trainimg compat add`: every release compat.yaml holds, derived again from its own wheels as the real index
served them (tests/data/upstream/, replayed by tests/localindex.py), gives what compat.yaml says; what the wheels
cannot say is named with its reason, never filled in; the writer puts an entry back exactly as derived.

Generated from the data: one case per release of compat.yaml. The torch GPU architectures are read from the real
torch 2.14.1 wheel of this machine (skipped where it is absent), served by ranges like PyPI serves it.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from packaging.version import Version
from localindex import LocalIndex
from record_pypi import reads_archs

from trainimg.cli.app import main
from trainimg.errors import UserInputError
from trainimg.recipe.compat import Compat, load_compat
from trainimg.upstream.compatfile import new_text, place, write_entry
from trainimg.upstream.derive import arch_entry, compare, derive
from trainimg.upstream.publishing import PUBLISHING
from trainimg.upstream.simpleapi import SimpleIndex
from trainimg.upstream.wheelfacts import archs_of
from trainimg.upstream.wheelzip import RemoteWheel

COMPAT = load_compat()
RELEASES = [(fw, rel.version) for fw, data in COMPAT.frameworks.items() for rel in data.releases]
TORCH_WHEELS = Path("/opt/pypi-more/files")
TORCH_WHEEL = "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"
DATA = Path(__file__).resolve().parents[1] / "builder" / "recipe" / "data" / "compat.yaml"


@pytest.fixture(scope="module")
def index() -> Iterator[LocalIndex]:
    with LocalIndex() as served:
        yield served


@pytest.mark.parametrize(("framework", "version"), RELEASES, ids=[f"{f}-{v}" for f, v in RELEASES])
def test_rederiving_a_release_gives_what_compat_yaml_holds(framework: str, version: str, index: LocalIndex) -> None:
    d = derive(SimpleIndex(index.url), framework, version, archs=reads_archs(framework, version))  # type: ignore[arg-type]
    agreements = compare(d, COMPAT)
    wrong = [a for a in agreements if a.state in ("differs", "new")]
    assert not wrong, "\n".join(f"{a.key}: derived {a.derived!r} [{a.source}], compat.yaml {a.written!r}"
                                for a in wrong)
    unread = [a for a in agreements if a.state == "unread"]
    # Every value not read says why, in the words of the derivation's own table of what this index cannot give
    # (publishing.PUBLISHING), not a fallback.
    assert {a.derived for a in unread} <= set(d.unread.values()), unread
    agreed = [a.key for a in agreements if a.state == "agrees"]
    assert {"released", "python"} <= set(agreed), agreed
    assert all(a.source.startswith("http") for a in agreements if a.state == "agrees"), agreements
    print(f"{framework} {version}: {len(agreed)} values agree; not read here: {sorted({a.key for a in unread})}")


# A value of compat.yaml's entry made wrong, per kind of comparison: a specifier field (compared as a set), and the
# build's wheel pin (compared as text). Each must come out "differs", named by its key.
WRONG = {"python": ">=3.99", "nccl": "==0.0.1", "nccl_wheel": "nvidia-nccl-cu99"}


@pytest.mark.parametrize("framework", sorted(COMPAT.frameworks))
def test_a_wrong_value_in_compat_yaml_is_found_differing(framework: str, index: LocalIndex) -> None:
    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    release = data["frameworks"][framework]["releases"][0]
    line = sorted(release["cuda"])[0]
    release["python"] = WRONG["python"]
    release["cuda"][line].update({k: WRONG[k] for k in ("nccl", "nccl_wheel")})
    wrong = Compat.model_validate(data)
    version = release["version"]
    d = derive(SimpleIndex(index.url), framework, version, archs=reads_archs(framework, version))  # type: ignore[arg-type]
    states = {a.key: (a.state, a.written) for a in compare(d, wrong)}
    expected = {"python": WRONG["python"], f"cuda:{line}/nccl": WRONG["nccl"],
                f"cuda:{line}/nccl_wheel": WRONG["nccl_wheel"]}
    assert {k: states.get(k) for k in expected} == {k: ("differs", v) for k, v in expected.items()}
    assert [k for k, (state, _) in states.items() if state == "differs"] == sorted(expected)


def test_torch_gpu_archs_read_from_its_wheel_by_ranges_agree(index: LocalIndex) -> None:
    """What the data's torch CUDA 13 entry was read from by hand, read by 1 MB ranges off the served wheel."""
    if not (TORCH_WHEELS / TORCH_WHEEL).is_file():
        pytest.fail(f"{TORCH_WHEEL} is not on this machine ({TORCH_WHEELS}): CI's machines ship it")
    with LocalIndex(wheels=TORCH_WHEELS) as served:
        simple = SimpleIndex(served.url)
        wheel = next(f for f in simple.project("torch").files_of("2.14.1") if f.filename == TORCH_WHEEL)
        remote = RemoteWheel(simple.http, wheel)
        source = PUBLISHING["pytorch"].archs
        assert source is not None
        found, read = remote.scan(remote.member(source.member), source.pattern, source.limit)
    assert found is not None
    entry = arch_entry(COMPAT, "pytorch", "2.14.1", "13.0")
    assert entry is not None and archs_of(found) == tuple(entry.archs)
    assert read < wheel.size / 10  # a sliver of the wheel, never the whole
    print(f"torch 2.14.1 CUDA 13.0 archs {archs_of(found)}: {read / 1e6:.1f} MB of {wheel.size / 1e6:.0f} MB read")


def _without(text: str, framework: str, version: str) -> str:
    """compat.yaml's text without one release entry (its block, where the writer finds it)."""
    lines = text.splitlines(keepends=True)
    start, end = place(lines, framework, Version(version))
    assert end > start
    return "".join(lines[:start] + lines[end:])


@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
def test_a_removed_entry_is_written_back_as_derived(framework: str, index: LocalIndex, tmp_path: Path) -> None:
    version = COMPAT.frameworks[framework].releases[0].version  # type: ignore[index]
    copy = tmp_path / "compat.yaml"
    copy.write_text(_without(DATA.read_text(), framework, version))
    shorter = Compat.model_validate(yaml.safe_load(copy.read_text()))
    assert shorter.release(framework, version) is None  # type: ignore[arg-type]
    d = derive(SimpleIndex(index.url), framework, version, archs=reads_archs(framework, version))  # type: ignore[arg-type]
    written = write_entry(copy, d, shorter, datetime.date(2026, 11, 27))
    assert written.before is None and not written.archs  # the gpu_archs entry that covers it already agrees
    back = Compat.model_validate(yaml.safe_load(copy.read_text()))
    again, original = back.release(framework, version), COMPAT.release(framework, version)  # type: ignore[arg-type]
    assert again is not None and original is not None
    # All the wheels say comes back; `tested` (a documentation's statement, not a wheel's) is named unread instead.
    assert "tested" in d.unread
    unread = {"source": True, "cuda": {line: {"tested"} for line in original.cuda}}
    assert again.model_dump(exclude=unread) == original.model_dump(exclude=unread)
    assert [r.version for r in back.frameworks[framework].releases] == \
        [r.version for r in COMPAT.frameworks[framework].releases]  # type: ignore[index]  # in its place


def test_archs_that_differ_get_an_entry_of_their_own_before_the_broad_one(index: LocalIndex, tmp_path: Path) -> None:
    version = COMPAT.frameworks["tensorflow"].releases[0].version
    text = DATA.read_text().replace("archs: [sm_60, sm_70, sm_80, sm_89, compute_90]", "archs: [sm_60, sm_70]")
    changed = Compat.model_validate(yaml.safe_load(text))
    d = derive(SimpleIndex(index.url), "tensorflow", version, archs=True)
    updated, written = new_text(text, d, changed, datetime.date(2026, 11, 27))
    assert len(written.archs) == 1
    back = Compat.model_validate(yaml.safe_load(updated))
    entry = arch_entry(back, "tensorflow", version, "12.5")
    assert entry is not None and entry.archs == d.archs()["12.5"] and entry.versions == "==2.21.*"
    older = arch_entry(back, "tensorflow", "2.20.0", "12.5")
    assert older is not None and older.archs == ("sm_60", "sm_70")  # the other releases keep what they had


def test_an_older_patch_than_the_line_holds_is_refused(index: LocalIndex) -> None:
    d = derive(SimpleIndex(index.url), "pytorch", "2.14.1", archs=False)
    older = replace(d, version="2.14.0")
    with pytest.raises(UserInputError, match="holds 2.14.1, newer in the 2.14 line"):
        new_text(DATA.read_text(), older, COMPAT, datetime.date(2026, 11, 27))


def test_compat_add_cli_agrees_and_writes_nothing(index: LocalIndex, capsys: pytest.CaptureFixture[str]) -> None:
    before = DATA.read_bytes()
    assert main(["compat", "add", "tensorflow==2.20.0", "--index-url", index.url, "--no-archs"]) == 0
    out = capsys.readouterr().out
    assert "agree with compat.yaml; nothing written" in out, out
    assert DATA.read_bytes() == before


@pytest.mark.parametrize(("request_", "said"), [
    ("torch", "give FRAMEWORK==VERSION"), ("pytorch==2.x", "is not a version"),
    ("jax==0.13.0rc1", "pre-release"), ("caffe==1.0", "give FRAMEWORK==VERSION"),
    ("torch==2.99.0", "is not on"),
])
def test_compat_add_bad_input_is_one_line_exit_2(request_: str, said: str, index: LocalIndex,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compat", "add", request_, "--index-url", index.url, "--no-archs"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err



def test_an_architectures_build_the_data_lacks_gets_an_entry_of_its_own(index: LocalIndex, tmp_path: Path) -> None:
    """torch 2.15's aarch64 wheel is its CUDA 13.2 build (its METADATA): with the 2.15 architectures entry gone,
    the broad one (2.12-2.15: CUDA 12.6-13.0) does not hold it, so `compat add` writes one for the line before it,
    with the CPU facts it cannot read (another index serves that build) kept from the broad entry, and said."""
    text = DATA.read_text()
    start = text.index("  - framework: pytorch\n    versions: \"==2.15.*\"\n    arch: arm64\n")
    end = text.index("  - framework: pytorch", start + 1)
    shorter_text = text[:start] + text[end:]
    shorter = Compat.model_validate(yaml.safe_load(shorter_text))
    broad = shorter.arch_builds("pytorch", "2.15.0", "arm64")
    assert broad is not None and not broad.has_cuda("13.2")
    d = derive(SimpleIndex(index.url), "pytorch", "2.15.0", archs=False)
    assert d.facts["arch:arm64"].value == {"builds": ("13.2",), "cuda": "==13.2.*"}
    assert "aarch64.whl" in d.facts["arch:arm64"].source and "cuda-toolkit" in d.facts["arch:arm64"].source
    assert [a.state for a in compare(d, shorter) if a.key == "arch:arm64"] == ["differs"]
    updated, written = new_text(shorter_text, d, shorter, datetime.date(2026, 12, 2))
    assert len(written.machines) == 1 and written.changed
    back = Compat.model_validate(yaml.safe_load(updated))
    entry = back.arch_builds("pytorch", "2.15.0", "arm64")
    assert entry is not None and entry.versions == "==2.15.*" and entry.has_cuda("13.2") and not entry.has_cuda("13.0")
    assert entry.cpu == broad.cpu and entry.cpu_pip_name == broad.cpu_pip_name and "kept" in updated
    assert back.arch_builds("pytorch", "2.14.1", "arm64") == broad  # the other releases keep what they had
    assert [a.state for a in compare(d, back) if a.key == "arch:arm64"] == ["agrees"]


def test_tensorflow_aarch64_cuda_state_is_said_unread(index: LocalIndex) -> None:
    d = derive(SimpleIndex(index.url), "tensorflow", "2.21.0", archs=False)
    assert "arch:arm64" not in d.facts and "build_info.py" in d.unread["arch:arm64"]
