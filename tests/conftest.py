"""Shared fixtures, and each test's tier. Engine tests need a running Docker engine and the local base image
(.ci/setup-host makes both); they are never skipped in CI.

How a test gets its tier (issue 35; `make test-quick` runs tiers 1 and 2, `make test` all four): nothing is
written on the test. Its tier is the highest of
* the tiers of the fixtures it requests, directly or through other fixtures (pytest's closure, item.fixturenames),
  looked up in TIER_OF_FIXTURE below: a new fixture gets its tier by requesting one of the roots there
  (`host_tool`, `slurm_cluster`, `docker_engine`, `cpu_image`, `image_matrix`, ...), and a new test by requesting
  the fixture of what it uses;
* the tiers of the helper modules it calls into without a fixture (TIER_OF_HELPER_MODULE: the framework venvs,
  Chromium, Slurm), read from the names its code and its fixtures' code use, followed through the helper
  functions and classes of test modules they call.
  1 in-process: no engine, no host tool beyond Python and the trainimg CLI itself;
  2 host tools: framework venvs (tests/venvs.py), a real Slurm (tests/slurmcluster.py), Chromium, gitlab-ci-local,
    mpirun, hadolint, check-jsonschema;
  3 the Docker engine: the CPU PyTorch image, the registry, small test images, containers;
  4 the image matrix: the GPU variants, the other frameworks' CPU images, a release or a fleet of variants.
The markers `tier1`..`tier4`, `engine` (tier 3 and up) and `slow` (tier 4) are set from it, never by hand; a
hand-written `engine` or `slow` mark (an older test) only raises the tier to 3. `make test-quick` runs with
DOCKER_HOST pointing nowhere, so a test that reaches the engine without requesting its fixture fails there
instead of passing by luck."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from trainimg.registry.blobcache import BUDGET_ENV, CACHE_ENV

from conftest_images import *  # noqa: F401,F403  (the image matrix: gpu_images, cuda_image, framework_images)
from conftest_images import LOCAL_BASE
from conftest_registry import *  # noqa: F401,F403  (the registry fixtures: registry, fault_proxy, ...)
from conftest_runner import *  # noqa: F401,F403  (ephemeral_runner: the engine as an empty CI runner sees it)
from onceperrun import built_once
from osfixture import osfix_base, osfix_cpu_image  # noqa: F401  (images with a known pending OS fix)
from shipped import build_base, pick
from slurmcluster import slurm_cluster  # noqa: F401  (a real one-machine Slurm, session-scoped)

ROOT = Path(__file__).resolve().parent.parent
# The CPU PyTorch variant this machine can build (tests/shipped.py: its lock pins wheels the local indexes hold),
# the demo's: the image most engine tests share.
CPU = pick("pytorch", gpu=False)
CPU_VARIANT = CPU.name
assert build_base(CPU) == LOCAL_BASE, f"{CPU_VARIANT} builds on {build_base(CPU)}, not {LOCAL_BASE}"
SUITE_BLOB_CACHE = "/tmp/trainimg-test-blobs"
CPU_BUILD = [CPU_VARIANT, "--base-image", LOCAL_BASE]  # the cpu_image fixture's build (.ci/touch_images.py too)
# `make test` runs under pytest-xdist with `--dist loadgroup`. The engine tests (tier 3 and up) are in two groups, so
# two workers run them, each in order as a single process would, while the others take tiers 1 and 2. The second
# lane is the modules of RUNS_BESIDE: their tests build and push only images under their own names and get the
# suite's images through the `pinned_` fixtures (tests/onceperrun.py), so nothing the first lane does (rebuilding a
# shipped variant, which moves its tag) changes what they run. A test there that requests a MOVING fixture fails.
ENGINE_GROUP = "engine"
RUNS_GROUP = "engine-beside"
RUNS_BESIDE = {"test_gate_platforms", "test_frameworks", "test_selftest", "test_gate_mpi", "test_jobs",
               "test_conformance", "test_audit_image", "test_structure", "test_node_gate", "test_arm64",
               "test_ci_fleet"}
MOVING_FIXTURES = {"cpu_image", "framework_images", "gpu_images", "cuda_image"}  # tags a building test moves


@pytest.fixture(scope="session")
def docker_cli() -> str:
    return os.environ.get("TRAINIMG_DOCKER_CLI", "/usr/bin/docker")


@pytest.fixture(scope="session", autouse=True)
def _engine_env(docker_cli: str) -> None:
    os.environ.setdefault("TRAINIMG_DOCKER_CLI", docker_cli)
    # One blob cache (registry/blobcache.py) for every push of the suite, whatever state folder it has, and for the
    # next run on this machine: a layer is compressed once. Compression itself is tested in-process
    # (test_layers.test_a_layer_compresses_to_the_same_blob_every_time), the cache by test_blob_cache and test_layers.
    os.environ.setdefault(CACHE_ENV, SUITE_BLOB_CACHE)
    os.environ.setdefault(BUDGET_ENV, "3")


@pytest.fixture(scope="session")
def state_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose trainimg state (records, registry) lives in a temp folder."""
    env = dict(os.environ)
    env["TRAINIMG_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    return env


def default_sigint() -> None:
    """`preexec_fn` for a child a test interrupts with SIGINT: Ctrl-C's default disposition, as a terminal gives.

    A suite started in the background (`cmd &` in a script, nohup) inherits SIGINT *ignored*, and an ignored signal
    stays ignored across exec: Python then installs no KeyboardInterrupt handler and the child never sees the
    test's Ctrl-C (the run hangs until the test's timeout)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def trainimg(*args: str, env: dict[str, str] | None = None, timeout: float = 1200,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a user would, from the repository root."""
    return subprocess.run(["trainimg", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                          input=input)


def _cpu_row(state_env: dict[str, str], factory: pytest.TempPathFactory) -> dict[str, Any]:
    return built_once(factory, "cpu", CPU_BUILD, state_env, timeout=1200)[CPU_VARIANT]


@pytest.fixture(scope="session")
def cpu_image(docker_engine: str, state_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The CPU PyTorch variant built once per suite run (tests/onceperrun.py) on the local base: its tag."""
    return str(_cpu_row(state_env, tmp_path_factory)["tag"])


@pytest.fixture(scope="session")
def pinned_cpu_image(docker_engine: str, state_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The same image under the name no test moves (tests/onceperrun.py): the second engine lane's tests use this."""
    return str(_cpu_row(state_env, tmp_path_factory)["pinned"])


def remove_image(client: docker.DockerClient, ref: str) -> None:
    """Remove an image a test built (by tag or ID, forced), and its untagged parents; one already gone is fine."""
    try:
        client.api.remove_image(ref, force=True)
    except docker.errors.NotFound:
        pass


def engine_events(client: docker.DockerClient, since_ns: int, filters: dict[str, str]) -> list[dict[str, Any]]:
    """The engine's own events matching `filters` since `since_ns` (ns since the epoch), oldest first: what the
    engine did, read where the product cannot speak for it (a container it made, one it started)."""
    events = client.events(since=since_ns // 10**9, until=int(time.time()) + 1, decode=True, filters=filters)
    return [e for e in events if e.get("timeNano", 0) >= since_ns]


@pytest.fixture(scope="session")
def client(docker_engine: str) -> Iterator[docker.DockerClient]:
    """The docker SDK, for tests that look at what the CLI left in the engine."""
    c = docker.from_env(timeout=600)
    yield c
    c.close()


def cpu_recipe(name: str, repository: str, extras: str = "") -> str:
    """A test recipe: the shipped CPU PyTorch entry (`CPU`, recipes/pytorch.yaml) under another name and
    repository, so its builds hit the shipped variant's cached stages."""
    return f"""\
framework: pytorch
name: {name}
repository: {repository}
extras: [{extras}]
matrix:
  - version: ["{CPU.version}"]
    os: [{CPU.os}]
    python: ["{CPU.python}"]
"""


#: The version part of a `bare_recipe` variant's tag (recipe/variant.py `tag_version`: no framework version).
BARE_VERSION = "base-cpu-py3.11"


def bare_recipe(name: str, repository: str, extras: str = "") -> str:
    """A test recipe without a framework: the smallest image trainimg builds (Debian, Python, cloudml-hypertune; 185
    MB against the CPU PyTorch image's 1.1 GB), every step of a variant's build there, for tests whose build or push
    runs with no cache and whose subject is not the framework."""
    return (f'framework: none\nname: {name}\nrepository: {repository}\nos: debian12\npython: "3.11"\n'
            f"extras: [{extras}]\n")


# --- tiers (see the module docstring) ------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def docker_engine(docker_cli: str) -> str:
    """The Docker engine, answering: the docker CLI's path. Tier 3: every test that talks to the engine, through
    the CLI, the SDK or `trainimg build/run/test`, requests this (or a fixture that does)."""
    r = subprocess.run([docker_cli, "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        pytest.fail(f"the Docker engine does not answer ({docker_cli} version): {r.stderr.strip()[-500:]}")
    return docker_cli


@pytest.fixture(scope="session")
def host_tool() -> Callable[[str], str]:
    """`host_tool(name)`: the path of a host program a test runs (mpirun, hadolint, gitlab-ci-local, ...); one
    that is missing fails the test naming it (CI installs them all; nothing skips). Tier 2."""
    def which(name: str) -> str:
        path = shutil.which(name)
        if path is None:
            pytest.fail(f"{name} is not installed here (.ci/setup-host and `pip install -e .[test]` install it)")
        return path
    return which


@pytest.fixture(scope="session")
def framework_venv() -> Callable[[str], str]:
    """`framework_venv(name)`: the python of a framework venv ("torch", "tf", "jax", "sagemaker": tests/venvs.py,
    made once per machine from the local wheels). Tier 2."""
    from venvs import venv
    return venv


@pytest.fixture(scope="session")
def chromium_render() -> Callable[[Path, Path, Path], str]:
    """tests/chromium.py's `render_in_chromium(page, screenshot, profile)`: headless Chromium's DOM. Tier 2."""
    from chromium import render_in_chromium
    return render_in_chromium


TIER_OF_FIXTURE = {
    "host_tool": 2, "framework_venv": 2, "chromium_render": 2, "slurm_cluster": 2,
    "docker_engine": 3, "client": 3, "registry_client": 3, "docker_services": 3, "cpu_image": 3,
    "image_matrix": 4,
}
# Helper modules tests call directly (no fixture): a test that calls into one, itself or through a helper function
# of a test module or a fixture's code, gets its tier.
TIER_OF_HELPER_MODULE = {"venvs": 2, "chromium": 2, "slurmcluster": 2}
TIER_MARKS = {"engine": 3, "slow": 3}  # hand-written marks of older tests: a floor, never lower


def _code_tier(code: types.CodeType, namespace: dict[str, Any], seen: set[int]) -> int:
    """The highest helper-module tier among the globals `code` names (nested code too), following the functions
    and classes of test modules it calls into."""
    tier = 1
    for name in code.co_names:
        value = namespace.get(name)
        if value is None or id(value) in seen:
            continue
        seen.add(id(value))
        home = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if home in TIER_OF_HELPER_MODULE:
            tier = max(tier, TIER_OF_HELPER_MODULE[home])
        elif isinstance(home, str) and home.startswith(("test_", "conftest")):
            for function in _functions(value):
                tier = max(tier, _code_tier(function.__code__, function.__globals__, seen))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            tier = max(tier, _code_tier(const, namespace, seen))
    return tier


def _functions(value: Any) -> list[types.FunctionType]:
    """A function (unwrapped from functools.cache and the like), or a class's methods (a test module's helper class
    runs what its methods run)."""
    value = getattr(value, "__wrapped__", value)
    if isinstance(value, types.FunctionType):
        return [value]
    if isinstance(value, type):
        return [f for f in vars(value).values() if isinstance(f, types.FunctionType)]
    return []


def tier_of(item: pytest.Item) -> int:
    """The tier of one collected test (1..4): see the module docstring."""
    fixtures = getattr(item, "fixturenames", ())
    tier = max([1, *(TIER_OF_FIXTURE.get(f, 1) for f in fixtures)])
    tier = max([tier, *(TIER_MARKS[m.name] for m in item.iter_markers() if m.name in TIER_MARKS)])
    functions = [getattr(item, "function", None)]
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    functions += [defs[-1].func for name in fixtures for defs in [definitions.get(name)] if defs]
    seen: set[int] = set()
    for function in functions:
        if isinstance(function, types.FunctionType):
            tier = max(tier, _code_tier(function.__code__, function.__globals__, seen))
    return tier


def pytest_configure(config: pytest.Config) -> None:
    for n, what in enumerate(("in-process", "host tools", "the engine, one CPU image, a registry",
                              "the image matrix"), start=1):
        config.addinivalue_line("markers", f"tier{n}: derived from the fixtures (tests/conftest.py): {what}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier, and `engine`/`slow` from it, before `-m` selects."""
    for item in items:
        tier = tier_of(item)
        item.add_marker(f"tier{tier}")
        if tier >= 3 and not item.get_closest_marker("engine"):
            item.add_marker("engine")
        if tier >= 4 and not item.get_closest_marker("slow"):
            item.add_marker("slow")
        if tier >= 3:  # two engine lanes, one worker each; the other tests beside them (xdist)
            item.add_marker(pytest.mark.xdist_group(engine_lane(item)))


def engine_lane(item: pytest.Item) -> str:
    """RUNS_GROUP for an engine test of a RUNS_BESIDE module, else ENGINE_GROUP."""
    module = getattr(item, "module", None)
    if module is None or module.__name__ not in RUNS_BESIDE:
        return ENGINE_GROUP
    moving = sorted(set(getattr(item, "fixturenames", ())) & MOVING_FIXTURES)
    if moving:
        raise pytest.UsageError(f"{item.nodeid} runs in the second engine lane (RUNS_BESIDE) but requests "
                                f"{', '.join(moving)}, whose tags the first lane moves: request the pinned_ fixture")
    return RUNS_GROUP
