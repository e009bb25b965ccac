"""Layers (issue 34): the lock's layer groups, every RUN sealed, and two cold builds giving the same layers.

The group and seal checks are generated from the tables (runtime/lockgroups.py, plan/reproducible.py) over every
shipped variant. The engine tests build a framework-less variant (tests/conftest.py `bare_recipe`: every step of a
variant's build, 185 MB) with no cache, release it to the compose registry, and `trainimg verify` rebuilds it with no
cache: every layer identical; against the same build pushed as eStargz in the gate's prefetch order, identical from
its TOCs. A tampered image under the tag is then named layer by layer and file by file. The same
figure for the 1.1 GB CPU PyTorch variant is `layers_reproducible` in benchmarks/layers.py: two cold builds of it
cost this module four minutes of the suite's two CPUs, and its framework install is the same step.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import buildkitlog
import docker
import pytest
from conftest import BARE_VERSION, CPU_VARIANT, LOCAL_BASE, ROOT, bare_recipe, remove_image, trainimg
from conftest_registry import RegistryLogin
from enginerecorder import EngineRecorder
from shipped import pick

from trainimg.plan import blocks
from trainimg.recipe.compat import load_compat
from trainimg.plan.requirements import lock_states
from trainimg.plan.reproducible import BASE_FILES, LAYER_EPOCH, MOUNT_ROOT, SEAL_BEGIN, SEAL_END, base_files_tar
from trainimg.plan.installer import LOCKS_STAGE
from trainimg.plan.stages import INSTALLER_STAGE, plans
from trainimg.engine.docker import DockerEngine
from trainimg.registry.layerfiles import differences, entries, saved_layer_entries, saved_layers
from trainimg.registry.blobpush import push_saved
from trainimg.registry.layerformats import gzip_layer
from trainimg.registry.layerformats import OCI_MANIFEST, OCI_ZSTD_LAYER
from trainimg.registry.references import RegistryTarget
from trainimg.registry.referrers import referrers
from trainimg.runtime.sbom import MEDIA_TYPE as SBOM_TYPE
from trainimg.publish.verify import compare, report_lines
from trainimg.registry.estargz import NO_PREFETCH_LANDMARK, PREFETCH_LANDMARK, TOC_DIGEST
from trainimg.registry.estargzread import Toc, read_toc
from trainimg.registry.registryapi import RegistryAPI, sha256_digest
from trainimg.recipe.loading import load_recipes
from trainimg.render.dockerfile import render_plan
from trainimg.runtime import lockgroups

SHIPPED = load_recipes(ROOT / "recipes")
# Every variant with a lock of pins (one marked not lockable here holds none: its build refuses it).
LOCKED = [v for v in SHIPPED.variants if v.name in {s.variant for s in lock_states(SHIPPED.variants, load_compat(), ROOT)
                                                   if s.state not in ("missing", "unlockable")}]
# The engine tests build a framework-less recipe of their own (tests/conftest.py bare_recipe): no-cache builds make
# new image IDs, which no other test on the same engine gates or pushes.
TEST_NAME = "layerstest"
TEST_VARIANT = TEST_NAME  # a recipe without a matrix: the variant is named as the recipe
CPU_TAG = f"trainimg-test/{TEST_NAME}:{BARE_VERSION}"
LANDMARKS = (PREFETCH_LANDMARK, NO_PREFETCH_LANDMARK)


# -- the lock's layer groups ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", LOCKED, ids=lambda v: v.name)
def test_every_lock_entry_is_in_exactly_one_group(variant: Any) -> None:
    lock = (ROOT / "images" / variant.name / "requirements.lock").read_text(encoding="utf-8")
    names = [name for name, _ in lockgroups.entries(lock)]
    extras = blocks.own_extras(variant)
    grouped = {g: [n for n, _ in lockgroups.entries(lockgroups.select(lock, g, extras))]
               for g in lockgroups.GROUP_NAMES}
    assert sorted(n for ns in grouped.values() for n in ns) == sorted(names)
    assert "".join(lockgroups.select(lock, g, extras) for g in lockgroups.GROUP_NAMES).count("--hash=sha256:") == \
        lock.count("--hash=sha256:")  # every hash line kept: each group installs with the lock's checking
    filled = {g for g, ns in grouped.items() if ns}
    if variant.gpu and variant.framework != "none":
        assert {"cuda", "nccl", lockgroups.FRAMEWORK} <= filled, grouped
        assert all(n.startswith("nvidia-nccl") for n in grouped["nccl"])
    else:
        assert not filled & set(lockgroups.GPU_ONLY), grouped
    # every group that can hold a pin has its step: no pin of a lock can go uninstalled (a framework-less variant's
    # extras included); the extras' group only where the recipe has extras of its own, the only names it can hold
    assert set(blocks.install_groups(variant)) == set(lockgroups.GROUP_NAMES) - (
        set() if extras else {lockgroups.EXTRAS})
    assert bool(grouped[lockgroups.EXTRAS]) == bool(extras)


@pytest.mark.parametrize("group, pattern", [(g, p) for g, ps in lockgroups.LAYER_GROUPS for p in ps])
def test_each_pattern_of_the_table_names_its_group(group: str, pattern: str) -> None:
    name = pattern.replace("*", "x-lib")
    assert lockgroups.group_of(name) == group
    assert lockgroups.group_of(name.upper().replace("-", "_")) == group  # names are compared normalised
    # a recipe's extra that a pattern claims stays with its libraries; the others go on top, in the extras' group
    assert lockgroups.group_of(name, [name, "Six"]) == group
    assert lockgroups.group_of("six", [name, "Six"]) == lockgroups.EXTRAS


@pytest.mark.parametrize("extras", [[], ["six==1.16.0"], ["six==1.16.0", "nvidia-cublas-cu12==12.4.5.8"],
                                    ["nvidia-cublas-cu12==12.4.5.8"]], ids=["none", "own", "own-and-claimed", "claimed"])
def test_a_recipes_own_extras_get_the_top_step_and_nothing_else_does(extras: list[str], tmp_path: Path) -> None:
    """The extras' step is the last install step of a variant whose recipe pins names no pattern claims, and the
    locks stage passes those names to the splitter; a variant without such extras renders no extras' step."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "own.yaml").write_text(bare_recipe("own", "trainimg-test/own", ", ".join(extras)), encoding="utf-8")
    (variant,) = load_recipes(recipes).variants
    own = blocks.own_extras(variant)
    assert own == (("six",) if any(e.startswith("six") for e in extras) else ())
    text = render_plan(next(iter(plans(load_recipes(recipes)))))
    installs = re.findall(rf"from={LOCKS_STAGE},source=[^,]+/(\w+)\.lock,", text)  # each install step's slice
    expected = [g for g in lockgroups.GROUP_NAMES if g != lockgroups.EXTRAS or own]
    assert installs == expected, installs
    splitter = next(line for line in text.splitlines() if "lockgroups.py \"$group\"" in line)
    assert splitter.rstrip("; \\").endswith(".lock" + "".join(f" {n}" for n in own)), splitter


