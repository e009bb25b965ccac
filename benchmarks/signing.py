"""The signing figure: the seconds `--sign-key` adds to a release per variant (`sign_s_per_variant`).

What signing costs does not depend on the image's size: it is registry round trips (the image's labels and the
artifacts beside it read; the `.sig` and `.att` images and the provenance referrer written) and one scrypt opening
of the key per run. So it is measured where nothing else varies: VARIANTS variants staged as `release --stage`
leaves them (an image each under its tag, pushed through trainimg's registry client, a part each in lock.d/) are
promoted to a fresh local registry with `--sign-key` and without, each run on images of its own (an image the key
already signed is not signed again); the figure is the difference per variant, the median of SAMPLES pairs.
`release` signs with the same code at the same point (after the records, before the moving tags). No build and no
engine: `python3 benchmarks/bench.py --signing` measures it alone.
"""

from __future__ import annotations

import json
import secrets
import statistics
import uuid
from pathlib import Path

from harness import Harness, log, step

VARIANTS = 4
SAMPLES = 3
PASSWORD = "bench-signing"  # a throwaway key's passphrase, made and used in the bench's own folder
RECIPE = "framework: pytorch\nname: {name}\nrepository: {repository}\nmatrix:\n  - version: [\"2.13.0\"]\n" \
         "    os: [debian12]\n    python: [\"3.11\"]\n"


def stage(folder: Path, host: str, credentials: dict[str, str]) -> list[str]:
    """VARIANTS variants in `folder`: recipes, a tiny image each in the registry, a passed part each; their names."""
    from trainimg.publish.lockfile import LockEntry
    from trainimg.publish.promote import write_parts
    from trainimg.recipe.loading import load_recipes
    from trainimg.registry.references import RegistryTarget, split_tag
    from trainimg.registry.referrers import OCI_MANIFEST
    from trainimg.registry.registryapi import RegistryAPI, sha256_digest
    from trainimg.runtime.contract import RECIPE_LABEL, VARIANT_LABEL

    (folder / "recipes").mkdir(parents=True)
    names = [f"sign-{i}" for i in range(VARIANTS)]
    for name in names:
        (folder / "recipes" / f"{name}.yaml").write_text(
            RECIPE.format(name=name, repository=f"trainimg-bench-sign/{folder.name}-{name}"), encoding="utf-8")
    target = RegistryTarget.parse(host)
    api, entries = RegistryAPI(target, credentials), []
    for v in load_recipes(folder / "recipes").variants:
        layer = secrets.token_bytes(1024)
        config = json.dumps({"architecture": "amd64", "os": "linux",
                             "config": {"Labels": {VARIANT_LABEL: v.name, RECIPE_LABEL: v.source}},
                             "rootfs": {"type": "layers", "diff_ids": [sha256_digest(layer)]}}).encode()
        repository, tag = target.repository(split_tag(v.tag)[0]), split_tag(v.tag)[1]
        for blob in (config, layer):
            api.put_blob(repository, blob)
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config),
                               "digest": sha256_digest(config)},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "size": len(layer),
                                "digest": sha256_digest(layer)}]}
        digest = api.put_manifest(repository, tag, json.dumps(manifest).encode(), OCI_MANIFEST)
        entries.append(LockEntry(variant=v.name, recipe=v.source, tag=v.tag, image_id=sha256_digest(layer),
                                 base_image="local/debian:bookworm", base_digest=sha256_digest(config),
                                 pushed={target.ref(v.tag): digest}, conformance={"passed": True}))
    write_parts(folder / "lock.d", entries)
    return names


def measure_signing(bench: Harness) -> None:
    run = uuid.uuid4().hex[:8]
    bench.env["TRAINIMG_SIGN_PASSWORD"] = PASSWORD
    try:
        key = bench.tmp / f"sign-{run}"
        bench.trainimg("trust", "keygen", "--output-key-prefix", str(key))
        pairs = []
        with bench.fresh_registry() as info:
            credentials = {"username": info.username, "password": info.password}
            for sample in range(SAMPLES):
                times = {}
                for mode, extra in (("plain", ()), ("signed", ("--sign-key", f"{key}.key"))):
                    folder = bench.tmp / f"sign-{run}-{sample}-{mode}"
                    names = stage(folder, info.host, credentials)
                    times[mode] = bench.trainimg("promote", str(folder / "lock.d"), *names, "--registry", info.host,
                                                 "--username", info.username, "--lock", str(folder / "images.lock"),
                                                 *extra, recipes=folder / "recipes").seconds
                pairs.append((times["plain"], times["signed"]))
    finally:
        bench.env.pop("TRAINIMG_SIGN_PASSWORD", None)
    added = statistics.median((signed - plain) / VARIANTS for plain, signed in pairs)
    bench.details["signing"] = {"variants": VARIANTS, "promote_s": [list(p) for p in pairs]}
    log("  signing: promote of {} variants, plain / --sign-key: {}".format(
        VARIANTS, ", ".join(f"{p:.2f} / {s:.2f} s" for p, s in pairs)))
    bench.set("sign_s_per_variant", round(added, 3),
              f"`trainimg promote` of {VARIANTS} staged variants with --sign-key minus without (signature, SLSA "
              f"provenance as .att and referrer), per variant, median of {SAMPLES}: "
              + ", ".join(f"{p:.2f} -> {s:.2f} s" for p, s in pairs) + "; the key's scrypt opening is in it once")


def measure(bench: Harness) -> None:
    step("sign_s_per_variant", bench, lambda: measure_signing(bench))
