"""A recipe's `arch` (issue 46): the grammar, the refusals compat data's `architectures` table makes (generated from
the table: every framework release line x CPU and each CUDA build x arm64), what the shipped recipes list, and what
another architecture changes in the plan, the lock and the rendered Dockerfile (and what it leaves alone: amd64's).

In process, no engine: the real CLI (`trainimg.cli.app.main`) on recipes written to a fresh folder, and the library;
the signing of a two-architecture release against Debian's registry binary, checked by trainimg verify and cosign.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trustworld import TOOLS
from shipped import pick

from trainimg.cli.app import main
from trainimg.plan.installer import UV_SHA256_BY_ARCH
from trainimg.plan.requirements import LOCK_NAME, lock_path, variant_requirements
from trainimg.plan.stages import plans
from trainimg.recipe.arches import ARCHES, arch_key, local_tag, split_key
from trainimg.recipe.compat import load_compat
from trainimg.recipe.loading import load_recipes
from trainimg.registry.registryapi import sha256_digest
from trainimg.render.dockerfile import render_plan

ROOT = Path(__file__).resolve().parents[1]
CPU = 'framework: pytorch\nversion: "2.13.0"\nos: debian12\npython: "3.11"\n'


def write(root: Path, files: dict[str, str]) -> Path:
    d = root / "recipes"
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text, encoding="utf-8")
    return d


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err.splitlines()


def refusal(capsys: pytest.CaptureFixture[str], d: Path) -> str:
    rc, out, err = run(capsys, "--recipes", str(d), "validate")
    assert rc == 2 and len(err) == 1, (out, err)
    return err[0]


# The shipped JAX CPU variant, built for amd64 and arm64 (tests/shipped.py: chosen by its facts).
JAX = pick("jax", gpu=False, arch="arm64").name
JAX_TAG = pick("jax", gpu=False, arch="arm64").tag


# --- the grammar -------------------------------------------------------------------------------------------------

def test_default_is_amd64_and_list_json_shows_each_variants_arch(tmp_path, capsys):
    d = write(tmp_path, {"a.yaml": CPU, "b.yaml": CPU.replace("pytorch", "jax").replace("2.13.0", "0.10.2")
                         + "arch: [arm64, amd64]\n"})
    rc, out, err = run(capsys, "--recipes", str(d), "list", "--json")
    assert rc == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["pytorch-2.13.0-cpu-py3.11"]["arch"] == ["amd64"]
    assert rows["jax-0.10.2-cpu-py3.11"]["arch"] == ["amd64", "arm64"]  # the table's order, however written
    assert rows["jax-0.10.2-cpu-py3.11"]["dockerfiles"] == {
        "amd64": "images/jax-0.10.2-cpu-py3.11/Dockerfile", "arm64": "images/jax-0.10.2-cpu-py3.11/arm64/Dockerfile"}


@pytest.mark.parametrize("value, said", [
    ("arm64", "expected a list of amd64, arm64"),
    ("[]", "expected a list of amd64, arm64"),
    ("[amd64, riscv64]", "'riscv64' is not one of amd64, arm64"),
    ("[arm64, arm64]", "a value is listed twice"),
    ("[aarch64]", "'aarch64' is not one of amd64, arm64"),
])
def test_a_bad_arch_is_one_line(tmp_path, capsys, value, said):
    line = refusal(capsys, write(tmp_path, {"a.yaml": CPU + f"arch: {value}\n"}))
    assert re.match(r"^recipes/a\.yaml:5:arch: ", line) and said in line, line


def test_arch_in_a_matrix_group_is_the_groups_not_an_axis(tmp_path, capsys):
    d = write(tmp_path, {"a.yaml": 'framework: jax\nos: debian12\npython: "3.11"\nmatrix:\n'
                                   '  - version: ["0.10.2"]\n    arch: [amd64, arm64]\n'})
    rc, out, err = run(capsys, "--recipes", str(d), "list", "--json")
    assert rc == 0, err
    assert [(r["name"], r["arch"]) for r in json.loads(out)] == [("jax-0.10.2-cpu-py3.11", ["amd64", "arm64"])]


def test_an_exclude_cannot_match_arch(tmp_path, capsys):
    d = write(tmp_path, {"a.yaml": CPU + "arch: [amd64, arm64]\nexclude:\n  - arch: arm64\n"})
    line = refusal(capsys, d)
    assert "exclude[0].arch" in line and "not an axis" in line, line


def test_a_child_inherits_its_parents_architectures_and_sets_none(tmp_path, capsys):
    d = write(tmp_path, {"a.yaml": CPU.replace("pytorch", "jax").replace("2.13.0", "0.10.2") + "arch: [amd64, arm64]\n",
                         "b.yaml": "extends: jax-0.10.2-cpu-py3.11\nname: team\n"})
    rc, out, err = run(capsys, "--recipes", str(d), "list", "--json")
    assert rc == 0, err
    assert {r["name"]: r["arch"] for r in json.loads(out)}["team"] == ["amd64", "arm64"]
    (d / "b.yaml").write_text("extends: jax-0.10.2-cpu-py3.11\nname: team\narch: [amd64]\n", encoding="utf-8")
    assert "arch: set by the variant this one extends" in refusal(capsys, d)


# --- the table's refusals, generated: every release line x CPU and each CUDA build x every other architecture ----

def _recipe(framework: str, version: str, cuda: str | None, arch: str) -> str | None:
    """A recipe of that build for amd64 and `arch`, on a base trainimg has for it (CPU: Debian 12's Python 3.11;
    CUDA: Ubuntu 24.04's 3.12), or None when the release supports neither Python there (no such variant)."""
    rel = load_compat().release(framework, version)  # type: ignore[arg-type]
    assert rel is not None
    os_name, python = ("debian12", "3.11") if cuda is None else ("ubuntu24.04", "3.12")
    if not rel.python_spec.contains(python):
        return None
    cuda_line = f'cuda: "{cuda}"\n' if cuda else ""
    return (f'framework: {framework}\nversion: "{version}"\n{cuda_line}os: {os_name}\npython: "{python}"\n'
            f"arch: [amd64, {arch}]\n")


def _cases() -> list[tuple[str, str, str | None, str, str, str]]:
    compat = load_compat()
    cases = []
    for fw_name, fw in compat.frameworks.items():
        for rel in fw.releases:
            for cuda in ([None] if rel.cpu else []) + list(rel.cuda):
                for arch in (a for a in ARCHES if a != "amd64"):
                    text = _recipe(fw_name, rel.version, cuda, arch)
                    if text is not None:
                        cases.append((fw_name, rel.version, cuda, arch, fw.pip_name, text))
    return cases


@pytest.mark.parametrize("framework, version, cuda, arch, pip_name, text", _cases(),
                         ids=lambda x: "" if x is None or "\n" in str(x) else str(x))
def test_every_build_for_another_architecture_follows_the_table(tmp_path, capsys, framework, version, cuda, arch,
                                                                pip_name, text):
    compat = load_compat()
    builds = compat.arch_builds(framework, version, arch)  # type: ignore[arg-type]
    rel = compat.release(framework, version)  # type: ignore[arg-type]
    assert rel is not None
    line = rel.build_for(cuda)[0] if cuda and rel.build_for(cuda) else None  # type: ignore[index]
    fits = builds is not None and (builds.cpu if cuda is None else builds.has_cuda(line or ""))
    d = write(tmp_path, {"a.yaml": text})
    rc, out, err = run(capsys, "--recipes", str(d), "validate")
    if fits:
        assert rc == 0, err
        return
    assert rc == 2 and len(err) == 1, (out, err)
    assert re.match(r"^recipes/a\.yaml:[0-9]+:arch: ", err[0]), err[0]
    assert (builds.note if builds is not None else f"no {arch} data for {pip_name}") in err[0], err[0]


def test_tensorflow_on_arm64_is_its_cpu_build_and_only_that():
    compat = load_compat()
    builds = compat.arch_builds("tensorflow", "2.21.0", "arm64")
    assert builds is not None and builds.cpu and builds.cuda is None
    assert compat.cpu_pip_name("tensorflow", "2.21.0", "arm64") == "tensorflow"  # tensorflow-cpu has no aarch64 wheel
    assert compat.cpu_pip_name("tensorflow", "2.21.0", "amd64") == "tensorflow-cpu"


def test_a_base_published_without_the_architecture_is_refused(tmp_path):
    """The bases' `arches` rule, on compat data whose Debian CPU image lacks arm64 (the shipped data has none such)."""
    compat = load_compat()
    debian = compat.operating_systems["debian12"].model_copy(update={"arches": ("amd64",)})
    narrow = compat.model_copy(update={"operating_systems": {**compat.operating_systems, "debian12": debian}})
    d = write(tmp_path, {"a.yaml": CPU.replace("pytorch", "jax").replace("2.13.0", "0.10.2") + "arch: [amd64, arm64]\n"})
    with pytest.raises(Exception) as err:
        load_recipes(d, compat=narrow)
    assert "debian:bookworm-slim is published for amd64, not arm64" in str(err.value)
    (d / "a.yaml").write_text((d / "a.yaml").read_text() + "base_image: mirror.example/debian:bookworm-arm64\n")
    assert load_recipes(d, compat=narrow).variants[0].arch == ("amd64", "arm64")  # a base of your own: yours to pick


# --- what the shipped recipes list -------------------------------------------------------------------------------

def test_the_shipped_recipes_build_cpu_pytorch_and_a_gpu_pytorch_for_arm64():
    recipes = load_recipes(ROOT / "recipes")
    arm = {v.name for v in recipes.variants if "arm64" in v.arch}
    assert "pytorch-2.13.0-cpu-py3.11" in arm
    assert any(v.framework == "pytorch" and v.gpu for v in recipes.variants if v.name in arm)
    assert all("amd64" in v.arch for v in recipes.variants)  # every shipped variant keeps its amd64 image


# --- another architecture in the plan, the lock and the Dockerfile -----------------------------------------------

def _multi_arch_plans():
    recipes = load_recipes(ROOT / "recipes")
    by_key = {p.key: p for p in plans(recipes)}
    return [(by_key[v.name], by_key[arch_key(v.name, a)]) for v in recipes.variants for a in v.arch if a != "amd64"]


@pytest.mark.parametrize("amd, other", _multi_arch_plans(), ids=lambda p: p.key)
def test_another_architectures_dockerfile_differs_only_where_it_must(amd, other):
    """Its own uv wheel, its own lock, the --platform to build it with: nothing else of the amd64 file moves."""
    a, b = render_plan(amd).splitlines(), render_plan(other).splitlines()
    assert len(a) == len(b)
    changed = [(x, y) for x, y in zip(a, b) if x != y]
    assert changed, "the same file for two architectures"
    for x, y in changed:
        y_as_amd = (y.replace(f"/{other.arch}/", "/").replace(f" --platform linux/{other.arch}", "")
                    .replace(UV_SHA256_BY_ARCH[other.arch], UV_SHA256_BY_ARCH["amd64"]))
        assert y_as_amd == x, (x, y)
    assert other.dockerfile_path() == f"images/{other.variant.name}/{other.arch}/Dockerfile"
    # Parents of two architectures never share a stage key (the builder builds a shared parent once).
    assert not {s.key for s in amd.stages} & {s.key for s in other.stages}


@pytest.mark.parametrize("amd, other", _multi_arch_plans(), ids=lambda p: p.key)
def test_another_architectures_lock_is_resolved_for_its_wheels(amd, other):
    compat = load_compat()
    req = variant_requirements(other.variant, compat, arch=other.arch)
    assert req.platform.startswith(f"{'aarch64' if other.arch == 'arm64' else other.arch}-manylinux_")
    path = lock_path(ROOT, other.variant.name, other.arch)
    assert path == ROOT / "images" / other.variant.name / other.arch / LOCK_NAME
    text = path.read_text(encoding="utf-8")
    assert f"# target: Python {req.python} on {req.platform}" in text


def test_keys_and_local_tags_name_both_and_read_back():
    assert arch_key("v", "amd64") == "v" and arch_key("v", "arm64") == "v@arm64"
    assert split_key("v@arm64") == ("v", "arm64") and split_key("v") == ("v", "amd64")
    assert local_tag("trainimg/jax:0.10.2-cpu-py3.11", "arm64") == "trainimg/jax:0.10.2-cpu-py3.11-arm64"
    assert local_tag("trainimg/jax:0.10.2-cpu-py3.11", "amd64") == "trainimg/jax:0.10.2-cpu-py3.11"


# --- the bases: `--base-image REF | ARCH=REF`, and a base of the wrong architecture --------------------------------

@pytest.mark.parametrize("given, said", [
    (["--base-image", "riscv64=local/debian:bookworm"], "'riscv64' is not an architecture"),
    (["--base-image", "arm64=not a ref"], "'not a ref' is not an image reference"),
    (["--base-image", "a/b:1", "--base-image", "c/d:2"], "a base for every architecture is given twice"),
    (["--base-image", "arm64=a/b:1", "--base-image", "arm64=c/d:2"], "a base for arm64 is given twice"),
])
def test_a_bad_base_image_is_one_line_before_the_engine(tmp_path, capsys, monkeypatch, given, said):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/trainimg.sock")  # refused before any engine call
    d = write(tmp_path, {"a.yaml": CPU})
    for verb in ("build", "release"):
        extra = ["--registry", "localhost:5000", "--skip-audit"] if verb == "release" else []
        rc, out, err = run(capsys, "--recipes", str(d), verb, "pytorch-2.13.0-cpu-py3.11", *given, *extra)
        assert rc == 2 and len(err) == 1 and err[0].startswith("--base-image: ") and said in err[0], (verb, err)


def test_a_base_of_another_architecture_is_refused_naming_the_flag(docker_engine: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Each base's architecture as the engine itself says it (.ci/setup-host makes local/debian:bookworm for amd64
    and local/debian:bookworm-arm64 for arm64): one REF for every architecture puts an amd64 image under the arm64
    build, refused before anything builds."""
    from trainimg.engine.docker import DockerEngine
    from trainimg.imagebuild.archplan import build_args, check_bases
    from trainimg.options import BuildOptions

    rc, out, err = run(capsys, "--recipes", str(ROOT / "recipes"), "build", JAX, "--base-image",
                       "local/debian:bookworm", "--progress", "plain")
    assert (rc, err[-1]) == (2, f"--base-image: local/debian:bookworm is linux/amd64; {JAX}@arm64 is built for "
                                 "arm64: give its base with --base-image arm64=REF"), (out, err)
    assert [ln for ln in out.splitlines() + err if ln.startswith("#")] == []  # no build step ran
    recipes = load_recipes(ROOT / "recipes")
    chosen = plans(recipes, [recipes.by_name[JAX]])
    both = BuildOptions(base_image="local/debian:bookworm", arch_bases={"arm64": "local/debian:bookworm-arm64"})
    check_bases(DockerEngine(), chosen, both)
    assert [build_args(p, both, {})["BASE_IMAGE"] for p in chosen] == ["local/debian:bookworm",
                                                                        "local/debian:bookworm-arm64"]


# --- CI: a job per architecture on an arm64 runner, or emulation said in the file ---------------------------------

@pytest.mark.parametrize("system", ["github", "gitlab"])
def test_ci_builds_arm64_natively_or_under_emulation_and_says_which(tmp_path, capsys, monkeypatch, system):
    import shlex

    import yaml

    monkeypatch.chdir(ROOT)
    rc, native, err = run(capsys, "ci", system, JAX, "--registry", "ghcr.io/acme/ml")
    assert rc == 0, err
    assert "# arm64: built natively, in the *-arm64 stage jobs, on the arm64 runner" in native
    doc = yaml.safe_load(native)
    jobs = doc["jobs"] if system == "github" else doc
    arm = jobs[f"stage-{JAX.replace('.', '_')}-arm64" if system == "github" else f"stage-{JAX}-arm64"]
    runner = arm["runs-on"] if system == "github" else arm["tags"][0]
    assert runner == {"github": "ubuntu-24.04-arm", "gitlab": "saas-linux-medium-arm64"}[system]
    line = next(s["run"] for s in arm["steps"] if str(s.get("run", "")).startswith("trainimg")) \
        if system == "github" else arm["script"][0]
    args = shlex.split(line)
    assert args[args.index("--arch") + 1] == "arm64" and "--stage" in args
    rc, emulated, err = run(capsys, "ci", system, JAX, "--registry", "ghcr.io/acme/ml",
                            "--emulate-arm64")
    assert rc == 0, err
    assert "# arm64: built under emulation (QEMU) in the amd64 stage jobs" in emulated
    doc = yaml.safe_load(emulated)
    stages = {k: v for k, v in (doc["jobs"] if system == "github" else doc).items() if k.startswith("stage-")}
    (job,) = stages.values()  # one job builds both: no --arch, the emulator registered first
    text = json.dumps(job)
    assert "--arch" not in text and ("docker/setup-qemu-action" in text or "tonistiigi/binfmt" in text), text
    rc, out, err = run(capsys, "ci", system, "--registry", "ghcr.io/acme/ml", "--emulate-arm64", "--arm64-runner", "x")
    assert rc == 2 and err[0].startswith("--emulate-arm64: "), err


def test_the_bake_file_has_a_target_per_architecture():
    from trainimg.render.bake import BakeInputs, bake_file

    recipes = load_recipes(ROOT / "recipes")
    chosen = plans(recipes, [recipes.by_name[JAX]])
    data = bake_file(chosen, BakeInputs(Path("/ctx"), {p.key: Path(f"/df/{p.key}") for p in chosen}, (),
                                        {JAX: {}}))
    arm = data["target"][f"{JAX}-arm64"]
    assert arm["platforms"] == ["linux/arm64"] and arm["tags"] == [f"{JAX_TAG}-arm64"]
    assert arm["dockerfile"] == f"/df/{JAX}@arm64"
    assert "platforms" not in data["target"][JAX]  # amd64's target as it always was
    assert data["group"]["default"]["targets"] == [JAX, f"{JAX}-arm64"]


# --- a lockfile entry per architecture, and the index trainimg pushes ---------------------------------------------

def test_a_lockfile_entry_per_architecture_reads_back_and_amd64s_is_as_it_was(tmp_path):
    from trainimg.errors import UserInputError
    from trainimg.publish.lockfile import LockEntry, read_lock, variant_entries, write_lock

    common = dict(variant="v", recipe="r.yaml", tag="t/v:1.0.0-cpu-py3.11", image_id="sha256:" + "1" * 64,
                  base_image="b", base_digest="sha256:" + "2" * 64,
                  pushed={"reg/t/v:1.0.0-cpu-py3.11": "sha256:" + "9" * 64})
    amd = LockEntry(**common, manifest="sha256:" + "3" * 64)
    arm = LockEntry(**common, arch="arm64", manifest="sha256:" + "4" * 64)
    plain = LockEntry(**common)
    assert "arch" not in plain.to_json() and "manifest" not in plain.to_json()  # an amd64-only release's entry
    lock = tmp_path / "images.lock"
    write_lock(lock, [amd, arm])
    back = read_lock(lock)
    assert sorted(back) == ["v", "v@arm64"] and back["v@arm64"] == arm and back["v"] == amd
    assert [e.arch for e in variant_entries(back, "v")] == ["amd64", "arm64"]
    assert arm.image_digest("reg/t/v:1.0.0-cpu-py3.11") == arm.manifest  # its own image, inside the index
    assert plain.image_digest("reg/t/v:1.0.0-cpu-py3.11") == "sha256:" + "9" * 64
    data = json.loads(lock.read_text())
    data["variants"]["v"] = data["variants"].pop("v@arm64")  # an arm64 entry under amd64's key
    lock.write_text(json.dumps(data))
    with pytest.raises(UserInputError, match="entry says variant 'v@arm64'"):
        read_lock(lock)


def test_the_index_names_each_architecture_as_oci_and_docker_read_it():
    from trainimg.registry.imageindex import INDEX_TYPE, Platformed, entries, index_body

    manifest = "application/vnd.docker.distribution.manifest.v2+json"
    body = index_body([Platformed("amd64", "sha256:" + "a" * 64, 10, manifest),
                       Platformed("arm64", "sha256:" + "b" * 64, 11, manifest)])
    doc = json.loads(body)
    assert doc["schemaVersion"] == 2 and doc["mediaType"] == INDEX_TYPE
    assert [m["platform"] for m in doc["manifests"]] == [{"architecture": "amd64", "os": "linux"},
                                                        {"architecture": "arm64", "os": "linux", "variant": "v8"}]
    assert [(e.arch, e.size) for e in entries(body)] == [("amd64", 10), ("arm64", 11)]


def test_diff_of_a_variants_two_architectures_says_so(tmp_path):
    from memory_engine import MemoryEngine

    from trainimg.publish.diff import diff_images, load_side, render_diff
    from trainimg.publish.lockfile import LockEntry, write_lock

    common = dict(variant="v", recipe="r.yaml", tag="t/v:1.0.0-cpu-py3.11", base_image="b",
                  base_digest="sha256:" + "2" * 64, versions={"python": "3.11.2"})
    lock = tmp_path / "images.lock"
    write_lock(lock, [LockEntry(**common, image_id="sha256:" + "1" * 64),
                      LockEntry(**common, image_id="sha256:" + "3" * 64, arch="arm64")])
    engine = MemoryEngine()  # neither image on it: the lockfile's record alone
    d = diff_images(load_side(engine, "lock:v", lock), load_side(engine, "lock:v@arm64", lock))
    assert d["architecture"] == {"a": "amd64", "b": "arm64"} and not d["same"]
    assert "architecture: amd64 -> arm64" in render_diff(d).splitlines()


def test_a_signed_release_of_an_index_signs_each_manifest_and_the_index(tmp_path, host_tool):
    """`release --sign-key` of a variant of two architectures: what it signs (release_images: each architecture's
    manifest, with its own lock and Dockerfile in the provenance, and the index the tag names; a kept
    architecture's manifest and its index too), signed by the release's code (sign_all) in a real registry and
    each signature and provenance verified by trainimg verify and cosign (verify, verify-attestation)."""
    import base64

    from memory_engine import MemoryEngine
    from trustworld import world_of

    from trainimg.engine.base import ImageInfo
    from trainimg.imagebuild.builder import VariantBuild
    from trainimg.publish.push import PushResult
    from trainimg.publish.signing import release_images, sign_all
    from trainimg.publish.skip import Decision
    from trainimg.registry.imageindex import INDEX_TYPE, Platformed, index_body
    from trainimg.registry.references import RegistryTarget
    from trainimg.registry.referrers import OCI_MANIFEST
    from trainimg.runtime.contract import RECIPE_LABEL, VARIANT_LABEL
    from trainimg.trust import keys, provenance
    from trainimg.trust.signer import Signer

    host_tool("docker-registry")
    recipes = load_recipes(ROOT / "recipes")
    name, tag = JAX, JAX_TAG
    engine = MemoryEngine(images={"local/debian:bookworm": ImageInfo("sha256:" + "1" * 64, {}),
                                  "local/debian:bookworm-arm64": ImageInfo("sha256:" + "2" * 64, {})})
    with world_of(tmp_path) as world:
        target = RegistryTarget.parse(f"{world.host}/team")
        repository = target.repository(tag.split(":")[0])
        labels = {VARIANT_LABEL: name, RECIPE_LABEL: recipes.by_name[name].source}
        digests, sizes = {}, {}
        for arch in ("amd64", "arm64"):
            layer = f"{name} {arch} layer".encode()
            config = json.dumps({"architecture": arch, "os": "linux", "config": {"Labels": labels},
                                 "rootfs": {"type": "layers", "diff_ids": [sha256_digest(layer)]}}).encode()
            digests[arch] = world.push_manifest(repository, f"{arch}-only", config, layer)
            sizes[arch] = len(world.api.manifest_json(repository, digests[arch])[0])
        digests["index"] = world.api.put_manifest(repository, tag.split(":")[1], index_body(
            [Platformed(arch, digests[arch], sizes[arch], OCI_MANIFEST) for arch in ("amd64", "arm64")]), INDEX_TYPE)
        builds = [VariantBuild(name, local_tag(tag, arch), "sha256:" + "d" * 64, 1, 1.0, 1, 0, [], base, [], {},
                               dockerfile="sha256:" + "e" * 64, arch=arch, variant_tag=tag)
                  for arch, base in (("amd64", "local/debian:bookworm"), ("arm64", "local/debian:bookworm-arm64"))]
        pushed = {tag: PushResult(target.ref(tag), digests["index"], 0, 1, index=True,
                                  manifests={"amd64": digests["amd64"], "arm64": digests["arm64"]})}
        signed = release_images(engine, recipes, ROOT, target, builds, pushed, [], "2026-01-01T00:00:00Z")
        assert [(s.repository, s.digest, s.arch) for s in signed] == [
            (repository, digests["amd64"], "amd64"), (repository, digests["arm64"], "arm64"),
            (repository, digests["index"], "amd64")]
        assert signed[1].base_digest == "sha256:" + "2" * 64
        kept = Decision(name, tag, True, "unchanged", digest=digests["arm64"], arch="arm64",
                        tag_digest=digests["index"])
        again = release_images(engine, recipes, ROOT, target, builds[:1], {tag: pushed[tag]}, [kept], "t")
        assert {(s.digest, s.arch) for s in again} == {(digests["amd64"], "amd64"), (digests["index"], "amd64"),
                                                       (digests["arm64"], "arm64")}

        sign_all(Signer(keys.load_signing_key(world.ours[0], world.env), world.env), world.api, signed)
        for image in signed:
            ref = f"{world.host}/{image.repository}@{image.digest}"
            verdicts = world.verdicts(ref, world.ours[1], only=("trainimg", "cosign", "cosign-attestation"))
            assert all(ok for ok, _ in verdicts.values()), (ref, verdicts)
            r = world.run(str(TOOLS / "cosign"), "verify-attestation", "--type", provenance.COSIGN_TYPE, "--key",
                          str(world.ours[1]), "--insecure-ignore-tlog=true", "--allow-http-registry", ref)
            statement = json.loads(base64.b64decode(json.loads(r.stdout.splitlines()[0])["payload"]))
            assert statement["subject"][0]["digest"] == {"sha256": image.digest.split(":")[1]}
            made_from = [d.get("uri") or d.get("name") for d in
                         statement["predicate"]["buildDefinition"]["resolvedDependencies"]]
            if image.digest != digests["index"]:  # each architecture's own Dockerfile; the index has none
                dockerfile = f"images/{name}/Dockerfile" if image.arch == "amd64" else \
                    f"images/{name}/{image.arch}/Dockerfile"
                assert dockerfile in made_from, (image.arch, made_from)
        unsigned = world.push(repository, "unsigned")  # the consumers refuse what the release did not sign
        assert not world.verdicts(f"{world.host}/{repository}@{unsigned}", world.ours[1],
                                  only=("cosign",))["cosign"][0]