"""Helpers that derive small test images (mostly broken ones) FROM an image already on the engine.

Every image is built by the engine's classic builder through the docker SDK (`client.images.build` with a custom
tar context), carries the label ``trainimg.test=1`` and is tagged ``trainimg-test/<kind>:<random>``; `TestImages`
remembers what it made and removes exactly those images (never anything else, never a prune).

The broken images each break one promise that `trainimg test` must catch:

* `gpu_labels`: a CPU image relabelled as a CUDA variant (NCCL and cuDNN missing, CPU-only torch);
* `old_nccl`: a fake ``libnccl.so.2`` compiled here with gcc whose ``ncclGetVersion`` answers 2.6.4;
* `no_hypertune`: ``cloudml-hypertune`` uninstalled;
* `silent_hypertune`: a ``hypertune`` package earlier on ``sys.path`` whose report does nothing;
* `wrong_allreduce`: ``torch.distributed.all_reduce`` adds 1 after the real reduction;
* `hung_replica`: rank 1's ``torch.distributed.init_process_group`` never returns.

The last two patch torch lazily: a ``.pth`` file in the venv's site-packages imports a tiny module that installs a
meta-path hook, which wraps ``torch.distributed`` right after it is first imported (so processes that never import
torch pay nothing). A ``sitecustomize.py`` in the venv would never run: Debian's python3.11 ships
``/usr/lib/python3.11/sitecustomize.py``, which comes first on ``sys.path`` and shadows it.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import textwrap
import uuid
from collections.abc import Mapping
from pathlib import Path

import docker
import docker.errors
from trainimg.runtime.contract import LABELS_PATH
from wheels import write_wheel

TEST_LABEL = {"trainimg.test": "1"}
SITE_PACKAGES = "/opt/venv/lib/python3.11/site-packages"

GPU_LABELS = {"trainimg.recipe.cuda": "13.0", "trainimg.recipe.nccl": "2.30.7",
              "trainimg.recipe.cudnn": "9.24.0.43"}

# argv: the labels file, a JSON object of labels to set in it.
MERGE_LABELS = ("import json, os, sys; path, new = sys.argv[1], json.loads(sys.argv[2]); "
                "old = json.load(open(path)) if os.path.exists(path) else {}; "
                "json.dump({**old, **new}, open(path, 'w'), sort_keys=True)")

FAKE_NCCL_C = "int ncclGetVersion(int *v) { *v = 2604; return 0; }\n"

FAKE_HYPERTUNE = textwrap.dedent('''\
    """A hypertune that accepts every report and writes nothing (the bug the probe must catch)."""


    class HyperTune:
        def report_hyperparameter_tuning_metric(self, *args, **kwargs):
            return None
    ''')

# Installed as <site-packages>/trainimg_test_patch.py and imported by trainimg_test_patch.pth.
TORCH_PATCH = textwrap.dedent('''\
    """trainimg test fixture: break torch.distributed right after it is imported (see tests/brokenimages.py)."""
    import importlib.abc
    import importlib.machinery
    import os
    import sys
    import time

    MODE = {mode!r}


    def _patch(dist):
        if MODE == "wrong_sum":
            real = dist.all_reduce

            def all_reduce(tensor, *args, **kwargs):
                out = real(tensor, *args, **kwargs)
                tensor.add_(1)
                return out

            dist.all_reduce = all_reduce
        elif MODE == "hang" and os.environ.get("RANK") == "1":
            def init_process_group(*args, **kwargs):
                while True:
                    time.sleep(3600)

            dist.init_process_group = init_process_group


    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "torch.distributed":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def patched(module):
                exec_module(module)
                _patch(module)

            spec.loader.exec_module = patched
            return spec


    sys.meta_path.insert(0, _Finder())
    ''')


def compile_fake_nccl(out_dir: Path, version_code: int = 2604) -> Path:
    """A ``libnccl.so.2`` whose ncclGetVersion answers `version_code` (2604 is NCCL 2.6.4), built with gcc."""
    src = out_dir / "fake_nccl.c"
    src.write_text(FAKE_NCCL_C.replace("2604", str(version_code)), encoding="utf-8")
    lib = out_dir / "libnccl.so.2"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    return lib


def _context(dockerfile: str, files: Mapping[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **files}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


class TestImages:
    """Builds derived images and removes exactly the ones it built."""

    __test__ = False  # not a pytest class

    def __init__(self, client: docker.DockerClient, base: str) -> None:
        self.client = client
        self.base = base
        self.made: list[tuple[str, str]] = []  # (tag, image id)

    def build(self, kind: str, lines: list[str], labels: Mapping[str, str] | None = None,
              files: Mapping[str, bytes] | None = None, base: str | None = None, labels_file: bool = True) -> str:
        """Build ``FROM base`` + `lines`, labelled trainimg.test=1 plus `labels`; returns the tag.

        trainimg `labels` are also merged into the image's labels file, as a build writes both: the in-image
        selftest, which reads the file, must see the same relabelled image `trainimg test` sees. An image that only
        carries labels for the host to read (no python3 in its base) passes `labels_file=False`."""
        tag = f"trainimg-test/{kind}:{uuid.uuid4().hex[:10]}"
        ours = {k: v for k, v in (labels or {}).items() if k.startswith("trainimg.")}
        if ours and labels_file:
            lines = [*lines, "RUN " + json.dumps(["python3", "-c", MERGE_LABELS, LABELS_PATH, json.dumps(ours)])]
        dockerfile = f"FROM {base or self.base}\n" + "".join(line + "\n" for line in lines)
        image, _ = self.client.images.build(fileobj=_context(dockerfile, files or {}), custom_context=True,
                                            labels={**TEST_LABEL, **(labels or {})}, tag=tag, rm=True,
                                            forcerm=True, pull=False)
        self.made.append((tag, image.id))
        return tag

    def image_id(self, tag: str) -> str:
        return next(i for t, i in self.made if t == tag)

    def remove_all(self) -> None:
        for tag, image_id in reversed(self.made):
            for ref in (tag, image_id):
                try:
                    self.client.api.remove_image(ref, force=True)
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError:
                    pass  # still used by a container another test left: reported by that test
        self.made.clear()

    # -- the broken images -------------------------------------------------------------------------------------
    def gpu_labels(self) -> str:
        """The CPU image labelled as a CUDA 13.0 variant: no NCCL, no cuDNN, CPU-only torch."""
        return self.build("gpu-labels", ["RUN true"], labels=GPU_LABELS)

    def old_nccl(self, workdir: Path) -> str:
        lib = compile_fake_nccl(workdir)
        return self.build("old-nccl", ["COPY libnccl.so.2 /usr/local/lib/libnccl.so.2", "RUN ldconfig"],
                          labels={"trainimg.recipe.cuda": "13.0", "trainimg.recipe.nccl": "2.6.4"},
                          files={"libnccl.so.2": lib.read_bytes()})

    def no_hypertune(self) -> str:
        return self.build("no-hypertune", ["RUN python -m pip uninstall -y cloudml-hypertune"])

    def silent_hypertune(self) -> str:
        return self.build("silent-hypertune", ["COPY hypertune.py /opt/fake-hypertune/hypertune/__init__.py",
                                               "ENV PYTHONPATH=/opt/fake-hypertune"],
                          files={"hypertune.py": FAKE_HYPERTUNE.encode()})

    def _torch_patch(self, kind: str, mode: str) -> str:
        return self.build(kind, [f"COPY patch.py {SITE_PACKAGES}/trainimg_test_patch.py",
                                 f"RUN echo 'import trainimg_test_patch' > {SITE_PACKAGES}/trainimg_test_patch.pth"],
                          files={"patch.py": TORCH_PATCH.format(mode=mode).encode()})

    def wrong_allreduce(self) -> str:
        return self._torch_patch("wrong-allreduce", "wrong_sum")

    def hung_replica(self) -> str:
        return self._torch_patch("hung-replica", "hang")

    # -- good derived images -----------------------------------------------------------------------------------
    def team_image(self) -> str:
        """What a team does with a trainimg base: FROM it, add its own files."""
        return self.build("team", ["RUN mkdir -p /app && echo 'print(\"team trainer\")' > /app/train.py"])

    def without_runtime(self) -> str:
        """The CPU image with trainimg's in-image runtime removed (`trainimg test` must mount its own)."""
        return self.build("no-runtime", ["RUN rm -rf /opt/trainimg"])

    def relabelled(self) -> str:
        """The CPU image with one more label: same layers, a new image ID, so no conformance record."""
        return self.build("untested", [], labels={"org.example.untested": uuid.uuid4().hex})


