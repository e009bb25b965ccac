"""`trainimg bake`: a bake file BuildKit accepts, proven by emulation (no buildx can be installed here).

Each target becomes the `docker build` the 20.10 engine runs with the same context, Dockerfile, target, args,
secrets and labels. A named context is checked against the Dockerfile with BuildKit's own two rules, then
emulated: a `target:` context that replaces a shared stage must give the very image the consumer's own stage
gives (so building the consumer's Dockerfile as it stands is what BuildKit would build), and the `parent` stage
of an extending variant is replaced by the parent target's image, as BuildKit replaces a stage found by name.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from conftest import ROOT, bare_recipe, trainimg
from shipped import build_base, pick, shipped

from trainimg.engine.docker import BuildRequest, DockerEngine
from trainimg.imagebuild.lockcompile import left_out
from trainimg.plan.requirements import lock_states, pins
from trainimg.recipe.compat import load_compat
from trainimg.recipe.loading import load_recipes

# Each framework's CPU variant this machine builds (tests/shipped.py), the CPU PyTorch one (the child's parent) too.
CPU_VARIANTS = sorted(pick(fw, gpu=False).name for fw in ("jax", "pytorch", "tensorflow"))
PARENT = pick("pytorch", gpu=False).name
CHILD = "baketest-child"
CHILD_RECIPE = f"extends: {PARENT}\nname: {CHILD}\nrepository: trainimg-test/{CHILD}\n" \
               "labels:\n  team: bake\n"
# The emulation builds the CPU PyTorch variant, a variant with no framework on its Debian and Python (so the two
# share the python and installer stages, each a target of its own: the `target:` contexts) and the child (the
# `parent` context). The other frameworks' targets come from the same renderer (their bake file is checked above,
# every variant's); building them too took two more framework installs of a cold run for no other case.
BARE = "baketest-bare"
EMULATED = [PARENT, BARE]
_FROM_RE = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)
_ARG_RE = re.compile(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$")


def familiar(ref: str) -> str:
    """An image name as BuildKit's dockerui.NamedContext compares it: `reference.FamiliarString` of the
    normalised name, ":latest" trimmed (frontend/dockerui/namedcontext.go)."""
    name = ref
    last = name.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in last:
        name += ":latest"
    name = name.removeprefix("docker.io/").removeprefix("library/")
    return name.removesuffix(":latest")


def named_context_rule(dockerfile: str, args: dict[str, str], key: str) -> str | None:
    """Which of BuildKit's rules a named context `key` hits in `dockerfile`, or None.

    frontend/dockerfile/dockerfile2llb/convert.go, "set base state for every image" loop: first
    `if st.Name != "" { s, img, err := namedContext(ctx, st.Name, ...)` (a stage named `key` is replaced whole);
    then, for a stage's base, `nameMatch, err := shlex.ProcessWordWithMatches(st.BaseName, globalArgs)` expands
    the ARGs and `namedContext(ctx, d.stage.BaseName, ...)` looks the expanded, normalised name up."""
    values: dict[str, str] = {}
    for line in dockerfile.splitlines():
        if (m := _ARG_RE.match(line)) and not line.startswith("FROM"):
            values.setdefault(m.group(1), args.get(m.group(1), m.group(2) or ""))
        if (m := _FROM_RE.match(line)) is None:
            continue
        if m.group(2) and familiar(m.group(2).lower()) == key:
            return "stage"
        base = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda v: values.get(v.group(1), ""), m.group(1))
        if base and familiar(base) == key:
            return "from"
    return None


def test_the_rule_finds_stage_names_and_misses_keys_named_after_args() -> None:
    text = "ARG PARENT_IMAGE=trainimg/pytorch:1-cpu\nFROM ${PARENT_IMAGE} AS parent\nFROM parent AS image\n"
    assert named_context_rule(text, {}, "parent") == "stage"
    assert named_context_rule(text, {}, "trainimg/pytorch:1-cpu") == "from"
    assert named_context_rule(text, {"PARENT_IMAGE": "debian"}, "debian") == "from"
    # What the old bake file did: a key named after the ARG, which BuildKit never compares with anything.
    assert named_context_rule(text, {}, "PARENT_IMAGE") is None


@pytest.fixture(scope="module")
def recipes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped recipes, with their locks beside them (images/), plus a variant that extends the CPU PyTorch
    one (labels only: nothing to install)."""
    folder = tmp_path_factory.mktemp("bake") / "recipes"
    shutil.copytree(ROOT / "recipes", folder)
    shutil.copytree(ROOT / "images", folder.parent / "images")
    (folder / "child.yaml").write_text(CHILD_RECIPE, encoding="utf-8")
    return folder


