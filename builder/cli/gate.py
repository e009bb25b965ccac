"""Verbs of the gate: test, push, release, diff."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import CheckFailed, UserInputError
from ..options import (DEFAULT_UPLOAD, NPROC_PER_NODE, REPLICAS, UPLOADS, ReleaseOptions, TestOptions,
                       check_transport, default)
from ..options.compression import DEFAULT_COMPRESSION, Compression
from ..runtime.report import Suite
from ..runtime.contract import PLATFORMS
from .context import (STDOUT, Callback, Ctx, credentials, docker_engine, emit_json, image_ref, json_option, note,
                      pass_ctx, progress_option, sign_key_option, signer, variant_images, write_reports)
from .audit import audit_flags, audit_options, release_audit
from .images import _build_options, arch_option, base_image_option, base_images, build_flags

if TYPE_CHECKING:
    from ..engine.base import Engine
    from ..publish.policy import PushPolicy
    from ..publish.push import PushResult


def test_flags(fn: Callback) -> Callback:
    """The test flags `test` and `release` share."""
    for deco in reversed([
        click.option("--platform", type=click.Choice(PLATFORMS), default=default(TestOptions, "platform"),
                     show_default=True,
                     help="The platform replayed: its env, hostnames and way of starting processes."),
        click.option("--replicas", type=int, default=default(TestOptions, "replicas"), show_default=True,
                     help=f"Containers in the all-reduce, {REPLICAS}; the default 2 is the fewest that test a "
                          "collective across containers (`run` defaults to 1: a job, not a test)."),
        click.option("--nproc-per-node", type=int, default=default(TestOptions, "nproc_per_node"), show_default=True,
                     help=f"Processes per replica, {NPROC_PER_NODE}."),
        click.option("--timeout", type=float, default=default(TestOptions, "timeout"), show_default=True,
                     help="Seconds before a hung all-reduce fails."),
        click.option("--junit", "junit_path", metavar="FILE", help="Write a JUnit XML report."),
        click.option("--structure-tests", "structure_tests", multiple=True, metavar="FILE",
                     type=click.Path(path_type=Path),
                     help="A container-structure-test config your team keeps; each of its tests becomes a check "
                          "of the gate. Repeatable."),
        click.option("--os-fixes", "os_fixes", is_flag=True,
                     help="Also check the image's OS packages against its release's security suite (one container "
                          "that reaches the OS mirror): a published fix not applied fails, unless --waivers waives "
                          "it (its id is the suite, e.g. bookworm-security)."),
    ]):
        fn = deco(fn)
    return fn


def _print_suite(suite: Suite) -> None:
    """Each check on its own line, then the verdict with its counts (stderr: stdout stays for JSON)."""
    for check in suite.checks:
        click.echo(f"{check.status.upper():8} {check.name}: {check.reason}", err=True)
    counts = suite.counts()
    verdict = "passed" if suite.passed else "FAILED"
    click.echo(f"trainimg: {suite.name} {verdict} ({counts['passed']} passed, {counts['failed']} failed, "
               f"{counts['skipped']} skipped, {counts['warning']} warnings)", err=True)


def _built_on(engine: Engine, images: list[tuple[str, str | None, str]], given: tuple[str, ...]) -> None:
    """`test --base-image`: each image must have been built on the base given for its architecture (its
    `org.opencontainers.image.base.name` label, which `build` sets from what it built on), else the gate would
    judge another image than the one asked about. Refused before any container starts."""
    from ..runtime.contract import OCI_BASE_NAME

    bare, per_arch = base_images(given)
    for tag, name, arch in images:
        info = engine.image(tag)
        if info is None:
            continue  # the suite says it is missing, with what to run
        want = per_arch.get(arch or info.architecture) or bare
        got = info.labels.get(OCI_BASE_NAME)
        if want and got != want:
            raise UserInputError(f"{tag} ({info.architecture or arch}) was built on {got or 'an unknown base'}, not "
                                 f"{want}: build {name or tag} with --base-image {want}", where="--base-image")


@click.command("test")
@click.argument("image")
@test_flags
@base_image_option
@arch_option
@click.option("--shm-size", "shm_size", metavar="SIZE",
              help="The /dev/shm each container gets, as docker run --shm-size writes it (64m, 1g): a node's size "
                   "replayed. Default: what the platform gives the job trainimg spec writes (1 GiB per local rank "
                   "from two ranks on; the table in runtime/shm.py and the platform modules).")
@click.option("--waivers", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="With --os-fixes: the committed waivers (the audit's YAML file) its pending fixes are judged by.")
@json_option("The conformance report")
@progress_option("each check and each replica's output")
@pass_ctx
def test_cmd(c: Ctx, image: str, platform: str, replicas: int, nproc_per_node: int, timeout: float,
             junit_path: str | None, structure_tests: tuple[Path, ...], base_image: tuple[str, ...],
             arches: tuple[str, ...], os_fixes: bool, shm_size: str | None, waivers: Path | None,
             json_path: str | None, progress: str) -> None:
    """Run conformance checks and the multi-container all-reduce on IMAGE, or on a VARIANT's image of each
    architecture it is built for (another architecture's under emulation where the host registered one).

    Starts containers of the image on the Docker engine (one network per run, removed after), with the
    platform's environment; reaches no registry (with --os-fixes one container reaches the OS's mirror). With
    --base-image, each image must have been built on that base.

    \b
    Examples:
      trainimg test pytorch-2.13.0-cpu-py3.11
      trainimg test jax-0.10.2-cpu-py3.11 --base-image local/debian:bookworm --base-image arm64=local/debian:bookworm-arm64
      trainimg test trainimg/pytorch:2.13.0-cpu-py3.11 --platform slurm --replicas 4 --json report.json
      trainimg test IMAGE --junit report.xml --structure-tests team-checks.yaml
      trainimg test IMAGE --platform pytorchjob --nproc-per-node 2 --shm-size 64m
      trainimg test IMAGE --os-fixes --waivers waivers.yaml
    """
    from ..pipeline import test_images
    from ..runtime.shm import parse_size

    try:
        shm = None if shm_size is None else parse_size(shm_size)
    except ValueError as err:
        raise UserInputError(str(err), where="--shm-size") from None
    if waivers is not None and not os_fixes:
        raise UserInputError("the waivers are read by --os-fixes: add it", where="--waivers")
    opts = TestOptions(platform=platform, replicas=replicas, timeout=timeout, nproc_per_node=nproc_per_node,
                       structure_tests=structure_tests, shm_size=shm, os_fixes=os_fixes, waivers=waivers)
    images = [i for i in variant_images(c, image) if not arches or i[2] in arches]
    if not images:
        raise UserInputError(f"{image} is not built for {' or '.join(arches)}", where="--arch")
    engine = docker_engine()
    _built_on(engine, images, base_image)
    suites = test_images(engine, [(tag, name) for tag, name, _ in images], opts, c.env, progress, _print_suite)
    write_reports(suites, json_path, junit_path)
    if not all(s.passed for s in suites):
        raise CheckFailed(f"{image} failed conformance: " + ", ".join(ch.name for s in suites for ch in s.failed))


def registry_flags(fn: Callback) -> Callback:
    for deco in reversed([
        click.option("--registry", "registry", required=True, metavar="HOST[:PORT][/PREFIX]",
                     help="The registry pushed to (`trainimg registry start` runs one on localhost:5000)."),
        click.option("--username", help="Registry user; the password comes from TRAINIMG_REGISTRY_PASSWORD."),
        click.option("--password-stdin", is_flag=True, help="Read the registry password from standard input."),
    ]):
        fn = deco(fn)
    return fn


upload_flag = click.option(
    "--upload", type=click.Choice(UPLOADS), default=DEFAULT_UPLOAD, show_default=True,
    help="Who sends the layers: trainimg's registry client (only the layers the registry lacks, whatever this "
         "engine remembers: an empty CI runner sends nothing the registry holds), the engine (`docker push`), or "
         "auto: the client when the registry holds a layer of the image (the tag, the release's other images), "
         "else the engine.")


compression_flag = click.option(
    "--compression", "compression", metavar="gzip|zstd[:LEVEL]|estargz", default=str(DEFAULT_COMPRESSION),
    show_default=True,
    help="How trainimg's registry client writes the layers it sends: gzip (every runtime pulls it), zstd at LEVEL "
         "1-19 (default 3), which unpacks faster but only containerd >= 1.5, Docker >= 23 and CRI-O pull (Docker "
         "20.10 fails after the download): push it under a repository of its own (--registry HOST/PREFIX); or "
         "estargz: gzip every runtime pulls whole, which a lazy-pulling node (stargz-snapshotter) starts before it "
         "has arrived, the files the image's gate read first.")


def _gate(policy: PushPolicy, image_id: str, ref: str) -> tuple[str, ...]:
    return policy.gate(image_id, ref)


def _push(c: Ctx, groups: list[tuple[str, list[tuple[str, str]]]], registry: str, username: str | None,
          password_stdin: bool, upload: str = DEFAULT_UPLOAD, sign_key: Path | None = None,
          compression: Compression = DEFAULT_COMPRESSION) -> list[PushResult]:
    """Push each (tag, [(local tag, architecture)]): one image under its tag, or, for a variant built for more
    than amd64, each architecture's image and the index of them (publish/indexpush.py). With a key, each image
    pushed is signed (for an index: the index and each architecture's manifest)."""
    from ..publish.indexpush import needs_index, push_index
    from ..publish.policy import PushPolicy
    from ..publish.push import push, reachable_target
    from ..publish.signing import pushed_image, sign_all
    from ..registry.layermemory import LayerMemory
    from ..registry.references import RegistryTarget
    from ..registry.registryapi import RegistryAPI

    target = RegistryTarget.parse(registry)
    creds = credentials(target, username, password_stdin, c.env)
    sign = signer(c, sign_key, click.echo)
    engine = docker_engine()
    locals_ = [local for _, images in groups for local, _ in images]
    for local in locals_:
        if engine.image(local) is None:
            raise UserInputError(f"no image {local} on this engine: run `trainimg build` first")
    policy = PushPolicy(engine, target, creds, c.env, click.echo, compression)
    policy.admit(locals_)
    siblings = [tag for tag, _ in groups]
    memory = LayerMemory.from_env(c.env)

    def pushed(local: str, result: PushResult) -> None:
        click.echo(f"pushed {result.ref}@{result.digest} ({result.bytes_uploaded} bytes uploaded)")
        policy.pushed(local, result)

    results = []
    for tag, images in groups:
        others = [t for t in siblings if t != tag]
        if needs_index(arch for _, arch in images if arch):
            result = push_index(engine, tag, images, target, creds, gate=policy.gate, siblings=others,
                                on_manifest=pushed, compression=compression, memory=memory)
            signed = [(local, result.manifests[arch]) for local, arch in images if arch in result.manifests]
        else:
            local = images[0][0]
            result = push(engine, local, target, tag, credentials=creds, upload=upload, siblings=others,
                          gate=functools.partial(_gate, policy, ref=local), compression=compression, memory=memory)
            signed = []
        pushed(tag, result)
        if sign is not None:
            sign_all(sign, RegistryAPI(reachable_target(engine, target), creds),
                     [pushed_image(engine, target, local, digest) for local, digest in [(tag, result.digest), *signed]])
        results.append(result)
    return results


@click.command("push")
@click.argument("variants", nargs=-1, required=True)
@registry_flags
@upload_flag
@compression_flag
@sign_key_option
@pass_ctx
def push_cmd(c: Ctx, variants: tuple[str, ...], registry: str, username: str | None, password_stdin: bool,
             upload: str, compression: str, sign_key: Path | None) -> None:
    """Push variants' images to <registry>/<tag>; refuses images without a passing conformance record.

    Reaches the registry (and pushes each image's SBOM beside it); reads each SBOM from the image in a
    short-lived container first. Only the layers the registry lacks are sent (`--upload`). A variant built for
    more than amd64 goes as one index under its tag, every architecture's image in it (through the client).

    
    Examples:
      trainimg push pytorch-2.13.0-cpu-py3.11 --registry localhost:5000
      echo "$TOKEN" | trainimg push 'pytorch-*' --registry ghcr.io/team --username bot --password-stdin
      trainimg push pytorch-2.13.0-cpu-py3.11 --registry localhost:5000 --upload engine
      trainimg push pytorch-2.13.0-cpu-py3.11 --registry localhost:5000 --sign-key cosign.key
      trainimg push pytorch-2.13.0-cpu-py3.11 --registry localhost:5000/zstd --compression zstd:3
      trainimg push pytorch-2.13.0-cpu-py3.11 --registry localhost:5000/lazy --compression estargz
    """
    how = Compression.parse(compression)  # a bad level fails before anything is read or sent
    check_transport(upload, how)
    groups = [(image_ref(c, v)[0], [(local, arch) for local, _, arch in variant_images(c, v)]) for v in variants]
    _push(c, groups, registry, username, password_stdin, upload, sign_key, how)


@click.command()
@click.argument("variants", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Release every variant.")
@build_flags
@test_flags
@registry_flags
@json_option("The conformance reports of the release")
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="Record what was released in this lockfile (merged; written only after every push succeeded).")
@click.option("--rebuild", is_flag=True,
              help="Build, test and push even variants whose inputs key and passed image the registry holds.")
@click.option("--stage", is_flag=True,
              help="One CI job of many: push the immutable tags only and write a part per variant to --lock-dir; "
                   "`trainimg promote` moves the tags once every part is in.")
@click.option("--lock-dir", "lock_dir", metavar="DIR", default=default(ReleaseOptions, "lock_dir"), show_default=True,
              help="Where --stage writes <variant>.json.")
@upload_flag
@compression_flag
@audit_flags
@sign_key_option
@pass_ctx
def release(c: Ctx, variants: tuple[str, ...], all_: bool, base_image: tuple[str, ...], arches: tuple[str, ...],
            ca_bundle: Path | None,
            wheelhouse: tuple[Path, ...], allow_missing: tuple[str, ...], progress: str, jobs: int,
            cache_from: tuple[str, ...], installer: str, platform: str, replicas: int, nproc_per_node: int,
            timeout: float, junit_path: str | None, structure_tests: tuple[Path, ...], os_fixes: bool, registry: str,
            username: str | None, password_stdin: bool, json_path: str | None, lock_path: str | None,
            rebuild: bool, stage: bool, lock_dir: str, upload: str, compression: str, advisories: str | None,
            waivers: Path | None, max_age: int, skip_audit: bool, sign_key: Path | None) -> None:
    """Build, test, then push every named variant, only if all of them passed; skip unchanged ones.

    Audits every pin first (--advisories, as `trainimg audit`; or --skip-audit, recorded), then reaches the
    registry (what it holds decides what is skipped), builds on the engine, starts the test containers and pushes;
    with --sign-key it signs what it pushed before a moving tag moves.

    
    Examples:
      trainimg release pytorch-2.13.0-cpu-py3.11 --registry localhost:5000 --lock images.lock --advisories osv/
      trainimg release --all --registry ghcr.io/team --stage --lock-dir lock.d --advisories https://osv.internal
      trainimg release pytorch-2.13.0-cpu-py3.11 --registry ghcr.io/team --skip-audit --sign-key release.key
      trainimg release --all --registry ghcr.io/team --advisories osv/ --waivers waivers.yaml --os-fixes
    """
    from ..pipeline import release as run_release
    from ..registry.references import RegistryTarget

    if not variants and not all_:
        raise UserInputError("name the variants to release, or pass --all")
    target = RegistryTarget.parse(registry)  # bad input fails before an hour of building
    opts = ReleaseOptions(build=_build_options(c, base_image, ca_bundle, wheelhouse, allow_missing, jobs, cache_from,
                                               installer, arches),
                          test=TestOptions(platform=platform, replicas=replicas, timeout=timeout,
                                           nproc_per_node=nproc_per_node, structure_tests=structure_tests,
                                           os_fixes=os_fixes, waivers=waivers),
                          lock_path=lock_path, rebuild=rebuild, stage=stage, lock_dir=lock_dir, upload=upload,
                          compression=Compression.parse(compression),
                          audit=release_audit(audit_options(advisories, waivers, max_age, skip_audit)),
                          sign_key=sign_key)
    creds = credentials(target, username, password_stdin, c.env)
    to_err = json_path == STDOUT  # stdout holds the JSON report then; what release says goes to stderr

    def say(line: str) -> None:
        click.echo(line, err=to_err)

    sign = signer(c, opts.sign_key, say)  # a key that cannot be opened fails before an hour of building

    result = run_release(c.recipes(), docker_engine(), variants, opts, target=target, credentials=creds, env=c.env,
                         root=c.root, progress=progress, on_suite=_print_suite,
                         on_tested=lambda suites: write_reports(suites, json_path, junit_path),
                         on_pushed=lambda tag, r: say(f"pushed {r.ref}@{r.digest} ({r.bytes_uploaded} bytes uploaded)"),
                         on_sbom=say, on_record=say, on_decision=lambda d: say(d.line()), signer=sign)
    if stage:
        say(f"staged {len(result.builds) + len(result.skipped)} variant(s) in {lock_dir}")
    elif lock_path:
        say(f"locked {len(result.builds) + len(result.skipped)} variant(s) in {lock_path}")


@click.command("diff")
@click.argument("a")
@click.argument("b", required=False, metavar="B")  # see diff_cmd: `--json A B`
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="The lockfile lock:<variant> reads (default: images.lock).")
@json_option("The differences")
@progress_option("what diff starts (a container per image, to read its SBOM)")
@pass_ctx
def diff_cmd(c: Ctx, a: str, b: str | None, lock_path: str | None, json_path: str | None, progress: str) -> None:
    """Compare two images (VARIANT, IMAGE, lock:VARIANT or LOCKFILE:VARIANT): versions (CUDA first), packages,
    labels, layers, size.

    Starts a short-lived container of each image to read its SBOM (no network); reads no registry.

    \b
    Examples:
      trainimg diff pytorch-2.13.0-cpu-py3.11 lock:pytorch-2.13.0-cpu-py3.11
      trainimg diff trainimg/pytorch:2.13.0-cpu-py3.11 trainimg/pytorch:2.13.0-cu130-py3.11 --json
    """
    from ..publish.diff import diff_images, load_side, render_diff

    if b is None and json_path not in (None, STDOUT):  # `diff --json A B`: --json took A as its FILE
        a, b, json_path = str(json_path), a, STDOUT
    if b is None:
        raise click.UsageError("Missing argument 'B'.")
    engine = docker_engine()
    d = diff_images(*(load_side(engine, image_ref(c, ref)[0], lock_path) for ref in (a, b)))
    note("diff: read each image's SBOM in a short-lived container", progress)
    if json_path:
        emit_json(d, json_path)
    else:
        click.echo(render_diff(d), nl=False)


