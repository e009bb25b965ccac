"""What two builds of one variant hold, compared: a command's output in each image, their SBOMs' components, and
for each layer whose diff ID differs, which files differ and how (`bench.py --installs`' reproducibility figure).
`docker save` is streamed, never written to disk: a GPU image is ~6 GB."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any


def image_text(docker: Callable[..., Any], tag: str, *cmd: str) -> str:
    return str(docker("run", "--rm", "--network", "none", "--entrypoint", cmd[0], tag, *cmd[1:],
                      what=f"{' '.join(cmd[:3])} in {tag}").stdout)


def sbom_components(text: str) -> set[str]:
    """Each component of a CycloneDX SBOM as one comparable string: its purl (or name and version) and hashes."""
    doc = json.loads(text)
    out = set()
    for c in doc.get("components", []):
        hashes = ",".join(sorted(f"{h.get('alg')}:{h.get('content')}" for h in c.get("hashes", [])))
        out.add(f"{c.get('purl') or c.get('name', '') + '@' + c.get('version', '')} {hashes}")
    return out


def differing_lines(a: str, b: str) -> list[str]:
    """Lines in one text and not the other, each marked with the build it came from."""
    left, right = set(a.splitlines()), set(b.splitlines())
    return sorted([f"1: {x}" for x in left - right] + [f"2: {x}" for x in right - left])


class _Hashing(io.RawIOBase):
    """A reader that hashes what passes through it: a layer tar's sha256 is its diff ID."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.sha = raw, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        self.sha.update(data)
        buffer[:len(data)] = data
        return len(data)


FileState = tuple[int, str, int]  # size, sha256 of the content (or the link target), mtime


@dataclass
class SavedImage:
    """What `docker save` holds of an image: each layer's files by diff ID, and the Dockerfile step of each
    layer, bottom up (from the config's history: the entries with `empty_layer` made none)."""

    layers: dict[str, dict[str, FileState]]
    steps: list[str]


def saved_image(docker_cli: str, tag: str, env: Mapping[str, str]) -> SavedImage:
    """`docker save tag` on the engine `env` names (the bench's own: DOCKER_HOST), streamed (never written to
    disk): layer files hashed, the config's history read."""
    image = SavedImage({}, [])
    proc = subprocess.Popen([docker_cli, "save", tag], stdout=subprocess.PIPE, env=dict(env))
    assert proc.stdout is not None
    with tarfile.open(fileobj=proc.stdout, mode="r|") as outer:
        for member in outer:
            fh = outer.extractfile(member) if member.isreg() else None
            if fh is None:  # a link to a layer listed before it: the same diff ID
                continue
            if member.name.endswith("layer.tar"):
                image.layers.update([_layer(fh)])
            elif "/" not in member.name and member.name.endswith(".json") and member.name != "manifest.json":
                history = json.loads(fh.read()).get("history", [])
                image.steps = [h.get("created_by", "")[:120] for h in history if not h.get("empty_layer")]
    if proc.wait() != 0:
        raise ValueError(f"docker save {tag} exited {proc.returncode}")
    return image


def _layer(fh: IO[bytes]) -> tuple[str, dict[str, FileState]]:
    """(diff ID, path -> file state) of one layer tar."""
    hashing = _Hashing(fh)
    files: dict[str, FileState] = {}
    with tarfile.open(fileobj=io.BufferedReader(hashing, 1 << 20), mode="r|") as layer:
        for f in layer:
            data = layer.extractfile(f) if f.isreg() else None  # a stream cannot open links
            digest = hashlib.sha256(data.read() if data else f.linkname.encode()).hexdigest()
            files[f.name] = (f.size, digest, int(f.mtime))
    while hashing.read(1 << 20):  # the tar's zero padding is part of the diff ID
        pass
    return f"sha256:{hashing.sha.hexdigest()}", files


def why_layers_differ(docker_cli: str, docker: Callable[..., Any], one: str, two: str,
                      env: Mapping[str, str]) -> list[dict[str, Any]]:
    """For each layer position whose diff ID differs between two builds: its Dockerfile step and what differs in
    it: files only in one, files whose content differs (a few named), files that differ only in their mtime."""
    layers = [json.loads(docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", t).stdout)
              for t in (one, two)]
    saved = [saved_image(docker_cli, t, env) for t in (one, two)]
    steps = saved[0].steps
    out = []
    for i, (a, b) in enumerate(zip(layers[0], layers[1])):
        if a == b:
            continue
        fa, fb = saved[0].layers.get(a, {}), saved[1].layers.get(b, {})
        content = sorted(p for p in fa.keys() & fb.keys() if fa[p][:2] != fb[p][:2])
        mtime = [p for p in fa.keys() & fb.keys() if fa[p][:2] == fb[p][:2] and fa[p][2] != fb[p][2]]
        out.append({"layer": i, "step": steps[i] if i < len(steps) else "?", "files": len(fa),
                    "only_in_one": len(fa.keys() ^ fb.keys()), "content_differs": len(content),
                    "content_examples": content[:6], "mtime_only": len(mtime)})
    return out