def bake(recipes: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    out = recipes.parent / "bake.json"
    r = trainimg("--recipes", str(recipes), "bake", *args, "--output", str(out), env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "docker buildx bake -f" in r.stderr
    return json.loads(out.read_text(encoding="utf-8"))


def secret_files(target: dict[str, Any]) -> dict[str, Path]:
    pairs = [dict(kv.split("=", 1) for kv in s.split(",")) for s in target["secret"]]
    return {p["id"]: Path(p["src"]) for p in pairs}


def unlockable(recipes: Path) -> set[str]:
    """Variants whose committed lock says they cannot be locked on this machine (their index is unreachable): a
    bake of every variant refuses them in one line, as build does, so the bake below names the others."""
    shipped = load_recipes(recipes)
    states = lock_states(shipped.variants, load_compat(), recipes.parent)
    return {v.name for v in shipped.variants  # every architecture of it (one left out alone gets no target)
            if all(s.state == "unlockable" for s in states if s.variant == v.name)}


def arch_targets(recipes: Path, variants: list[str]) -> list[str]:
    """The targets of `variants`' other architectures (`<variant>-<arch>`) a bake writes: not those left out."""
    shipped = load_recipes(recipes)
    left = left_out(shipped.variants, lock_states(shipped.variants, load_compat(), recipes.parent))
    return [f"{v}-{a}" for v in variants for a in shipped.by_name[v].arch if a != "amd64" and (v, a) not in left]


def test_a_bake_of_every_variant_refuses_one_that_cannot_be_locked_here(recipes: Path,
                                                                         state_env: dict[str, str]) -> None:
    out = recipes.parent / "all.json"
    # The shipped matrix has one: a CUDA 12.6 PyTorch, whose index (download.pytorch.org) does not answer here.
    assert unlockable(recipes), "no shipped variant is unlockable here: this test needs one"
    r = trainimg("--recipes", str(recipes), "bake", "--output", str(out), env=state_env, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "not lockable here" in r.stderr and not out.exists()


def test_bake_file_targets_groups_secrets_and_contexts(recipes: Path, state_env: dict[str, str]) -> None:
    listed = json.loads(trainimg("--recipes", str(recipes), "list", "--json", env=state_env).stdout)
    refused = unlockable(recipes)
    variants = [v["name"] for v in listed if v["name"] not in refused]
    data = bake(recipes, state_env, *variants)
    targets = data["target"]
    others = arch_targets(recipes, variants)
    assert others and all(targets[t]["platforms"] == [f"linux/{t.rsplit('-', 1)[1]}"] for t in others)
    assert sorted(data["group"]["default"]["targets"]) == sorted([*variants, *others])
    for framework in ("pytorch", "tensorflow", "jax"):
        assert [t for t in data["group"][framework]["targets"] if t in variants] == [
            v["name"] for v in listed if v["framework"] == framework and v["name"] in variants]
    # One target per variant and one per stage that two or more variants share, not one per parent stage: for
    # each group of variants on one base and Python (CPU, CUDA 12, CUDA 13), its python stage and the stage uv
    # comes from. (comms, the Reduction Server, sits above the framework's layers, which no two variants share.)
    parents = set(targets) - set(variants) - set(others)
    assert 0 < len(parents) <= 8, sorted(parents)
    assert {p.rsplit("-", 1)[0] for p in parents} == {"python", "installer"}, sorted(parents)
    folder = Path(state_env["TRAINIMG_STATE_DIR"]) / "bake"
    for name, t in targets.items():
        context, df = Path(t["context"]), Path(t["dockerfile"])
        assert (context / "builder" / "runtime" / "__main__.py").is_file(), name
        text = df.read_text(encoding="utf-8")
        for sid, src in secret_files(t).items():
            assert src.is_file() and stat.S_IMODE(src.stat().st_mode) == 0o600, (name, sid)
            assert context not in src.parents and folder in src.parents, (name, src)
        for key, ref in t.get("contexts", {}).items():
            assert ref.startswith("target:") and ref.removeprefix("target:") in targets, (name, ref)
            assert named_context_rule(text, t["args"], key) == "stage", (name, key)
    assert (secret_files(targets[CPU_VARIANTS[0]])["pip_conf"]).read_text().startswith("[global]")
    assert (secret_files(targets[CPU_VARIANTS[0]])["uv_conf"]).read_text().startswith("[pip]")
    for name in variants:  # each lock where its Dockerfile mounts it from: the committed one
        lock = Path(targets[name]["context"]) / "images" / name / "requirements.lock"
        if name != CHILD:
            assert lock.read_text() == (recipes.parent / "images" / name / "requirements.lock").read_text(), name
            assert f"source=images/{name}/requirements.lock" in Path(targets[name]["dockerfile"]).read_text(), name
    # The child has no committed lock: one is compiled for the bake, inside its parent's pins.
    parent_pins = pins((recipes.parent / "images" / PARENT / "requirements.lock").read_text())
    child_lock = Path(targets[CHILD]["context"]) / "images" / CHILD / "requirements.lock"
    assert pins(child_lock.read_text()) == parent_pins
    child = targets[CHILD]
    assert child["contexts"] == {"parent": f"target:{PARENT}"}
    assert child["labels"]["org.opencontainers.image.base.name"] == shipped().by_name[PARENT].tag
    for name in variants:
        assert targets[name]["labels"]["trainimg.managed"] == "image"
        assert set(targets[name]["labels"]) >= {"org.opencontainers.image.revision", "org.opencontainers.image.source"}


def test_bake_selects_variants_and_clean_removes_the_folder(recipes: Path, state_env: dict[str, str]) -> None:
    data = bake(recipes, state_env, CHILD)
    assert data["group"]["default"]["targets"] == [PARENT, CHILD]
    assert set(data["target"]) == {PARENT, CHILD}  # nothing shared with one root variant
    folder = Path(state_env["TRAINIMG_STATE_DIR"]) / "bake"
    assert folder.is_dir()
    r = trainimg("bake", "--clean", env=state_env, timeout=60)
    assert r.returncode == 0 and str(folder) in r.stderr, r.stderr
    assert not folder.exists()
    bad = trainimg("bake", "no-such-variant", env=state_env, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


# -- emulation: each target as the engine's docker build -----------------------------------------------------------


def order(targets: dict[str, Any], wanted: list[str]) -> list[str]:
    """`wanted` and every target they name in `contexts`, each after the targets it names."""
    out: list[str] = []

    def visit(name: str) -> None:
        for ref in targets[name].get("contexts", {}).values():
            visit(ref.removeprefix("target:"))
        if name not in out:
            out.append(name)

    for name in wanted:
        visit(name)
    return out


def replace_stage(text: str, stage: str, image: str) -> str:
    """The Dockerfile with stage `stage` replaced whole by `image`, as BuildKit replaces a stage a named context
    matches (`ds.dispatched = true; ds.state = *s`: the stage's own instructions never run)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        m = _FROM_RE.match(line)
        if m:
            skipping = (m.group(2) or "").lower() == stage
            if skipping:
                out.append(f"FROM {image} AS {stage}")
                continue
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def layers(client: docker.DockerClient, image: str) -> list[str]:
    """An image's layers (`RootFS.Layers`, the diff IDs): what a build of the same inputs repeats."""
    return client.api.inspect_image(image)["RootFS"]["Layers"]


@pytest.fixture(scope="module")
def wheel_index(client: docker.DockerClient) -> Iterator[dict[str, str]]:
    """This machine's wheels and PEP 503 indexes over HTTP on the engine's bridge gateway, where a build's RUN
    steps (default network) reach them, as a CI runner's builds reach its index; the pip environment for it.

    They are extra indexes, as this machine's pip config has them: PyPI (through the proxy, with the CA secret)
    stays the index, since some pins (cloudml-hypertune) are only there. A warm cache used to hide that: on an
    empty engine the comms stage must really install."""
    ipam = client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    gateway = ipam.get("Gateway") or str(ipaddress.ip_network(ipam["Subnet"])[1])  # the engine's default
    with socket.socket() as probe:
        probe.bind((gateway, 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", gateway, str(port), "--directory",
                               "/opt"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://{gateway}:{port}"
    for _ in range(50):
        with contextlib.suppress(OSError), socket.create_connection((gateway, port), timeout=1):
            break
        time.sleep(0.1)
    try:
        yield {"PIP_EXTRA_INDEX_URL": f"{url}/pypi/simple/ {url}/pypi-more/simple/",
               "PIP_FIND_LINKS": f"{url}/wheels/", "PIP_TRUSTED_HOST": gateway}
    finally:
        server.terminate()
        server.wait()


@pytest.fixture(scope="module")
def emulated(recipes: Path, state_env: dict[str, str], client: docker.DockerClient, wheel_index: dict[str, str],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], dict[str, str]]]:
    """Build EMULATED's targets and the extending child as the engine runs them; image IDs by target name.
    Nothing is tagged with the variants' own tags (other users build those): only private emulation tags."""
    folder = tmp_path_factory.mktemp("emulated") / "recipes"
    shutil.copytree(recipes, folder)
    shutil.copytree(recipes.parent / "images", folder.parent / "images")
    (folder / "bare.yaml").write_text(bare_recipe(BARE, f"trainimg-test/{BARE}"), encoding="utf-8")
    data = bake(folder, {**state_env, **wheel_index}, *EMULATED, CHILD)
    targets, engine, built = data["target"], DockerEngine(client), {}
    run = uuid.uuid4().hex[:12]
    work = tmp_path_factory.mktemp("emulation")
    private: list[str] = []
    try:
        for name in order(targets, [*EMULATED, CHILD]):
            t = targets[name]
            text = Path(t["dockerfile"]).read_text(encoding="utf-8")
            for key, ref in t.get("contexts", {}).items():
                source = ref.removeprefix("target:")
                if key == "parent":  # an image of its own: BuildKit's named context replaces the stage
                    tag = f"trainimg-bake-emulation/{source}:{run}"
                    engine.tag(built[source], tag)
                    private.append(tag)
                    text = replace_stage(text, key, tag)
            df = work / f"{name}.Dockerfile"
            df.write_text(text, encoding="utf-8")
            base = {"BASE_IMAGE": _local_base(targets, name)} if "BASE_IMAGE" in t["args"] else {}
            args = {**t["args"], **base}
            req = BuildRequest(df, Path(t["context"]), t["target"], args, secret_files(t),
                               labels=t.get("labels", {}))
            built[name] = engine.build(req).image_id
            for key, ref in t.get("contexts", {}).items():
                if key != "parent":  # a shared stage: the target's image is the consumer's own stage
                    # The same layers. Not the same image ID: BuildKit 0.8 stamps build times into the config, and
                    # on an empty cache another test's build of this stage can race this one and store a second
                    # record of it, which a lookup may return (CI's first run on a fresh machine did).
                    own = engine.build(BuildRequest(df, Path(t["context"]), key, args, secret_files(t))).image_id
                    assert layers(client, own) == layers(client, built[ref.removeprefix("target:")]), (name, key)
        yield targets, built
    finally:
        for tag in private:
            client.api.remove_image(tag)


def _local_base(targets: dict[str, Any], name: str) -> str:
    """The local base a target builds on here: its variant's (tests/shipped.py), or for a stage variants share,
    that of a variant using it."""
    if name in shipped().by_name:
        return build_base(shipped().by_name[name])
    if name == BARE:  # the CPU PyTorch variant's Debian, whose stages it shares
        return _local_base(targets, PARENT)
    user = next(n for n, t in targets.items() if f"target:{name}" in t.get("contexts", {}).values())
    return _local_base(targets, user)


def test_emulated_targets_build_labelled_images(emulated: tuple[dict[str, Any], dict[str, str]],
                                                client: docker.DockerClient) -> None:
    targets, built = emulated
    # Both kinds of named context were emulated: the stages the two variants share, and the child's parent.
    shared = [targets[name].get("contexts", {}) for name in EMULATED]
    assert shared[0] == shared[1] and set(shared[0]) == {"python", "installer"}, shared
    assert targets[CHILD]["contexts"] == {"parent": f"target:{PARENT}"}
    for name in [*EMULATED, CHILD]:
        config = client.api.inspect_image(built[name])["Config"]
        labels = config["Labels"]
        for key, value in targets[name]["labels"].items():
            assert labels.get(key) == value, (name, key)
        assert labels["trainimg.variant"] == name
        # The context held the runtime: the image imports it (a failing command raises ContainerError).
        client.containers.run(built[name], ["python", "-c", "import trainimg_runtime"], entrypoint=[], remove=True,
                              network_mode="none")
    # The child is built on the parent target's image: every parent layer is under it.
    parent_layers = client.api.inspect_image(built[PARENT])["RootFS"]["Layers"]
    child = client.api.inspect_image(built[CHILD])
    assert child["RootFS"]["Layers"][:len(parent_layers)] == parent_layers
    assert child["Config"]["Labels"]["team"] == "bake"