# -- shared checks -------------------------------------------------------------------------------------------------

MANIFEST_ACCEPT = ", ".join((
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
))


def registry_digest(host: str, username: str, password: str, ref: str) -> str | None:
    """The manifest digest the registry at `host` serves for local-style `repo:tag`, straight from its HTTP API
    (HEAD /v2/<repo>/manifests/<tag> with basic auth); None when it answers 404 (no such tag or repository)."""
    import requests

    repo, _, tag = ref.rpartition(":")
    resp = requests.head(f"http://{host}/v2/{repo}/manifests/{tag}", auth=(username, password),
                         headers={"Accept": MANIFEST_ACCEPT}, timeout=30)
    if resp.status_code == 404:
        return None
    assert resp.status_code == 200, f"registry answered HTTP {resp.status_code} for {ref}"
    return resp.headers["Docker-Content-Digest"]


def owned_by(client: docker.DockerClient, pid: int, checks: bool = True) -> list[str]:
    """Containers and networks (labelled trainimg.run) that the trainimg process `pid` started on this host; with
    `checks` False, not the one-off containers of its checks (the probe's), only its jobs' replicas."""
    import socket

    from trainimg.conformance.replicas import CHECK_RUN_PREFIX, OWNER_LABEL, RUN_LABEL

    # One listing call each, labels read from its answer: `containers.list()` would inspect every container and
    # fail when a concurrent test removes one in between.
    owner = f"{socket.gethostname()}:{pid}"
    found = [f"container {c['Names'][0].lstrip('/')}"
             for c in client.api.containers(all=True, filters={"label": RUN_LABEL})
             if (c.get("Labels") or {}).get(OWNER_LABEL) == owner
             and (checks or not c["Labels"][RUN_LABEL].startswith(CHECK_RUN_PREFIX))]
    found += [f"network {n['Name']}" for n in client.api.networks(filters={"label": RUN_LABEL})
              if (n.get("Labels") or {}).get(OWNER_LABEL) == owner]
    return found


# A recipe-level way to make one variant of a release fail conformance (tests/test_release.py,
# tests/test_ci_gitlab_local.py): a wheel its `extras` pin, served from a wheelhouse the test writes.
BREAKER = "trainimg-release-breaker"


def breaker_wheel(folder: Path) -> Path:
    """A pure-Python wheel whose .pth breaks torch.distributed.all_reduce after import (see the module doc)."""
    dist = BREAKER.replace("-", "_")
    return write_wheel(folder, BREAKER, "1.0", {f"{dist}.py": TORCH_PATCH.format(mode="wrong_sum").encode(),
                                                 f"{dist}.pth": f"import {dist}\n".encode()})
