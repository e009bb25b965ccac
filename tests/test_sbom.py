"""The SBOM beside every image (issue 25, part 4): made inside the image at build time, valid CycloneDX 1.6 by
cyclonedx-python-lib's own validator, pushed beside the image as an OCI referrer and read back with oras-py
through the referrers tag fallback of Debian's docker-registry 2.8, and compared by `trainimg diff`.

Images: the session's CPU PyTorch image (conftest.cpu_image), the GPU PyTorch variant built on the local base as
tests/test_gpu_image.py builds it (cached by BuildKit across the suite), and two small images made FROM the CPU
image that install different versions of a test wheel (the diff).
"""

from __future__ import annotations

import io
import json
import re
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import docker.errors
import oras.client
import pytest
from conftest import CPU_VARIANT, LOCAL_BASE, ROOT, remove_image, trainimg
from conftest_registry import RegistryLogin
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from conftest_images import CUDA_TAG, CUDA_VARIANT
from test_render import golden
from wheels import write_wheel

from trainimg.plan import blocks
from trainimg.recipe.loading import load_recipes
from trainimg.engine.docker import DockerEngine
from trainimg.publish.push import PushResult
from trainimg.publish.sbom import SbomPublisher
from trainimg.registry.references import RegistryTarget
from trainimg.errors import RegistryError
from trainimg.registry.referrers import OCI_INDEX, OCI_MANIFEST, attach, fallback_tag, subject_of
from trainimg.registry.registryapi import RegistryAPI
from trainimg.runtime.contract import SBOM_PATH, VERSION_PREFIX
from trainimg.runtime.sbom import AUDIT_PROPERTY, HASH_SOURCE, MEDIA_TYPE, PACKAGE_PROPERTY, VERSION_SOURCE

RUN = uuid.uuid4().hex[:8]
PROBE = "trainimg-sbom-probe"
EXTRA = "trainimg-sbom-extra"
REPORT_TYPE = "application/vnd.trainimg.test-report+json"  # a second artifact on the same subject


def validate(text: str) -> dict[str, Any]:
    """CycloneDX's own JSON validator (strict: no unknown fields), then the document."""
    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    assert errors is None, errors
    return json.loads(text)


def by_purl(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["purl"]: c for c in doc["components"] if "purl" in c}


def prop(component: dict[str, Any], name: str) -> str | None:
    return next((p["value"] for p in component.get("properties", []) if p["name"] == name), None)


def lock_pins(variant: str) -> dict[str, tuple[str, set[str]]]:
    """The committed lock read independently: normalised name -> (version, its sha256 hashes)."""
    text = (ROOT / "images" / variant / "requirements.lock").read_text()
    pins = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", re.sub(r"\\\n", " ", text)):
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", block)
        if m:
            name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
            pins[name] = (m.group(2), set(re.findall(r"--hash=sha256:([0-9a-f]{64})", block)))
    return pins


def in_image(image: str, *command: str, stdin: str | None = None) -> str:
    """`command`'s stdout in a throwaway container (the docker CLI: the SDK's run can lose a short output), `stdin`
    given to it where there is one."""
    interactive = ["--interactive"] if stdin is not None else []
    proc = subprocess.run([os.environ.get("TRAINIMG_DOCKER_CLI", "docker"), "run", "--rm", "--network", "none",
                           *interactive, image, *command], input=stdin, capture_output=True, text=True, timeout=300,
                          check=True)
    return proc.stdout


