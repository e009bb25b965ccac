#!/usr/bin/env python3
"""Break a feature once and watch its test fail: the breaks that showed a test can fail, kept to run again.

A test that passes with its feature broken checks nothing (CONTRIBUTING.md, "Tests are real"). Each mutant below
is one such break, written as the smallest edit of the product that removes the feature while leaving everything
else working, and the tests that must then fail (one edit can remove what several tests check). For each: every
test must pass on the checkout as it is and fail with the edit applied, and the file is put back whatever happens.
The engine tests need what `make test` needs (the engine, the images the fixtures build: seconds when warm).

    python3 .ci/mutants.py [NAME ...]        (default: every mutant; --list names them)

Exit 0 when every named test passed intact and failed broken; 1 when one did not; 2 when a mutant no longer
applies (its text is not in the file once: the product changed, so the mutant must be rewritten).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EDIT_ERRORS = ("NameError", "SyntaxError", "IndentationError", "ImportError")  # a failure of the edit, not the test


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # relative to the checkout
    old: str  # found exactly once in `file`
    new: str
    tests: tuple[str, ...]  # pytest node ids: each must pass intact and fail broken
    why: str  # what the edit removes
    # environment variables set to a new empty folder for each run: a cache whose key is the input, not the code
    # (the eStargz blobs a push keeps), would hand the broken run what the intact one made
    fresh: tuple[str, ...] = ()


MUTANTS = (
    Mutant("launcher-drops-torchrun-ranks", "builder/runtime/launch.py",
           "        TRAINIMG_NNODES=str(info.world_size),\n    )\n    return out\n",
           "        TRAINIMG_NNODES=str(info.world_size),\n    )\n    if info.started_by is not None:\n"
           "        for name in ('RANK', 'LOCAL_RANK'):\n            out.pop(name)\n    return out\n",
           ("tests/test_platform_clients.py::test_torchrun_layer_keeps_torchruns_ranks",),
           "the launcher hands torchrun's workers on without the ranks torchrun gave them"),
    Mutant("spec-drops-reducers", "builder/jobs/spec.py",
           "    return int(wanted)\n\n\ndef _check_reduction_server_image",
           "    return 0\n\n\ndef _check_reduction_server_image",
           ("tests/test_spec_cli.py::test_local_reference_reads_the_image_labels",),
           "--reduction-servers 2 on a labelled GPU image gives no Reduction Server pool"),
    Mutant("service-loses-aliases", "builder/audit/sources.py",
           'records[vid] = Advisory.from_json(_json(response), f"{base}/v1/vulns/{vid}")',
           'records[vid] = Advisory.from_json({**_json(response), "aliases": []}, f"{base}/v1/vulns/{vid}")',
           ("tests/test_audit.py::test_the_service_gives_the_folders_answer",),
           "the OSV service's records lose their aliases: its findings differ from the folder's"),
    Mutant("container-before-config-check", "builder/pipeline.py",
           "    check_structure_tests(opts.structure_tests)  # bad configs fail before any container starts\n",
           "    import docker\n    for image, _ in images:\n"
           "        docker.from_env().containers.create(image, ['true']).remove()\n"
           "    check_structure_tests(opts.structure_tests)  # bad configs fail before any container starts\n",
           ("tests/test_structure.py::test_a_missing_or_broken_config_is_one_line_exit_2_before_any_container",),
           "a container of the image is made (silently) before a broken --structure-tests config is refused"),
    Mutant("evaluator-never-runs", "builder/jobs/run.py",
           "            raise Cancelled()\n        return super()._start(job, spec, network, labels)\n",
           "            raise Cancelled()\n        if spec.role == 'evaluator':\n"
           "            job = replace(job, command=lambda s: ['sleep', '3600'],\n"
           "                          entrypoint=['/bin/sh', '-c', 'exec \"$@\"', 'sh'])\n"
           "        return super()._start(job, spec, network, labels)\n",
           ("tests/test_jobs.py::test_vertex_allreduce_with_evaluator",),
           "the Vertex evaluator's container sleeps instead of running the job's command"),
    Mutant("ps-never-starts", "builder/jobs/run.py",
           "            raise Cancelled()\n        return super()._start(job, spec, network, labels)\n",
           "            raise Cancelled()\n        if spec.role == 'ps':\n"
           "            return __import__('docker').from_env().containers.create(\n"
           "                job.image, ['true'], labels=dict(labels), name=f'{spec.host}--{spec.name}').id\n"
           "        return super()._start(job, spec, network, labels)\n",
           ("tests/test_jobs.py::test_uai_given_output_volume_and_explicit_ps",
            "tests/test_jobs.py::test_aiplatform_allreduce_two_processes_per_node_with_ps"),
           "a ps (UAI's on every node, AI Platform's of a trial) is created but never started"),
    Mutant("cache-import-without-login", "builder/engine/buildkit.py",
           '        env = {**os.environ, "DOCKER_BUILDKIT": "1"}\n',
           '        env = {**os.environ, "DOCKER_BUILDKIT": "1", "DOCKER_CONFIG": __import__("tempfile").mkdtemp()}\n',
           ("tests/test_cache.py::test_pushed_image_carries_inline_cache_and_serves_a_rebuild",),
           "BuildKit reads --cache-from without the login: 401, the local cache hides it"),
    Mutant("sbom-only-locked", "builder/runtime/sbom.py",
           "        if not name or distribution_key(name) in seen:\n",
           "        if not name or distribution_key(name) in seen or distribution_key(name) not in locked:\n",
           ("tests/test_sbom.py::test_cpu_image_sbom_validates_and_lists_what_is_installed",),
           "the SBOM lists only what the lock pins (the venv's pip goes missing)"),
    # The first cases of issue 56: tests that passed with their feature broken, each since made able to fail.
    Mutant("os-fixes-none-pending", "builder/upstream/ossecurity.py",
           "        if fixed is not None and debian_compare(fixed, pkg.version) > 0:\n",
           "        if fixed is not None and debian_compare(fixed, pkg.version) > 0 and False:\n",
           ("tests/test_upstream_outdated.py::test_pending_security_fixes_of_a_real_sbom",
            "tests/test_mirror.py::test_verify_succeeds_with_the_upstream_tag_gone_and_the_mirror_present"),
           "`outdated` (of a real SBOM, and `--lock` of the released image's) finds no pending OS security fix"),
    Mutant("os-fixes-none-pending-in-image", "builder/runtime/osfixes.py",
           "        m = _INST.match(line)\n", "        m = None\n",
           ("tests/test_audit_image.py::test_the_gate_lists_pending_os_fixes_and_waivers_gate_them",),
           "the in-image gate reads no upgrade apt would make"),
    Mutant("tf-role-from-trainimg-role", "builder/runtime/allreduce_result.py",
           "    return cluster, info.role, info.index\n",
           '    return cluster, environ.get("TRAINIMG_ROLE") or info.role, info.index\n',
           ("tests/test_allreduce.py::test_the_tf_worker_joins_as_tensorflow_reads_each_platforms_tf_config",),
           "the TF worker joins as TRAINIMG_ROLE says (chief on Slurm's node 0), not as its TF_CONFIG says"),
    Mutant("push-never-retries", "builder/publish/push.py",
           "            _wait(exc, attempts, retries, backoff, on_progress)\n            continue\n",
           "            raise RegistryError(exc.message) from None\n",
           ("tests/test_registry.py::test_connection_dropped_mid_blob[client]",),
           "a blob upload cut mid-way is not retried"),
    Mutant("sign-only-the-index", "builder/publish/signing.py",
           "    for image in images:\n        if (image.repository, image.digest) not in done:\n",
           "    for image in list(images)[-1:]:\n        if (image.repository, image.digest) not in done:\n",
           ("tests/test_arches.py::test_a_signed_release_of_an_index_signs_each_manifest_and_the_index",),
           "a release of two architectures signs its index and not each architecture's manifest"),
    Mutant("launcher-ignores-mpirun-ranks", "builder/runtime/launch.py",
           "    if info.started_by is not None and info.process_rank is not None",
           '    if info.started_by not in (None, "mpi") and info.process_rank is not None',
           ("tests/test_mpi_clients.py::test_launcher_hands_torch_the_ompi_ranks",),
           "the launcher counts ranks itself instead of keeping those mpirun gave"),
    Mutant("render-unparseable-mount", "builder/plan/templates/blocks/reduction_server.j2",
           "--mount=type=secret,id=ca_bundle,target=", "--mount=type=secret,idx=ca_bundle,target=",
           ("tests/test_render.py::test_buildkit_parses_every_shape_and_builds_the_cpu_variants_first_stages",),
           "the renderer writes a mount BuildKit cannot parse (goldens rewritten from the renderer would take it)"),
    # A read of the rest of the suite (2026-12-03): tests that passed with these breaks, each since made able to fail.
    Mutant("launcher-orphans-on-sigterm", "builder/runtime/launch.py",
           "        for child in children:\n            if child.poll() is None:\n"
           "                child.send_signal(signum)\n",
           "        raise SystemExit(128 + signum)\n",
           ("tests/test_launch.py::test_sigterm_is_forwarded_to_local_processes",),
           "the launcher exits 143 on SIGTERM and leaves its processes running"),
    Mutant("cpu-lock-wrong-pin", "images/pytorch-2.13.0-cpu-py3.11/requirements.lock",
           "\ntorch==2.13.0+cpu \\\n", "\ntorch==2.12.0+cpu \\\n",
           ("tests/test_locks.py::test_every_shipped_lock_is_current_and_keeps_the_recipe_constraints",),
           "the suite's CPU variant's amd64 lock pins another torch (its arm64 lock is not lockable here)"),
    Mutant("azureml-drops-env", "builder/jobs/azureml.py",
           "FLAGS = (GPUS, COMPUTE, VM_SIZE, DISTRIBUTION, ENV)", "FLAGS = (GPUS, COMPUTE, VM_SIZE, DISTRIBUTION)",
           ("tests/test_node_env.py::test_spec_writes_a_node_variable_where_the_platform_takes_an_environment",),
           "Azure ML's spec refuses --env as if its job had no environment"),
    Mutant("verify-key-drops-registry", "builder/cli/verify.py",
           'KEY_OPTIONS = ("key", "username", "password_stdin")',
           'KEY_OPTIONS = ("key", "username", "password_stdin", "registry")',
           ("tests/test_trust.py::test_verify_key_refuses_every_rebuild_flag_never_dropping_one",),
           "verify REF --key ignores --registry without a word"),
    Mutant("probe-compares-nothing", "builder/runtime/probe_platform.py",
           "        wrong = [f\"{k}={got[k]!r} (expected {v!r})\" for k, v in want.items() if got[k] != v]\n",
           "        wrong: list[str] = []\n",
           ("tests/test_probe.py::test_cluster_parsing_check",),
           "the in-image cluster-parsing check compares nothing"),
    Mutant("manifest-without-dpkg", "builder/runtime/manifest.py",
           '    dpkg_query = shutil.which("dpkg-query")\n', "    dpkg_query = None\n",
           ("tests/test_probe.py::test_manifest",),
           "the manifest reads no dpkg package (the CUDA runtime from apt goes unread)"),
    Mutant("outdated-one-framework", "builder/upstream/outdated.py",
           "    return items\n\n\ndef compat_items", "    return items[:1]\n\n\ndef compat_items",
           ("tests/test_upstream_outdated.py::test_the_shipped_recipes_items_each_have_a_source",),
           "`outdated` reports one of the framework versions the recipes hold back"),
    Mutant("compat-specifiers-always-agree", "builder/upstream/derive.py",
           "        return SpecifierSet(str(a)) == SpecifierSet(str(b))\n", "        return True\n",
           ("tests/test_upstream_compat.py::test_a_wrong_value_in_compat_yaml_is_found_differing",),
           "`compat add` finds every python, cuDNN and NCCL specifier agreeing"),
    Mutant("compat-unread-without-reason", "builder/upstream/derive.py",
           """        return d.unread.get("cuda builds other than PyPI's", "PyPI serves no such build")\n""",
           '        return "PyPI serves no such build"\n',
           ("tests/test_upstream_compat.py::test_rederiving_a_release_gives_what_compat_yaml_holds",),
           "`compat add` says PyTorch's CUDA builds are not served, not that the index serving them does not answer"),
    Mutant("allreduce-timeout-without-verdict", "builder/runtime/allreduce.py",
           '        emit(record(framework, backend, rank, world, None, False, time.monotonic() - started, "unknown",\n'
           '                    error="timeout"))\n        print(timeout_message',
           "        print(timeout_message",
           ("tests/test_allreduce.py::test_pytorch_hung_peer_exits_3",),
           "a rank that times out says so on stderr only: no JSON verdict for the gate to read"),
    Mutant("engine-reads-no-architecture", "builder/engine/docker.py",
           'architecture=str(attrs.get("Architecture") or ""),', 'architecture="",',
           ("tests/test_arches.py::test_a_base_of_another_architecture_is_refused_naming_the_flag",),
           "the engine's images carry no architecture: an amd64 base builds under arm64"),
    Mutant("matrix-digest-too-short", "builder/publish/matrix.py",
           'SHORT_DIGEST = len("sha256:") + 12', 'SHORT_DIGEST = 7',
           ("tests/test_matrix_page.py::test_digests_show_their_start_and_hold_the_whole",),
           "the support matrix's digest fields show sha256 and no hex digit"),
    Mutant("trainjob-swapped-policies", "builder/jobs/trainjob.py",
           'POLICIES = {"pytorch": "torch", "jax": "jax"}', 'POLICIES = {"pytorch": "jax", "jax": "torch"}',
           ("tests/test_k8s_specs.py::test_every_manifest_passes_every_consumer",),
           "a PyTorch TrainingRuntime gets the jax policy (and JAX's the torch one)"),
    Mutant("spec-drops-evaluators", "builder/jobs/specflags.py",
           "    chosen = {key: value for key, value in values.items() if key in names}\n",
           '    chosen = {key: value for key, value in values.items() if key in names and key != "evaluators"}\n',
           ("tests/test_spec_flags.py::test_every_flag_is_accepted_on_its_own_platform",),
           "spec --evaluators 1 writes a job without its evaluator"),
    Mutant("estargz-prefetches-everything", "builder/registry/estargz.py",
           "    index = {clean_name(m.name): m for m in members}\n",
           "    if prefetch:\n        return list(members), []\n    index = {clean_name(m.name): m for m in members}\n",
           ("tests/test_estargz_gate.py::test_the_gates_order_goes_first_in_the_estargz_layers",),
           "an eStargz layer with an order puts every file before the landmark (the whole layer prefetched)",
           fresh=("TRAINIMG_BLOB_CACHE",)),
    Mutant("push-names-before-the-gate", "builder/publish/push.py",
           "    if gate is not None:\n        compression = compression.ordered(gate(image.id) or ())\n",
           "    _engine_name(engine, image.id, target.ref(tag))\n"
           "    if gate is not None:\n        compression = compression.ordered(gate(image.id) or ())\n",
           ("tests/test_registry.py::test_gate_stops_the_push_before_anything_is_sent",),
           "a refused image is given the registry's name before the gate runs"),
    Mutant("verify-rebuilds-from-the-cache", "builder/cli/verify.py",
           "                               no_cache=True)\n", "                               no_cache=False)\n",
           ("tests/test_layers.py::test_a_cold_rebuild_verifies_identical_layer_for_layer",),
           "verify's rebuild is answered from the first build's cache: it compares the build with itself"),
    Mutant("index-cache-without-layers", "builder/registry/blobpush.py",
           "            cache = _put_image(api, repository, fmt, with_cache, layers)\n",
           "            cache = _put_image(api, repository, fmt, with_cache, layers if tagged else [])\n",
           ("tests/test_cache.py::test_the_client_pushes_the_cache_beside_the_image_and_buildkit_reads_it",),
           "an architecture's build cache in an index holds no layer"),
)


def run_test(node: str, fresh: tuple[str, ...] = ()) -> tuple[int, str]:
    """(pytest's exit code, its last line, or its first failed assertion)."""
    with tempfile.TemporaryDirectory(prefix="trainimg-mutant-") as tmp:
        env = {**os.environ, **{name: str(Path(tmp, name)) for name in fresh}}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", node], cwd=ROOT,
                              capture_output=True, text=True, env=env)
    lines = proc.stdout.splitlines()
    said = next((ln for ln in lines if ln.startswith("E ")), lines[-1] if lines else proc.stderr.strip()[-300:])
    return proc.returncode, said.strip()[:160]


