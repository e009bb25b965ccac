"""The layer figures of issue 34, on this machine, counted by the engine and the registry (not estimated).

- `layers_reproducible`: two builds of a variant with no layer cache (`trainimg build --no-cache`): how many of
  its layers (`RootFS.Layers`) have the same digest, n/N;
- `largest_layer_share`: the variant pushed to a fresh local registry (Debian's docker-registry, access log on):
  its biggest layer's compressed bytes ÷ the image's, from the manifest the registry holds;
- `runtime_change_push`: one file of trainimg's runtime changed, the variant rebuilt and pushed again: bytes of
  the layer blobs the registry's access log shows uploaded ÷ the image's compressed bytes (`unchanged_push`: the
  same with nothing changed, on the engine that pushed the first: its layer bytes);
- `cold_pull_seconds`: the image removed from the engine (only the base's layer stays) and pulled again from the
  local registry; the layer bytes its access log shows served;
- with `--swap-pin DIST==VERSION` (a real release from PyPI, e.g. `nvidia-nccl-cu13==2.31.2`), instead of the above:
  `push_after_one_change`: the image released through trainimg's registry client (`--upload client`), the lock's pin
  of DIST swapped for VERSION (its hashes from PyPI's JSON API), the variant rebuilt and released again: bytes of
  the blobs the access log shows uploaded ÷ the new image's compressed bytes. The steps below the pin come from the
  layer cache, which gives the bytes a cold build gives (`layers_reproducible`), and the client asks the registry
  what it holds, not the engine, so an emptied engine uploads the same; and
  `node_repull_after_one_change`: both images taken off the engine, the first pulled (a node that ran it), then the
  second: bytes the access log shows served ÷ its compressed bytes.

Run it on an engine of its own (`DOCKER_HOST`): it removes the variant's images there. Usage:
`python3 benchmarks/layers.py VARIANT [--allow-missing COMPONENT]... [--swap-pin DIST==VERSION]`; prints
`name: value` lines and the JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCKER = "/usr/bin/docker"
BASE = "local/debian:bookworm"
# A completed blob upload in the registry's access log: the PUT that names the digest (uploads of new bytes).
_UPLOAD_DONE = re.compile(r'"PUT /v2/\S+/blobs/uploads/\S*?digest=(?P<digest>sha256(?::|%3[Aa])[0-9a-f]{64})\S* '
                          r'HTTP/[0-9.]+" 20[01] ', re.I)
_BLOB_GET = re.compile(r'"GET /v2/\S+/blobs/(?P<digest>sha256:[0-9a-f]{64}) HTTP/[0-9.]+" 200 (?P<size>[0-9]+)')


def sh(*cmd: str, timeout: float = 3600) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout, cwd=ROOT).stdout


def tag_of(variant: str) -> str:
    listed = json.loads(sh("trainimg", "list", "--json"))
    return next(v["tag"] for v in listed if v["name"] == variant)


def build(variant: str, extra: list[str], no_cache: bool = True) -> tuple[list[str], float]:
    start = time.monotonic()
    sh("trainimg", "build", variant, *(["--no-cache"] if no_cache else []), "--base-image", BASE, "--progress", "quiet",
       *extra)
    layers = json.loads(sh(DOCKER, "image", "inspect", "-f", "{{json .RootFS.Layers}}", tag_of(variant)))
    return layers, time.monotonic() - start


def reproducible(variant: str, extra: list[str]) -> dict[str, Any]:
    first, s1 = build(variant, extra)
    second, s2 = build(variant, extra)
    same = sum(a == b for a, b in zip(first, second))
    return {"layers_reproducible": f"{same}/{max(len(first), len(second))}", "build_seconds": [round(s1), round(s2)],
            "differing_layers": [i + 1 for i, (a, b) in enumerate(zip(first, second)) if a != b]}


def manifest_layers(host: str, repository: str, tag: str) -> list[tuple[str, int]]:
    """The layers of the manifest the registry holds under `tag`, in order: (blob digest, compressed size)."""
    import requests

    resp = requests.get(f"http://{host}/v2/{repository}/manifests/{tag}", timeout=30, auth=_auth(host),
                        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    resp.raise_for_status()
    return [(layer["digest"], layer["size"]) for layer in resp.json()["layers"]]


_AUTH: dict[str, tuple[str, str]] = {}


def _auth(host: str) -> tuple[str, str]:
    return _AUTH[host]


def uploaded_bytes(log: Path, since: int, host: str, repository: str) -> int:
    """Bytes of the layer blobs whose upload the registry's access log shows completed after `since`."""
    import requests

    text = log.read_bytes()[since:].decode("utf-8", "replace")
    total = 0
    for m in _UPLOAD_DONE.finditer(text):
        digest = re.sub("%3a", ":", m.group("digest"), flags=re.I)
        head = requests.head(f"http://{host}/v2/{repository}/blobs/{digest}", timeout=30, auth=_auth(host))
        total += int(head.headers.get("Content-Length", 0))
    return total


