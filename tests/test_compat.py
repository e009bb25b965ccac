"""The compatibility data (builder/data/compat.yaml) loads, is complete enough to build from, and stays true.

Some facts are pinned here because wheels kept on this machine prove them; those tests read the wheel's METADATA
when the wheel is present and are skipped otherwise.
"""

from __future__ import annotations

import datetime
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from trainimg.recipe.compat import Compat, as_constraint, floor_of, load_compat, minor_of

TODAY = datetime.date(2026, 11, 23)
DATA = Path(__file__).resolve().parents[1] / "builder" / "recipe" / "data" / "compat.yaml"

# CUDA keys a framework may use without an nvidia/cuda entry under `cuda:`, mapped to why. Empty: every key has
# an image entry (builder/validate.py needs one to pick the base image). Add a reason here before adding a key.
EXPLAINED_CUDA_KEYS: dict[tuple[str, str], str] = {}

NVIDIA_WHEEL_PREFIXES = ("nvidia-nccl-cu12", "nvidia-nccl-cu13")


@pytest.fixture(scope="module")
def compat() -> Compat:
    return load_compat()


def _wheel_metadata(pattern: str, *dirs: str) -> dict[str, list[str]] | None:
    for d in dirs:
        for wheel in sorted(Path(d).glob(pattern)):
            with zipfile.ZipFile(wheel) as zf:
                name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
                msg = Parser().parsestr(zf.read(name).decode("utf-8"))
            return {key: msg.get_all(key) or [] for key in ("Version", "Requires-Python", "Requires-Dist")}
    return None


def _pin(requires: list[str], name: str) -> str:
    """The exact version a Requires-Dist list pins for `name` (==X), ignoring markers."""
    for line in requires:
        req = Requirement(line)
        if req.name == name:
            (spec,) = list(req.specifier)
            assert spec.operator == "=="
            return spec.version
    raise AssertionError(f"{name} not required")


# --- shape ---------------------------------------------------------------------------------------------


def test_loads(compat: Compat) -> None:
    assert set(compat.frameworks) == {"pytorch", "tensorflow", "jax"}
    assert compat.cuda and compat.operating_systems and compat.hypertune


def test_yaml_is_plain_data() -> None:
    raw = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    assert isinstance(raw, dict)


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "jax"])
def test_at_least_three_release_lines(compat: Compat, framework: str) -> None:
    releases = compat.frameworks[framework].releases
    lines = {r.line for r in releases}
    assert len(lines) >= 3
    assert len(lines) == len(releases), "one entry per release line"


def test_required_lines_present(compat: Compat) -> None:
    for framework, versions in {
        "pytorch": ["2.12", "2.13", "2.14"],
        "tensorflow": ["2.19", "2.20", "2.21"],
        "jax": ["0.10", "0.11"],
    }.items():
        for v in versions:
            assert compat.release(framework, v) is not None, (framework, v)


def test_required_cuda_lines(compat: Compat) -> None:
    for line in ["12.5", "12.6", "12.8", "12.9", "13.0", "13.2"]:
        assert line in compat.cuda
    for key, image in compat.cuda.items():
        assert minor_of(image.image_version) == key
        assert image.os and set(image.os) <= set(compat.operating_systems)


def test_framework_cuda_keys_known(compat: Compat) -> None:
    for name, fw in compat.frameworks.items():
        for rel in fw.releases:
            for key in rel.cuda:
                assert key in compat.cuda or (name, key) in EXPLAINED_CUDA_KEYS, (name, rel.version, key)
                assert minor_of(key) == key


def test_every_framework_cuda_key_has_an_os_with_a_supported_python(compat: Compat) -> None:
    """Each (release, CUDA line) can be built on at least one OS whose apt Python the release supports."""
    for name, fw in compat.frameworks.items():
        for rel in fw.releases:
            for key in rel.cuda:
                image = compat.cuda[key]
                pythons = [py for os_ in image.os for py in compat.operating_systems[os_].python]
                assert any(Version(py + ".0") in rel.python_spec for py in pythons), (name, rel.version, key)


def test_every_gpu_variant_pins_matching_nccl_wheel(compat: Compat) -> None:
    for fw in compat.frameworks.values():
        for rel in fw.releases:
            for key, variant in rel.cuda.items():
                major = Version(key).major
                assert variant.nccl_wheel in NVIDIA_WHEEL_PREFIXES
                assert variant.nccl_wheel.endswith(f"cu{major}"), (rel.version, key)


# --- values parse ----------------------------------------------------------------------------------------


def _sources(compat: Compat) -> list[str]:
    out = [o.source for o in compat.operating_systems.values()]
    out += [c.source for c in compat.cuda.values()]
    out += [r.source for fw in compat.frameworks.values() for r in fw.releases]
    out.append(compat.nccl.source)
    return out


def test_every_source_is_https(compat: Compat) -> None:
    for src in _sources(compat):
        assert src.startswith("https://") and " " not in src, src


def test_every_version_parses(compat: Compat) -> None:
    versions = [compat.nccl.minimum, *compat.hypertune]
    for os_ in compat.operating_systems.values():
        versions += list(os_.python)
    for image in compat.cuda.values():
        versions += [image.image_version] + [v for v in (image.cudnn, image.nccl) if v is not None]
    for fw in compat.frameworks.values():
        for rel in fw.releases:
            versions.append(rel.version)
            SpecifierSet(rel.python)
            for variant in rel.cuda.values():
                for spec in (variant.cudnn, variant.nccl, variant.cuda_lines):
                    assert str(SpecifierSet(spec)), spec
                if variant.tested is not None:
                    versions += [v for v in (variant.tested.cudnn, variant.tested.nccl) if v is not None]
    for v in versions:
        Version(v)