def test_an_unmatched_name_is_the_framework_group() -> None:
    assert lockgroups.group_of("torch") == lockgroups.FRAMEWORK


def test_the_splitter_runs_as_the_build_runs_it(tmp_path: Path) -> None:
    """`python lockgroups.py GROUP LOCK OUT` with the standard library only, as the install steps mount it."""
    v = pick("pytorch", gpu=True)  # the GPU PyTorch variant (tests/shipped.py), its NCCL pinned by its recipe
    lock = ROOT / "images" / v.name / "requirements.lock"
    out = tmp_path / "nccl.lock"
    script = ROOT / "builder" / "runtime" / "lockgroups.py"
    r = subprocess.run([sys.executable, "-I", str(script), "nccl", str(lock), str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    wheel = load_compat().build("pytorch", v.version or "", v.cuda or "")[1].nccl_wheel
    assert out.read_text().startswith(f"{wheel}=={v.nccl} \\\n    --hash=sha256:")
    assert "#" not in out.read_text()  # no `# via` lines: the slice changes only with its group's pins
    bad = subprocess.run([sys.executable, "-I", str(script), "nccl"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    # a name the recipe's extras pin, after the files: its entry leaves the framework's slice for the extras'
    framework = lockgroups.entries(lockgroups.select(lock.read_text(), lockgroups.FRAMEWORK))
    name = framework[-1][0]
    slices = {}
    for group in (lockgroups.FRAMEWORK, lockgroups.EXTRAS):
        r = subprocess.run([sys.executable, "-I", str(script), group, str(lock), str(tmp_path / group), name],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        slices[group] = [n for n, _ in lockgroups.entries((tmp_path / group).read_text())]
    assert slices[lockgroups.EXTRAS] == [name]
    assert slices[lockgroups.FRAMEWORK] == [n for n, _ in framework[:-1]]


# -- every RUN of every image sealed -------------------------------------------------------------------------------


def _instructions(text: str) -> list[tuple[str, str]]:
    """(stage, instruction) for each instruction of a Dockerfile, continuation lines joined."""
    out, stage = [], ""
    for line in text.replace("\\\n", " ").splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            stage = line.split()[-1]
        out.append((stage, line))
    return out


@pytest.mark.parametrize("plan", plans(SHIPPED), ids=lambda p: p.key)  # every architecture's Dockerfile
def test_every_run_in_the_image_is_sealed_and_mounts_under_dev(plan: Any) -> None:
    steps = [(s, i) for s, i in _instructions(render_plan(plan)) if s not in (INSTALLER_STAGE, LOCKS_STAGE)]
    runs = [i for _, i in steps if i.startswith("RUN ")]
    assert runs
    for run in runs:
        # a step's own mounts, then the seal: everything it writes gets LAYER_EPOCH
        assert re.sub(r"^RUN (--mount=\S+\s+)*", "", run).startswith(SEAL_BEGIN.split(" && ")[0]), run[:200]
        assert run.rstrip().endswith(SEAL_END), run[-200:]
        for target in re.findall(r"--mount=\S*target=([^,\s]+)", run):
            assert target.startswith(f"{MOUNT_ROOT}/"), target  # no mount point ever lands in a layer
        assert "/run/secrets" not in run and "rmdir" not in run  # nothing removed from a lower layer
    copies = [i for _, i in steps if i.startswith(("COPY ", "ADD "))]
    assert copies == [f"ADD {BASE_FILES} /"] or (plan.variant.extends and copies == [])


def test_the_committed_base_files_are_what_the_code_makes() -> None:
    assert (ROOT / BASE_FILES).read_bytes() == base_files_tar()
    with tarfile.open(ROOT / BASE_FILES) as tar:
        assert {m.name: m.mtime for m in tar} == {"etc": LAYER_EPOCH, "etc/hosts": LAYER_EPOCH}


# -- deterministic compression, file differences -------------------------------------------------------------------


def _layer_tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mtime) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_a_layer_compresses_to_the_same_blob_every_time(tmp_path: Path) -> None:
    """Three pieces deflated on one thread and on four give one blob, which gunzip reads back whole."""
    data = b"".join(hashlib.sha256(str(i).encode()).hexdigest().encode() * (i % 7 + 1) for i in range(60_000))
    layer = _layer_tar({"etc/a": (b"a" * 100_000, LAYER_EPOCH), "opt/b": (data, LAYER_EPOCH)})
    assert len(layer) > 2 * (4 << 20)
    digests = {gzip_layer(io.BytesIO(layer), tmp_path / f"{i}.gz", ThreadPoolExecutor(threads))
               for i, threads in enumerate((1, 4, 1))}
    assert len(digests) == 1
    header = (tmp_path / "0.gz").read_bytes()[:10]
    assert header[4:8] == b"\0\0\0\0" and not header[3] & 0x08  # no time, no file name in the gzip header
    assert subprocess.run(["gzip", "-dc", tmp_path / "1.gz"], capture_output=True, check=True).stdout == layer


def test_differences_name_path_size_mode_time_and_content() -> None:
    ours = entries(io.BytesIO(_layer_tar({"etc/a": (b"one", LAYER_EPOCH), "etc/b": (b"same", LAYER_EPOCH)})))
    theirs = entries(io.BytesIO(gzip.compress(_layer_tar({"etc/a": (b"three", 1), "etc/b": (b"same", LAYER_EPOCH),
                                                          "etc/c": (b"", LAYER_EPOCH)}))))
    lines = differences(ours, theirs)
    assert lines[0].startswith("etc/a: size 3 != 5, mtime 315532800 != 1, content sha256:")
    assert lines[1:] == ["etc/c: only in the registry's layer"]


# -- two cold builds, a release and `verify` on the engine and the compose registry --------------------------------


@pytest.fixture(scope="module")
def released(registry: RegistryLogin, state_env: dict[str, str], client: docker.DockerClient,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The test's variant built with no cache, gated and pushed under a prefix of this module."""
    recipes = tmp_path_factory.mktemp("layers") / "recipes"
    recipes.mkdir()
    (recipes / f"{TEST_NAME}.yaml").write_text(bare_recipe(TEST_NAME, f"trainimg-test/{TEST_NAME}"), encoding="utf-8")
    env = {**state_env, "TRAINIMG_REGISTRY_PASSWORD": registry.password, "TRAINIMG_RECIPES": str(recipes)}
    target = f"{registry.host}/glayers{uuid.uuid4().hex[:8]}"
    # Its lock, compiled once and kept as a committed one is: a lock compiled for each build records the wheel
    # server's port of that build in its header, and the image keeps the lock.
    r = trainimg("lock", TEST_VARIANT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    r = trainimg("build", TEST_VARIANT, "--no-cache", "--base-image", LOCAL_BASE, "--progress", "plain", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert_ran_every_step(r.stdout + r.stderr)
    layers = client.api.inspect_image(CPU_TAG)["RootFS"]["Layers"]
    r = trainimg("test", TEST_VARIANT, "--replicas", "2", "--progress", "quiet", env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    r = trainimg("push", TEST_VARIANT, "--registry", target, "--username", registry.username, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    api = RegistryAPI(RegistryTarget.parse(target), {"username": registry.username, "password": registry.password})
    yield {"env": env, "target": target, "layers": layers, "api": api, "digest": pushed_digest(r.stdout)}
    remove_image(client, f"{target}/{CPU_TAG}")
    remove_image(client, CPU_TAG)


def pushed_digest(stdout: str) -> str:
    """The manifest digest `trainimg push` of one variant says it pushed."""
    (digest,) = re.findall(r"^pushed \S+@(sha256:[0-9a-f]{64}) \(", stdout, re.M)
    return str(digest)


def verify(released: dict[str, Any], registry: RegistryLogin, where: str = "") -> subprocess.CompletedProcess[str]:
    r = trainimg("verify", TEST_VARIANT, "--registry", where or released["target"], "--username", registry.username,
                 "--base-image", LOCAL_BASE, "--progress", "plain", env=released["env"], timeout=1200)
    assert_ran_every_step(r.stdout + r.stderr)  # a rebuild from the cache the first build left compares nothing
    return r


def assert_ran_every_step(log: str) -> None:
    """BuildKit's plain log of a build with no cache: steps ran (`#N DONE`), none was answered from the cache (the
    base image's FROM is said CACHED with --no-cache too: it is the image, not a step)."""
    titles = buildkitlog.titles(log)
    assert buildkitlog.ended(log, "DONE ") and titles, log[-3000:]
    cached = [titles[n] for n in buildkitlog.ended(log, "CACHED$") if "] FROM " not in titles[n]]
    assert cached == [], f"{len(cached)} steps from the cache: {cached}\n" + log[-3000:]


def test_push_upload_client_sends_no_layer_the_registry_holds(released: dict[str, Any],
                                                              registry: RegistryLogin) -> None:
    """`trainimg push --upload client` of the released image again: every layer is in the registry, 0 bytes. (Before
    `verify`, whose rebuild is a new image ID without a conformance record, which push then refuses.)"""
    r = trainimg("push", TEST_VARIANT, "--registry", released["target"], "--username", registry.username,
                 "--upload", "client", env=released["env"], timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"^pushed \S+@sha256:[0-9a-f]{64} \(0 bytes uploaded\)$", r.stdout, re.M), r.stdout


def test_a_push_by_image_reference_is_that_image_not_an_index(released: dict[str, Any], registry: RegistryLogin,
                                                               client: docker.DockerClient) -> None:
    """`trainimg push IMAGE` (a reference, not a variant: no architecture list) puts the image's own manifest under
    its tag, the one the variant's push gave. It used to put an OCI index naming no manifest there: a tag no node
    could pull ("no matching manifest for linux/amd64 in the manifest list entries")."""
    by_ref = f"{released['target']}/byref"
    r = trainimg("push", CPU_TAG, "--registry", by_ref, "--username", registry.username, env=released["env"],
                 timeout=900)
    remove_image(client, f"{by_ref}/{CPU_TAG}")
    assert r.returncode == 0, r.stderr[-3000:]
    api = replace(released["api"], target=RegistryTarget.parse(by_ref))
    name, tag = CPU_TAG.split(":")
    got = api.manifest_json(api.target.repository(name), tag)
    assert got is not None, f"nothing under {by_ref}/{CPU_TAG}"
    body, media_type, digest = got
    assert "layers" in json.loads(body) and "index" not in media_type and "list" not in media_type, media_type
    assert digest == pushed_digest(r.stdout) == released["digest"]


def test_a_zstd_push_goes_beside_with_its_sbom(released: dict[str, Any], registry: RegistryLogin,
                                               client: docker.DockerClient) -> None:
    """`push --compression zstd` into a repository of its own (gzip consumers keep theirs): an OCI manifest of
    `tar+zstd` layers, its SBOM beside it as a referrer of that manifest. (Before `verify`'s rebuild, as above.)"""
    zstd = f"{released['target']}/zstd"
    r = trainimg("push", TEST_VARIANT, "--registry", zstd, "--username", registry.username, "--compression", "zstd",
                 env=released["env"], timeout=900)
    remove_image(client, f"{zstd}/{CPU_TAG}")  # the name the push gave the image
    assert r.returncode == 0, r.stderr[-3000:]
    digest = pushed_digest(r.stdout)
    api = replace(released["api"], target=RegistryTarget.parse(zstd))
    repository = api.target.repository(CPU_TAG.split(":")[0])
    body, media_type, _ = api.manifest_json(repository, digest)
    assert media_type == OCI_MANIFEST and {m["mediaType"] for m in json.loads(body)["layers"]} == {OCI_ZSTD_LAYER}
    assert digest != released["digest"] and referrers(api, repository, digest, SBOM_TYPE)


def test_an_estargz_push_for_verify_goes_in_the_gates_order(released: dict[str, Any], registry: RegistryLogin,
                                                            client: docker.DockerClient) -> None:
    """`push --compression estargz` of the gated image into a repository of its own: its layers written in the
    gate's prefetch order, the landmark after the files it read; `verify`'s comparison with the rebuild is below.
    (Before `verify`'s rebuild, as above.)"""
    estargz = f"{released['target']}/esgz"
    r = trainimg("push", TEST_VARIANT, "--registry", estargz, "--username", registry.username, "--compression",
                 "estargz", env=released["env"], timeout=900)
    remove_image(client, f"{estargz}/{CPU_TAG}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "no prefetch order" not in r.stdout + r.stderr, r.stdout
    api = replace(released["api"], target=RegistryTarget.parse(estargz))
    repository = api.target.repository(CPU_TAG.split(":")[0])
    layers = json.loads(api.manifest_json(repository, pushed_digest(r.stdout))[0])["layers"]  # type: ignore[index]
    landmarks = [next(e["name"] for e in _toc(api, repository, layer).entries if e["name"] in LANDMARKS)
                 for layer in layers]
    assert PREFETCH_LANDMARK in landmarks, landmarks  # the gate's order reordered a layer
    released["estargz"] = estargz  # the comparison's registry, after the rebuild


def _toc(api: RegistryAPI, repository: str, layer: dict[str, Any]) -> Toc:
    return read_toc(lambda start, end: api.blob_range(repository, layer["digest"], start, end), layer["size"],
                    layer["annotations"][TOC_DIGEST], layer["digest"])


def test_a_cold_rebuild_verifies_identical_layer_for_layer(released: dict[str, Any], registry: RegistryLogin,
                                                           client: docker.DockerClient) -> None:
    """The core of the issue: two builds without cache give the same digest for every layer and, the client having
    pushed the config with fixed times, the same config digest (and `verify`, rebuilding with no cache, says so from
    the digests, exit 0)."""
    r = verify(released, registry)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    count = len(released["layers"])
    assert count >= 7 and f": identical, {count} of {count} layers: the rebuild's config is the registry's" in r.stdout
    assert client.api.inspect_image(CPU_TAG)["RootFS"]["Layers"] == released["layers"]


def test_a_cold_rebuild_verifies_identical_against_the_estargz_push(released: dict[str, Any],
                                                                    registry: RegistryLogin) -> None:
    """`verify` against the eStargz push of the gated build (another no-cache rebuild): identical, exit 0, every
    layer from its TOC (not its blob), the config that names the eStargz tars' diff IDs the registry's; no TOC,
    landmark or order named as a difference. `sbom --registry` reads the SBOM beside that push."""
    assert "estargz" in released, "test_an_estargz_push_for_verify_goes_in_the_gates_order pushes what this compares"
    r = verify(released, registry, released["estargz"])
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    count = len(released["layers"])
    assert f": identical, {count} of {count} layers: the rebuild's config, naming the eStargz tars' diff IDs, is " \
           f"the registry's, sha256:" in r.stdout and f"; {count} eStargz layers hold the rebuild's entries byte " \
           "for byte" in r.stdout, r.stdout
    r = trainimg("sbom", TEST_VARIANT, "--registry", released["estargz"], "--username", registry.username,
                 env=released["env"], timeout=300)
    assert r.returncode == 0 and json.loads(r.stdout)["bomFormat"] == "CycloneDX", r.stderr[-3000:]


def test_two_cold_builds_push_one_digest(released: dict[str, Any], registry: RegistryLogin,
                                         client: docker.DockerClient) -> None:
    """The contract of issue 47: two `build --no-cache` of a CPU variant, each tested and pushed by `trainimg push` to
    a fresh repository, give the same manifest digest (the first: the module's release; the second: `verify`'s
    rebuild above, tested and pushed here)."""
    r = trainimg("test", TEST_VARIANT, "--replicas", "2", "--progress", "quiet", env=released["env"], timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    again = f"{released['target']}/again"
    r = trainimg("push", TEST_VARIANT, "--registry", again, "--username", registry.username, env=released["env"],
                 timeout=900)
    remove_image(client, f"{again}/{CPU_TAG}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert pushed_digest(r.stdout) == released["digest"]
    released["again"] = again  # the next test's fresh repository


def test_no_layer_deletes_a_file_of_a_lower_one(released: dict[str, Any], client: docker.DockerClient,
                                                tmp_path: Path) -> None:
    """Add-only layers: a whiteout (`.wh.<name>`) carries the time of the deletion. Opaque-folder markers
    (`.wh..wh..opq`, a folder made anew) are written with time 0 and stay."""
    saved = tmp_path / "image.tar"
    DockerEngine(client).save(CPU_TAG, saved)
    whiteouts = []
    with saved_layers(saved) as (names, _):
        count = len(names)
    for index in range(count):
        whiteouts += [f"layer {index + 1}: {p}" for p in saved_layer_entries(saved, index)
                      if p.rsplit("/", 1)[-1].startswith(".wh.") and not p.endswith(".wh..wh..opq")]
    assert whiteouts == []


def test_the_client_push_sends_only_the_layers_the_registry_lacks(released: dict[str, Any]) -> None:
    """A runner with an empty engine: the rebuilt image's layers are all in the registry (the release pushed
    them), so pushing it under another tag sends none; into the repository the push above filled a second push sends
    nothing. The registry then holds the same image as the engine (`compare`: the same config digest)."""
    api = released["api"]
    name, tag = CPU_TAG.split(":")
    repository = api.target.repository(name)
    again = push_saved(DockerEngine(), CPU_TAG, api, repository, f"{tag}-client", also_known=[tag])
    assert (again.uploaded, again.bytes_uploaded) == ([], 0)
    fresh_api = replace(api, target=RegistryTarget.parse(released["again"]))
    fresh = fresh_api.target.repository(name)
    second = push_saved(DockerEngine(), CPU_TAG, fresh_api, fresh, tag)
    body, _, _ = api.manifest_json(repository, tag)  # type: ignore[misc]
    held = sum(layer["size"] for layer in json.loads(body)["layers"])
    assert second.layers == len(released["layers"]) and second.compressed_bytes == held > 40_000_000  # Debian alone
    assert (second.uploaded, second.digest) == ([], released["digest"])  # deterministic: the same blobs, manifest
    verdict = compare(DockerEngine(), replace(api, target=replace(api.target, prefix="")), CPU_TAG,
                      f"{fresh}:{tag}")
    assert verdict.identical and verdict.config, verdict


def test_a_layer_is_compressed_once_then_sent_from_the_blob_cache(registry: RegistryLogin, tmp_path: Path) -> None:
    """The blob cache (registry/blobcache.py): a runner whose state folder starts empty (no layer memory, so nothing
    to mount from) but keeps its cache folder sends the base image's layer into a new repository from the cache,
    the same blob, compressed by the first push only, and with the config the first push kept there never asks the
    engine for a `docker save`; a cached blob whose bytes changed is compressed again, from a save."""
    from trainimg.options.compression import DEFAULT_COMPRESSION
    from trainimg.registry.blobcache import BlobCache
    from trainimg.registry.layermemory import LayerMemory

    api = RegistryAPI(RegistryTarget.parse(f"{registry.host}/gblobs{uuid.uuid4().hex[:8]}"),
                      {"username": registry.username, "password": registry.password})
    cache = BlobCache(tmp_path / "cache", 1 << 30)

    def push_from_fresh_state(n: int) -> tuple[Any, list[str]]:
        """The push, and the `docker save` requests it sent the engine (through a recorder in front of it)."""
        memory = replace(LayerMemory.under(tmp_path / f"state{n}"), blobs=cache)
        (tmp_path / f"engine{n}").mkdir()
        recorder = EngineRecorder(tmp_path / f"engine{n}")
        try:
            engine = DockerEngine(docker.DockerClient(base_url=recorder.docker_host))
            pushed = push_saved(engine, LOCAL_BASE, api, api.target.repository(f"base{n}"), "t", memory=memory)
        finally:
            recorder.stop()
        return pushed, [line for line in recorder.requests if re.search(r"^GET /\S*/images/(\S+/)?get(\?|$)", line)]

    first, saves = push_from_fresh_state(1)
    assert len(saves) == 1, saves
    assert first.layers == 1 and len(first.uploaded) == 1 and first.cached == [], first
    base = DockerEngine().image(LOCAL_BASE)
    assert base is not None
    (diff_id,) = base.layers
    kept = cache.find(diff_id, DEFAULT_COMPRESSION)
    assert kept is not None and kept.digest == first.uploaded[0]
    second, saves = push_from_fresh_state(2)
    assert (second.uploaded, second.cached, second.mounted, saves) == (first.uploaded, first.uploaded, [], [])
    assert (second.digest, second.bytes_uploaded) == (first.digest, first.bytes_uploaded)
    damaged = bytearray(kept.path.read_bytes())
    damaged[-1] ^= 0xFF
    kept.path.write_bytes(bytes(damaged))
    third, saves = push_from_fresh_state(3)
    assert (third.uploaded, third.cached, third.digest, len(saves)) == (first.uploaded, [], first.digest, 1)
    assert cache.find(diff_id, DEFAULT_COMPRESSION) is not None  # compressed again, and kept again


def test_a_push_into_a_new_repository_mounts_what_this_machine_pushed(released: dict[str, Any], registry: RegistryLogin,
                                                                      client: docker.DockerClient,
                                                                      tmp_path: Path) -> None:
    """The layer memory (registry/layermemory.py): the CLI's push of an image it pushed before, into a repository
    nothing names (no tag, no sibling), mounts every layer from where the earlier push put it, sends no byte, and
    reads the config from the memory: the engine is never asked to `docker save`."""
    recorder = EngineRecorder(tmp_path)
    try:
        elsewhere = f"{released['target']}/team{uuid.uuid4().hex[:6]}"
        r = trainimg("push", TEST_VARIANT, "--registry", elsewhere, "--username", registry.username,
                     env={**released["env"], "DOCKER_HOST": recorder.docker_host}, timeout=900)
        remove_image(client, f"{elsewhere}/{CPU_TAG}")
        assert r.returncode == 0, r.stderr[-3000:]
        saves = [line for line in recorder.requests if re.search(r"^GET /\S*/images/(\S+/)?get(\?|$)", line)]
    finally:
        recorder.stop()
    assert re.search(r"^pushed \S+@sha256:[0-9a-f]{64} \(0 bytes uploaded\)$", r.stdout, re.M), r.stdout
    assert pushed_digest(r.stdout) == released["digest"] and saves == []
    api = replace(released["api"], target=RegistryTarget.parse(elsewhere))
    assert api.missing_blobs(api.target.repository(CPU_TAG.split(":")[0]), CPU_TAG.split(":")[1]) == []


def test_a_layer_another_repository_holds_is_mounted_not_sent(released: dict[str, Any]) -> None:
    """A team's image in a repository of its own, extending a released one (or a release's other variants): each
    layer the sibling's repository holds is linked by the registry's cross-repository mount, none is sent, and
    the new repository then serves every blob of its manifest."""
    api = released["api"]
    name, tag = CPU_TAG.split(":")
    sibling = (api.target.repository(name), tag)
    got = api.manifest_json(*sibling)
    assert got is not None
    blobs = {layer["digest"] for layer in json.loads(got[0])["layers"]}
    team = api.target.repository(f"team{uuid.uuid4().hex[:6]}/trainer")
    result = push_saved(DockerEngine(), CPU_TAG, api, team, tag, siblings=[sibling])
    assert (result.uploaded, result.bytes_uploaded) == ([], 0)
    assert sorted(result.mounted) == sorted(blobs)  # each distinct blob once: a repeated empty layer is then held
    assert api.missing_blobs(team, tag) == []


def _tamper_last_layer(api: RegistryAPI, repository: str, tag: str, path: str) -> None:
    """Put under `tag` an image whose last layer holds `path` with one byte more: a new layer blob, config and
    manifest through the registry's own API (what someone with push rights could do)."""
    body, media_type, _ = api.manifest_json(repository, tag)  # type: ignore[misc]
    manifest = json.loads(body)
    config = json.loads(api.blob(repository, manifest["config"]["digest"]))
    with api.open_blob(repository, manifest["layers"][-1]["digest"]) as resp:
        layer = gzip.decompress(resp.content)
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(layer)) as src, tarfile.open(fileobj=out, mode="w", format=src.format) as dst:
        for member in src:
            data = src.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if member.name.lstrip("./") == path:
                data = (data or b"") + b" "
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    raw = out.getvalue()
    packed = gzip.compress(raw, mtime=0)
    config["rootfs"]["diff_ids"][-1] = "sha256:" + hashlib.sha256(raw).hexdigest()
    config_bytes = json.dumps(config).encode()
    manifest["config"].update(digest=api.put_blob(repository, config_bytes), size=len(config_bytes))
    manifest["layers"][-1].update(digest=api.put_blob(repository, packed), size=len(packed))
    api.put_manifest(repository, tag, json.dumps(manifest).encode(), media_type)
    assert sha256_digest(packed) == manifest["layers"][-1]["digest"]


def test_a_tampered_image_is_named_layer_and_file(released: dict[str, Any]) -> None:
    """What `verify` prints when the registry's image differs: the rebuild above (`verify`'s, no cache) against the
    tag with one byte more in a file of its last layer names that layer and that file (the comparison `verify` runs
    after its rebuild and the lines it prints; its exit 1 with one line is the CLI's for every CheckFailed,
    builder/errors.py)."""
    sbom = "etc/trainimg/sbom.cdx.json"
    api = released["api"]
    name, tag = CPU_TAG.split(":")
    _tamper_last_layer(api, api.target.repository(name), tag, sbom)
    verdict = compare(DockerEngine(), api, CPU_TAG, CPU_TAG)
    lines = report_lines(verdict)
    count = len(released["layers"])
    assert not verdict.identical and lines[0].endswith(f": 1 of {count} layers differ from the rebuild"), lines
    assert lines[1].startswith(f"layer {count}: rebuild {released['layers'][-1]}, registry sha256:"), lines
    files = [line.strip() for line in lines if line.startswith("  ")]
    assert len(files) == 1 and files[0].startswith(f"{sbom}: size ") and " content sha256:" in files[0], files


@pytest.mark.parametrize("args, words", [
    (("nosuch", "--registry", "localhost:5000"), ("no variant named 'nosuch'",)),
    ((CPU_VARIANT, "--registry", "http://x"), ("--registry", "drop the scheme")),
    (("pytorch-*", "--registry", "localhost:5000"),
     (f"names {sum(v.name.startswith('pytorch-') for v in SHIPPED.variants)} variants; name one",)),
    ((CPU_VARIANT,), ("give --registry R (rebuild and compare VARIANT)", "--key PUB")),
])
def test_verify_bad_input_is_one_line_exit_2(args: tuple[str, ...], words: tuple[str, ...]) -> None:
    r = trainimg("verify", *args, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, (r.returncode, r.stderr)
    assert all(w in r.stderr for w in words), r.stderr