def push(tag: str, host: str) -> None:
    sh(DOCKER, "tag", tag, f"{host}/{tag}")
    sh(DOCKER, "push", f"{host}/{tag}", timeout=7200)


def registry_figures(variant: str, extra: list[str], state: Path, pin: str | None = None,
                     engine_push: bool = False) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from trainimg.registry.localregistry import LocalRegistry

    reg = LocalRegistry(state, port=5029, access_log=True)
    info = reg.start()
    _AUTH[info.host] = (info.username, info.password)
    subprocess.run([DOCKER, "login", info.host, "-u", info.username, "--password-stdin"], input=info.password,
                   text=True, check=True, capture_output=True)
    try:
        if pin:
            measure = one_change_engine if engine_push else one_change
            return measure(variant, extra, pin, info.host, reg.log_path)
        return _measure(variant, extra, info.host, reg.log_path)
    finally:
        subprocess.run(["cp", str(reg.log_path), "/tmp/trainimg-bench-layers-registry.log"], check=False)
        reg.stop()


def _measure(variant: str, extra: list[str], host: str, log: Path) -> dict[str, Any]:
    tag = tag_of(variant)
    repository, ref = tag.split(":")
    push(tag, host)
    sizes = [size for _, size in manifest_layers(host, repository, ref)]
    total = sum(sizes)
    out: dict[str, Any] = {"compressed_bytes": total, "layer_bytes": sizes,
                           "largest_layer_share": round(max(sizes) / total, 3)}
    since = log.stat().st_size
    push(tag, host)
    out["unchanged_push_bytes"] = uploaded_bytes(log, since, host, repository)
    probe = ROOT / "builder" / "runtime" / "_bench_change.py"
    probe.write_text(f"# a runtime-only change for benchmarks/layers.py, {time.time()}\n")
    try:
        sh("trainimg", "build", variant, "--base-image", BASE, "--progress", "quiet", *extra)
    finally:
        probe.unlink()
    since = log.stat().st_size
    push(tag, host)
    out["runtime_change_push_bytes"] = uploaded_bytes(log, since, host, repository)
    out["runtime_change_push"] = round(out["runtime_change_push_bytes"] / total, 7)
    sh(DOCKER, "rmi", "-f", tag, f"{host}/{tag}")
    sh(DOCKER, "builder", "prune", "-af")  # BuildKit's records hold the layers too: the engine is emptied of them
    sh(DOCKER, "image", "prune", "-af")  # and the images the rebuilds left untagged (this engine is the bench's own)
    since = log.stat().st_size
    start = time.monotonic()
    sh(DOCKER, "pull", f"{host}/{tag}", timeout=7200)
    out["cold_pull_seconds"] = round(time.monotonic() - start, 1)
    text = log.read_bytes()[since:].decode("utf-8", "replace")
    out["cold_pull_layer_bytes"] = sum(int(m.group("size")) for m in _BLOB_GET.finditer(text))
    return out


def pypi_hashes(name: str, version: str) -> list[str]:
    """The SHA-256 of every Linux x86-64 wheel PyPI lists for `name==version` (its JSON API, through the proxy)."""
    import requests

    resp = requests.get(f"https://pypi.org/pypi/{name}/json", timeout=60)
    resp.raise_for_status()
    return [f["digests"]["sha256"] for f in resp.json()["releases"][version]
            if f["filename"].endswith(".whl") and ("x86_64" in f["filename"] or "-none-any" in f["filename"])]


@contextmanager
def swapped_pin(variant: str, pin: str) -> Iterator[None]:
    """The variant's lock with `pin`'s distribution at that version and PyPI's hashes; the lock restored after."""
    name, version = pin.split("==")
    lock = ROOT / "images" / variant / "requirements.lock"
    original = lock.read_text()
    entry = re.compile(rf"^{re.escape(name)}==\S+ \\\n(?:    --hash=sha256:[0-9a-f]{{64}}(?: \\)?\n)+", re.M)
    hashes = " \\\n".join(f"    --hash=sha256:{h}" for h in pypi_hashes(name, version))
    text, found = entry.subn(lambda _: f"{name}=={version} \\\n{hashes}\n", original)
    if found != 1:
        raise SystemExit(f"layers: {lock} has no entry {name}==...")
    lock.write_text(text)
    try:
        yield
    finally:
        lock.write_text(original)