@pytest.fixture(scope="module")
def cpu_sbom(cpu_image: str, state_env: dict[str, str]) -> str:
    r = trainimg("sbom", CPU_VARIANT, env=state_env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_dockerfile_step_writes_the_sbom_after_every_install() -> None:
    text = blocks.sbom(load_recipes(ROOT / "recipes").by_name[CPU_VARIANT]).text
    golden("sbom", text)
    step = text[text.index("\nRUN "):]  # the step after its comment, sealed like every RUN (plan.reproducible)
    assert f" && python -m trainimg_runtime sbom --write {SBOM_PATH} --audit " in step
    assert f"--mount=type=bind,source=audit/{CPU_VARIANT}.json," in step  # the audit's state and VEX
    shipped = (ROOT / "images" / CPU_VARIANT / "Dockerfile").read_text()
    assert shipped.rstrip().endswith(step.rstrip())  # the last step: after the installs and the labels


def test_cpu_image_sbom_validates_and_lists_what_is_installed(cpu_sbom: str, cpu_image: str) -> None:
    doc = validate(cpu_sbom)
    assert doc["specVersion"] == "1.6" and doc["metadata"]["component"]["name"] == CPU_VARIANT
    assert "timestamp" not in doc["metadata"] and doc["serialNumber"].startswith("urn:uuid:")
    comps = by_purl(doc)
    # Every wheel of the lock is there at its pin, with exactly the lock's hashes, and says so.
    pins = lock_pins(CPU_VARIANT)
    pypi = {c["name"].lower().replace("_", "-"): c for p, c in comps.items() if p.startswith("pkg:pypi/")}
    for name, (version, hashes) in pins.items():
        assert pypi[name]["version"] == version, name
        assert {h["content"] for h in pypi[name]["hashes"]} == hashes and prop(pypi[name], HASH_SOURCE) == "lock"
    assert "pkg:pypi/torch@2.13.0%2Bcpu" in comps
    # What the lock does not pin (the venv's own pip) still has a hash, from its dist-info RECORD.
    unpinned = {n: c for n, c in pypi.items() if n not in pins}
    assert "pip" in unpinned, sorted(pypi)
    assert all(prop(c, HASH_SOURCE) == "record" and c["hashes"] for c in unpinned.values()), unpinned
    # dpkg's packages, as dpkg itself reports them in the image.
    libc = in_image(cpu_image, "dpkg-query", "-W", "-f", "${Version} ${Architecture}", "libc6").split()
    assert f"pkg:deb/debian/libc6@{libc[0].replace('+', '%2B')}?arch={libc[1]}&distro=bookworm" in comps
    installed = in_image(cpu_image, "dpkg-query", "-W", "-f", "${db:Status-Abbrev}${Package}\n").split()
    assert len([p for p in comps if p.startswith("pkg:deb/")]) == len([s for s in installed if s.startswith("ii")])
    assert not [c for c in doc["components"] if c["bom-ref"].startswith("file:")]  # a CPU image: no CUDA library


def test_sbom_is_deterministic(cpu_image: str, client: docker.DockerClient) -> None:
    """A fresh run in a new container, given the audit the build mounted, gives the file's bytes: sorted, no
    timestamp, serial from the content. Both from one image, by its ID: the variant's tag moves when another test of
    the lane builds it with another audit state. The audit document is the build's input, not something the image
    holds (a release with --skip-audit wrote "skipped"; a run given none says "not-audited", as a suite run saw), so
    the run is given the state and VEX the file records; the components and the serial are computed again."""
    image_id = client.images.get(cpu_image).id
    written = in_image(image_id, "cat", SBOM_PATH)
    doc = json.loads(written)
    assert doc["components"]  # the file the build wrote, not an empty one
    state = next(p["value"] for p in doc["metadata"]["properties"] if p["name"] == AUDIT_PROPERTY)
    audit = json.dumps({"state": state, "vulnerabilities": doc.get("vulnerabilities", [])})
    rerun = in_image(image_id, "python", "-m", "trainimg_runtime", "sbom", "--audit", "/dev/stdin", stdin=audit)
    assert rerun == written


@pytest.fixture(scope="module")
def gpu_sbom(cuda_image: str, state_env: dict[str, str]) -> str:
    """The GPU PyTorch variant as the session built it (tests/conftest_images.py), and its SBOM as `trainimg sbom`
    prints it."""
    r = trainimg("sbom", CUDA_VARIANT, env=state_env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_gpu_image_sbom_lists_the_cuda_libraries(gpu_sbom: str, client: docker.DockerClient) -> None:
    doc = validate(gpu_sbom)
    labels = client.images.get(CUDA_TAG).labels
    libraries = {c["name"]: c for c in doc["components"] if c["bom-ref"].startswith("file:")}
    # NCCL and cuDNN with the versions their libraries answer (what the build's labels read back); the CUDA
    # runtime and every other CUDA library with a version and the wheel that brought it.
    for name, key in (("libnccl", "nccl"), ("libcudnn", "cudnn")):
        assert libraries[name]["version"] == labels[f"{VERSION_PREFIX}{key}"], name
        assert prop(libraries[name], VERSION_SOURCE) == "ctypes"
    assert libraries["libcudart"]["version"] == labels[f"{VERSION_PREFIX}cuda"]
    assert str(prop(libraries["libcudart"], PACKAGE_PROPERTY)).startswith("pkg:pypi/nvidia-cuda-runtime")
    assert {"libcublas", "libcufft", "libnvJitLink"} <= set(libraries)
    assert all(c.get("version") and prop(c, PACKAGE_PROPERTY) for c in libraries.values())
    pins = lock_pins(CUDA_VARIANT)
    nccl = next(c for c in doc["components"] if c["name"] == "nvidia-nccl-cu13")
    assert {h["content"] for h in nccl["hashes"]} == pins["nvidia-nccl-cu13"][1]


# -- pushed beside the image, read back through the fallback tag -----------------------------------------------


def push_with_sbom(variant: str, image: str, prefix: str, registry: RegistryLogin, state_env: dict[str, str],
                   *push_args: str) -> dict[str, Any]:
    """`variant` gated (`trainimg test`) and pushed with `trainimg push` under `prefix`: what the read-back needs."""
    env = {**state_env, "TRAINIMG_REGISTRY_PASSWORD": registry.password}
    target = f"{registry.host}/{prefix}"
    r = trainimg("test", variant, "--replicas", "2", "--progress", "quiet", env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    r = trainimg("push", variant, "--registry", target, "--username", registry.username, *push_args, env=env,
                 timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sbom: pushed" in r.stdout
    creds = {"username": registry.username, "password": registry.password}
    api = RegistryAPI(RegistryTarget.parse(target), creds)
    repository = f"{prefix}/{image.split(':', 1)[0]}"
    return {"env": env, "target": target, "api": api, "repository": repository, "variant": variant,
            "subject": subject_of(api, repository, image.split(":", 1)[1])}


@pytest.fixture(scope="module")
def pushed(cpu_image: str, registry: RegistryLogin, state_env: dict[str, str], client: docker.DockerClient
           ) -> Iterator[dict[str, Any]]:
    """The CPU image pushed under a prefix of this module; the registry-qualified tag the push made is removed
    afterwards (the image stays)."""
    pushed = push_with_sbom(CPU_VARIANT, cpu_image, f"gsbom{RUN}", registry, state_env)
    yield pushed
    client.api.remove_image(f"{pushed['target']}/{cpu_image}")


def oras_client(registry: RegistryLogin) -> oras.client.OrasClient:
    client = oras.client.OrasClient(hostname=registry.host, insecure=True, auth_backend="basic")
    client.auth.set_basic_auth(registry.username, registry.password)
    return client


def fallback_entries(client: oras.client.OrasClient, registry: RegistryLogin, pushed: dict[str, Any]
                     ) -> list[dict[str, Any]]:
    index = client.get_manifest(f"{registry.host}/{pushed['repository']}:{fallback_tag(pushed['subject'].digest)}",
                                allowed_media_type=[OCI_INDEX])
    assert index["mediaType"] == OCI_INDEX
    return index["manifests"]


def assert_read_back(pushed: dict[str, Any], registry: RegistryLogin, sbom: str, folder: Path) -> None:
    """No referrers API (registry 2.8): oras finds the SBOM through the fallback tag, its manifest's subject is
    the image, the file pulled is the image's SBOM and validates; `trainimg sbom --registry` prints the same."""
    assert pushed["api"].referrers(pushed["repository"], pushed["subject"].digest) is None
    client = oras_client(registry)
    entries = fallback_entries(client, registry, pushed)
    assert [e["artifactType"] for e in entries] == [MEDIA_TYPE]
    manifest = client.get_manifest(f"{registry.host}/{pushed['repository']}@{entries[0]['digest']}")
    assert manifest["subject"]["digest"] == pushed["subject"].digest and manifest["artifactType"] == MEDIA_TYPE
    files = client.pull(target=f"{registry.host}/{pushed['repository']}@{entries[0]['digest']}", outdir=str(folder))
    assert [Path(f).name for f in files] == [Path(SBOM_PATH).name]
    pulled = Path(files[0]).read_text()
    assert pulled == sbom
    validate(pulled)
    r = trainimg("sbom", pushed["variant"], "--registry", pushed["target"], "--username", registry.username,
                 env=pushed["env"], timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == sbom


def test_sbom_is_read_back_with_oras_through_the_fallback_tag(pushed: dict[str, Any], registry: RegistryLogin,
                                                               cpu_sbom: str, tmp_path: Path) -> None:
    assert_read_back(pushed, registry, cpu_sbom, tmp_path)


def test_gpu_image_sbom_is_read_back_through_the_fallback_tag(pushed: dict[str, Any], gpu_sbom: str,
                                                               registry: RegistryLogin, tmp_path: Path) -> None:
    """The GPU variant's SBOM (the CUDA libraries, NCCL and cuDNN with their versions) put beside a manifest by the
    push's own SBOM publisher, which reads it from the GPU image, then read back like the CPU one's. What the GPU
    image adds to the read-back is its SBOM, not its layers: the manifest it goes beside is the CPU image's, its
    blobs mounted into a repository of its own under the GPU variant's tag (pushing the GPU image's 6 GB for this
    took 197 s of the suite; the push path is the one `pushed` took)."""
    target = RegistryTarget.parse(f"{registry.host}/gsbomgpu{RUN}")
    api = replace(pushed["api"], target=target)
    name, tag = CUDA_TAG.split(":", 1)
    repository = target.repository(name)
    body, media_type, _ = pushed["api"].manifest_json(pushed["repository"], pushed["subject"].digest)
    manifest = json.loads(body)
    for blob in [manifest["config"], *manifest["layers"]]:
        assert api.mount_blob(repository, blob["digest"], pushed["repository"]), blob
    digest = api.put_manifest(repository, tag, body, media_type)
    SbomPublisher(DockerEngine(), target, api.credentials)(CUDA_TAG, PushResult(f"{target.host}/{repository}:{tag}",
                                                                                digest, 0, 1))
    gpu = {**pushed, "target": str(target), "api": api, "repository": repository, "variant": CUDA_VARIANT,
           "subject": subject_of(api, repository, tag)}
    assert_read_back(gpu, registry, gpu_sbom, tmp_path)


def test_a_second_artifact_keeps_the_first_in_the_fallback_index(pushed: dict[str, Any], registry: RegistryLogin,
                                                                   cpu_sbom: str) -> None:
    report = json.dumps({"variant": CPU_VARIANT, "passed": True}).encode()
    attach(pushed["api"], pushed["repository"], pushed["subject"], REPORT_TYPE, report, title="report.json")
    # Pushing the same image again re-attaches the same SBOM: same digest, no second entry.
    r = trainimg("push", CPU_VARIANT, "--registry", pushed["target"], "--username", registry.username,
                 env=pushed["env"], timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    client = oras_client(registry)
    entries = fallback_entries(client, registry, pushed)
    assert [e["artifactType"] for e in entries] == [MEDIA_TYPE, REPORT_TYPE]
    layer = client.get_manifest(f"{registry.host}/{pushed['repository']}@{entries[1]['digest']}")["layers"][0]
    blob = client.get_blob(f"{registry.host}/{pushed['repository']}", layer["digest"])
    assert blob.content == report
    r = trainimg("sbom", CPU_VARIANT, "--registry", pushed["target"], "--username", registry.username,
                 env=pushed["env"], timeout=120)
    assert r.returncode == 0 and r.stdout == cpu_sbom, r.stderr


# -- diff: package changes between two images ------------------------------------------------------------------


@pytest.fixture(scope="module")
def pinned_pair(cpu_image: str, client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[str, str]]:
    """Two small images FROM the CPU image: `one` pins the probe wheel 1.0; `two` pins 2.0, adds another wheel and
    removes cloudml-hypertune; each rewrites its SBOM after its install, as a trainimg build does."""
    made = []
    for marker, wheels, remove in (("one", [(PROBE, "1.0")], ""), ("two", [(PROBE, "2.0"), (EXTRA, "1.0")],
                                                                     "cloudml-hypertune")):
        ctx = tmp_path_factory.mktemp(f"gsbom-{marker}")
        names = [write_wheel(ctx, name, version, {f"{name.replace('-', '_')}.py": f"V = {version!r}\n".encode()}
                             ).name for name, version in wheels]
        uninstall = f" && python -m pip uninstall -y {remove}" if remove else ""
        (ctx / "Dockerfile").write_text(
            f"FROM {cpu_image}\nCOPY *.whl /tmp/wheels/\n"
            f"RUN python -m pip install --no-index --no-deps {' '.join('/tmp/wheels/' + n for n in names)}"
            f"{uninstall} && rm -rf /tmp/wheels && python -m trainimg_runtime sbom --write {SBOM_PATH}\n")
        tag = f"gsbom-diff-{RUN}:{marker}"
        client.images.build(path=str(ctx), tag=tag, labels={"trainimg.test": "1"}, rm=True, forcerm=True,
                            pull=False)
        made.append(tag)
        shutil.rmtree(ctx)
    yield made[0], made[1]
    for tag in made:
        remove_image(client, tag)


def test_diff_lists_package_changes_from_the_sboms(pinned_pair: tuple[str, str], state_env: dict[str, str]) -> None:
    a, b = pinned_pair
    r = trainimg("diff", a, b, "--json", env=state_env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["packages"] == {
        "added": {f"pypi:{EXTRA}": "1.0"},
        "removed": {"pypi:cloudml-hypertune": "0.1.0.dev6"},
        "changed": {f"pypi:{PROBE}": {"a": "1.0", "b": "2.0"}},
    }
    r = trainimg("diff", a, b, env=state_env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "packages: 1 changed, 1 added, 1 removed" in r.stdout
    assert f"~ pypi:{PROBE}: 1.0 -> 2.0" in r.stdout and f"+ pypi:{EXTRA} 1.0" in r.stdout
    assert "- pypi:cloudml-hypertune 0.1.0.dev6" in r.stdout


def test_sbom_of_an_unknown_image_is_one_line_exit_2(docker_engine: str, state_env: dict[str, str]) -> None:
    r = trainimg("sbom", f"gsbom-none-{RUN}:nope", env=state_env, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"gsbom-none-{RUN}:nope" in r.stderr


def test_image_without_an_sbom_is_refused_before_the_push(registry: RegistryLogin, state_env: dict[str, str],
                                                           client: docker.DockerClient) -> None:
    """An image trainimg did not build (no SBOM in it) never leaves: one line, nothing pushed."""
    tag = f"gsbom-bare-{RUN}:one"
    client.images.build(fileobj=io.BytesIO(f"FROM {LOCAL_BASE}\nRUN echo {RUN} > /gsbom\n".encode()), tag=tag,
                        labels={"trainimg.test": "1"}, rm=True, forcerm=True, pull=False)
    try:
        env = {**state_env, "TRAINIMG_REGISTRY_PASSWORD": registry.password}
        r = trainimg("push", tag, "--registry", registry.host, "--username", registry.username, env=env, timeout=120)
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "has no SBOM" in r.stderr
        api = RegistryAPI(RegistryTarget.parse(registry.host), {"username": registry.username,
                                                                 "password": registry.password})
        assert api.tags(f"gsbom-bare-{RUN}") == []
    finally:
        remove_image(client, tag)


# -- the registry's answers that are not what they should be: one line each ------------------------------------


@pytest.fixture
def bare_manifest(registry: RegistryLogin) -> tuple[RegistryAPI, str]:
    """A tiny image manifest (its config only) under a repository of this module, pushed through the API."""
    api = RegistryAPI(RegistryTarget.parse(registry.host), {"username": registry.username,
                                                             "password": registry.password})
    repository = f"gsbom-manifest-{uuid.uuid4().hex[:8]}"  # one per test: each changes its tags
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})
    digest = api.put_blob(repository, config.encode())
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": [],
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest,
                           "size": len(config)}}
    api.put_manifest(repository, "v1", json.dumps(manifest).encode(), OCI_MANIFEST)
    return api, repository


def test_sbom_of_an_image_pushed_without_one_is_one_line(bare_manifest: tuple[RegistryAPI, str],
                                                         registry: RegistryLogin, state_env: dict[str, str]) -> None:
    env = {**state_env, "TRAINIMG_REGISTRY_PASSWORD": registry.password}
    r = trainimg("sbom", f"{bare_manifest[1]}:v1", "--registry", registry.host, "--username", registry.username,
                 env=env, timeout=60)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "no SBOM refers to" in r.stderr and f"{bare_manifest[1]}:v1" in r.stderr


def test_a_fallback_tag_that_holds_something_else_is_left_alone(bare_manifest: tuple[RegistryAPI, str]) -> None:
    """The referrers tag of the subject names a plain manifest (not an index): attach refuses to overwrite it."""
    api, repository = bare_manifest
    subject = subject_of(api, repository, "v1")
    squatter = api.manifest_json(repository, "v1")
    assert squatter is not None
    api.put_manifest(repository, fallback_tag(subject.digest), squatter[0], OCI_MANIFEST)
    with pytest.raises(RegistryError, match="not the referrers index"):
        attach(api, repository, subject, MEDIA_TYPE, b"{}")
    assert api.remote_digest(repository, fallback_tag(subject.digest)) == subject.digest