def check(mutant: Mutant) -> bool:
    path = ROOT / mutant.file
    text = path.read_text(encoding="utf-8")
    if text.count(mutant.old) != 1:
        print(f"{mutant.name}: its text is not in {mutant.file} exactly once: rewrite the mutant", file=sys.stderr)
        sys.exit(2)
    for test in mutant.tests:
        intact, said = run_test(test, mutant.fresh)
        if intact != 0:
            print(f"{mutant.name}: FAILED INTACT ({said}): {test}")
            return False
    try:
        path.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")
        broken = [(test, *run_test(test, mutant.fresh)) for test in mutant.tests]
    finally:
        path.write_text(text, encoding="utf-8")
    ok = True
    for test, code, said in broken:
        if code != 1:
            print(f"{mutant.name}: PASSED BROKEN ({mutant.why}): {test}")
            ok = False
        elif any(error in said for error in EDIT_ERRORS):
            print(f"{mutant.name}: the edit itself is broken ({said}): rewrite the mutant")
            ok = False
        else:
            print(f"{mutant.name}: passes intact, fails broken ({mutant.why}): {test}: {said}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="name each mutant and its test")
    args = parser.parse_args()
    known = {m.name: m for m in MUTANTS}
    if args.list:
        for m in MUTANTS:
            print(f"{m.name}: {', '.join(m.tests)}\n    {m.why}")
        return 0
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"mutants: no mutant named {', '.join(unknown)} (--list names them)", file=sys.stderr)
        return 2
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *{m.file for m in MUTANTS}], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    if dirty:
        print(f"mutants: the files they edit have uncommitted changes; commit or stash them first:\n{dirty}",
              file=sys.stderr)
        return 2
    results = [check(known[n]) for n in args.names or known]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