def one_change(variant: str, extra: list[str], pin: str, host: str, log: Path) -> dict[str, Any]:
    """`push_after_one_change` and `node_repull_after_one_change` for one real pin change (module docstring)."""
    sys.path.insert(0, str(ROOT))
    from trainimg.engine.docker import DockerEngine
    from trainimg.registry.blobpush import push_saved
    from trainimg.registry.references import RegistryTarget
    from trainimg.registry.registryapi import RegistryAPI

    tag = tag_of(variant)
    repository, ref = tag.split(":")
    user, password = _auth(host)
    api = RegistryAPI(RegistryTarget.parse(host), {"username": user, "password": password})
    first = push_saved(DockerEngine(), tag, api, repository, ref)
    with swapped_pin(variant, pin):
        _, seconds = build(variant, extra, no_cache=False)
    since = log.stat().st_size
    second = push_saved(DockerEngine(), tag, api, repository, ref)
    uploaded = uploaded_bytes(log, since, host, repository)
    out: dict[str, Any] = {"swap_pin": pin, "rebuild_seconds": round(seconds),
                           "compressed_bytes": second.compressed_bytes,
                           "push_after_one_change_bytes": uploaded, "client_counted_bytes": second.bytes_uploaded,
                           "push_after_one_change": round(uploaded / second.compressed_bytes, 4)}
    sh(DOCKER, "rmi", "-f", tag)
    sh(DOCKER, "pull", f"{host}/{repository}@{first.digest}", timeout=7200)  # the node ran the previous image
    since = log.stat().st_size
    sh(DOCKER, "pull", f"{host}/{tag}", timeout=7200)
    text = log.read_bytes()[since:].decode("utf-8", "replace")
    served = sum(int(m.group("size")) for m in _BLOB_GET.finditer(text))
    out["node_repull_after_one_change_bytes"] = served
    out["node_repull_after_one_change"] = round(served / second.compressed_bytes, 4)
    sh(DOCKER, "rmi", "-f", f"{host}/{tag}", f"{host}/{repository}@{first.digest}")
    build(variant, extra, no_cache=False)  # the variant's tag back on the image of its committed lock
    return out


def one_change_engine(variant: str, extra: list[str], pin: str, host: str, log: Path) -> dict[str, Any]:
    """The same two figures where the disk cannot hold a client push of a GPU image beside it (dockerd stages a save
    in its tmp): both images pushed by this engine, which knows the first's layers as a runner that pushed it would;
    a node that holds the first downloads the blobs of the second's manifest that the first's lacks (what `docker
    pull` fetches), summed from the two manifests the registry holds."""
    tag = tag_of(variant)
    repository, ref = tag.split(":")
    push(tag, host)
    first = dict(manifest_layers(host, repository, ref))
    with swapped_pin(variant, pin):
        _, seconds = build(variant, extra, no_cache=False)
    sh(DOCKER, "builder", "prune", "-f", "--filter", "type=exec.cachemount")  # the wheels it fetched: disk
    since = log.stat().st_size
    push(tag, host)
    uploaded = uploaded_bytes(log, since, host, repository)
    second = dict(manifest_layers(host, repository, ref))
    total = sum(second.values())
    node = sum(size for digest, size in second.items() if digest not in first)
    forget(host)
    build(variant, extra, no_cache=False)  # the variant's tag back on the image of its committed lock
    return {"swap_pin": pin, "pushed_by": "engine", "rebuild_seconds": round(seconds), "compressed_bytes": total,
            "push_after_one_change_bytes": uploaded, "push_after_one_change": round(uploaded / total, 4),
            "node_repull_after_one_change_bytes": node, "node_repull_after_one_change": round(node / total, 4)}


def forget(host: str) -> None:
    """Take every name under the bench's registry `host` off this engine (tags and the digests pushes recorded), so
    no image of the bench is left holding its layers."""
    refs = sh(DOCKER, "images", "--digests", "--format", "{{.Repository}} {{.Tag}} {{.Digest}}").split("\n")
    for repository, tag, digest in (line.split(" ") for line in refs if line.startswith(f"{host}/")):
        ref = f"{repository}:{tag}" if tag != "<none>" else f"{repository}@{digest}"
        subprocess.run([DOCKER, "rmi", ref], check=False, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("variant")
    parser.add_argument("--allow-missing", action="append", default=[])
    parser.add_argument("--skip-reproducible", action="store_true")
    parser.add_argument("--swap-pin", metavar="DIST==VERSION", help="measure one real pin change instead")
    parser.add_argument("--engine-push", action="store_true",
                        help="with --swap-pin: push both images by the engine (one_change_engine)")
    args = parser.parse_args(argv)
    extra = [a for c in args.allow_missing for a in ("--allow-missing", c)]
    report: dict[str, Any] = {"variant": args.variant}
    if not args.skip_reproducible and not args.swap_pin:
        report.update(reproducible(args.variant, extra))
    with tempfile.TemporaryDirectory(prefix="trainimg-bench-layers-") as tmp:
        report.update(registry_figures(args.variant, extra, Path(tmp), args.swap_pin, args.engine_push))
    for key in ("layers_reproducible", "largest_layer_share", "unchanged_push_bytes", "runtime_change_push",
                "cold_pull_seconds", "push_after_one_change", "node_repull_after_one_change"):
        if key in report:
            print(f"{key}: {report[key]}")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