def test_pip_indexes_are_https(compat: Compat) -> None:
    for fw in compat.frameworks.values():
        for rel in fw.releases:
            urls = [rel.cpu_pip_index] + [v.pip_index for v in rel.cuda.values()]
            for url in filter(None, urls):
                assert url.startswith("https://"), url


def test_nccl_pins_meet_reduction_server_floor(compat: Compat) -> None:
    floor = Version(compat.nccl.minimum)
    assert floor == Version("2.7")
    for fw in compat.frameworks.values():
        for rel in fw.releases:
            for variant in rel.cuda.values():
                assert floor_of(variant.nccl) >= floor
    for image in compat.cuda.values():
        if image.nccl is not None:
            assert Version(image.nccl) >= floor


def test_released_dates_not_in_future(compat: Compat) -> None:
    for fw in compat.frameworks.values():
        for rel in fw.releases:
            assert rel.released <= TODAY, rel.version


def test_os_python_versions_fit_some_release(compat: Compat) -> None:
    """Every OS offers at least one Python that some release of every framework supports."""
    for os_name, os_ in compat.operating_systems.items():
        for name, fw in compat.frameworks.items():
            assert any(
                Version(py + ".0") in rel.python_spec for py in os_.python for rel in fw.releases
            ), (os_name, name)


def test_release_lookup_api(compat: Compat) -> None:
    assert compat.release("pytorch", "2.14.0").version == "2.14.1"
    assert compat.release("pytorch", "1.0") is None
    assert compat.known_versions("jax") == sorted(compat.known_versions("jax"), key=Version)


# --- facts the local wheels prove ----------------------------------------------------------------------------


def test_torch_2_14_1_is_cuda_13_0_build(compat: Compat) -> None:
    rel = compat.release("pytorch", "2.14.1")
    assert rel is not None and rel.version == "2.14.1"
    cu130 = rel.cuda["13.0"]
    assert (cu130.cudnn, cu130.nccl, cu130.nccl_wheel) == ("==9.24.0.43", "==2.30.7", "nvidia-nccl-cu13")
    assert cu130.pip_index is None  # the PyPI default build
    meta = _wheel_metadata("torch-2.14.1-*.whl", "/opt/pypi-more/files")
    if meta is None:
        pytest.fail("torch 2.14.1 wheel not on this machine: CI's machines ship it")
    assert meta["Version"] == ["2.14.1"]
    assert _pin(meta["Requires-Dist"], "nvidia-cudnn-cu13") == as_constraint(cu130.cudnn)
    assert _pin(meta["Requires-Dist"], "nvidia-nccl-cu13") == as_constraint(cu130.nccl)


def test_torch_2_13_cpu_wheel(compat: Compat) -> None:
    rel = compat.release("pytorch", "2.13")
    assert rel is not None and rel.version == "2.13.0" and rel.cpu
    assert rel.cpu_pip_index == "https://download.pytorch.org/whl/cpu"
    meta = _wheel_metadata("torch-2.13.0+cpu-*.whl", "/opt/wheels")
    if meta is None:
        pytest.fail("torch 2.13.0+cpu wheel not on this machine: CI's machines ship it")
    assert meta["Version"] == ["2.13.0+cpu"]
    assert not any(r.startswith("nvidia-") for r in meta["Requires-Dist"])
    assert Version("3.11") in rel.python_spec


def test_tensorflow_cpu_2_21_for_python_3_11(compat: Compat) -> None:
    rel = compat.release("tensorflow", "2.21")
    assert rel is not None and rel.version == "2.21.0"
    assert rel.cpu and rel.cpu_pip_name == "tensorflow-cpu"
    assert Version("3.11") in rel.python_spec
    meta = _wheel_metadata("tensorflow_cpu-2.21.0-cp311-*.whl", "/opt/pypi/files")
    if meta is None:
        pytest.fail("tensorflow-cpu 2.21.0 wheel not on this machine: CI's machines ship it")
    assert meta["Version"] == ["2.21.0"]
    # the and-cuda ranges recorded for 2.21 are the wheel's own, bounds and all
    variant = rel.cuda["12.5"]
    reqs = [Requirement(r) for r in meta["Requires-Dist"]]
    ranges = {r.name: r.specifier for r in reqs if r.marker and "and-cuda" in str(r.marker)}
    assert ranges["nvidia-cudnn-cu12"] == SpecifierSet(variant.cudnn)
    assert ranges["nvidia-nccl-cu12"] == SpecifierSet(variant.nccl)
    runtime = ranges["nvidia-cuda-runtime-cu12"]  # >=12.5.82,<13.0: the CUDA 12 lines from 12.5 up
    assert all((Version(f"{line}.999") in runtime) == (line in SpecifierSet(variant.cuda_lines))
               for line in ("12.4", "12.5", "12.6", "12.9", "13.0"))


def test_jax_0_10_2_for_python_3_11(compat: Compat) -> None:
    rel = compat.release("jax", "0.10.2")
    assert rel is not None and rel.version == "0.10.2"
    assert Version("3.11") in rel.python_spec
    assert {v.pip_extra for v in rel.cuda.values()} == {"cuda12", "cuda13"}
    for pattern in ("jax-0.10.2-*.whl", "jaxlib-0.10.2-cp311-*.whl"):
        meta = _wheel_metadata(pattern, "/opt/pypi/files")
        if meta is None:
            pytest.fail(f"{pattern} not on this machine: CI's machines ship it")
        assert meta["Version"] == ["0.10.2"]
        assert Version("3.11") in SpecifierSet(meta["Requires-Python"][0])


def test_jax_0_11_dropped_python_3_11(compat: Compat) -> None:
    rel = compat.release("jax", "0.11")
    assert rel is not None
    assert Version("3.11") not in rel.python_spec and Version("3.12") in rel.python_spec
