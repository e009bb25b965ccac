"""The audit where images are: the OS check of the in-image gate and of the host's (`trainimg test --os-fixes`; a
real apt against the release's security suite, from a container of the session's CPU image with a known pending
fix, tests/osfixture.py), and a build whose audit waived a finding carrying it in its SBOM.

Two container runs of the CPU image and one build of a small variant (framework none, certifi 2022.12.7, on the
session's base: its python stage is the CPU variants' own, cached); the image is removed after.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import docker
import yaml
from conftest import LOCAL_BASE, trainimg
from osfixture import FIXED_AT_LEAST, INSTALLED, PACKAGE, SUITE, security_version
from test_audit import ALLOWANCE, VARIANT, db, team, waivers  # noqa: F401 - fixtures shared with the audit's tests

from trainimg.runtime.osfixes import CHECK_NAME
from trainimg.upstream.ossecurity import SECURITY_ARCHIVES, debian_compare
from trainimg.upstream.simpleapi import Http

LATER = (datetime.date.today() + datetime.timedelta(days=30)).isoformat()


def run_in(client: docker.DockerClient, image: str, out: Path, *args: str) -> tuple[int, str]:
    """``trainimg-runtime ARGS`` in a fresh container of `image` on the default network; /out is `out`."""
    container = client.containers.run(image, ["trainimg-runtime", *args], detach=True, entrypoint=[],
                                      volumes={str(out): {"bind": "/out", "mode": "rw"}},
                                      labels={"trainimg.test": "1"})
    try:
        code = container.wait(timeout=300)["StatusCode"]
        return code, container.logs().decode("utf-8", "replace")
    finally:
        container.remove(force=True)


def os_fixes(client: docker.DockerClient, image: str, out: Path) -> tuple[int, dict[str, Any]]:
    """The exit code and the JSON line of `trainimg-runtime os-fixes` in a fresh container of `image`."""
    code, logs = run_in(client, image, out, "os-fixes")
    result = json.loads(logs.strip().splitlines()[-1])
    assert result["name"] == CHECK_NAME and result["details"]["suite"] == SUITE, logs
    return code, result


def test_the_gate_lists_pending_os_fixes_and_waivers_gate_them(osfix_cpu_image: str, pinned_cpu_image: str,
                                                               client: docker.DockerClient, tmp_path: Path,
                                                               state_env: dict[str, str]) -> None:
    """The CPU image with kitty-terminfo 0.26.5-5 (tests/osfixture.py): the in-image gate names that fix exactly
    (the version bookworm-security lists, read here apart from apt), beside what the CPU image itself has pending
    and nothing else; waived, the in-image and the host's gates pass; not waived, the host's gate fails naming it."""
    index = SECURITY_ARCHIVES["debian"].format(codename="bookworm", arch="amd64")
    fixed = security_version(Http().get(index))
    assert fixed is not None and debian_compare(fixed, FIXED_AT_LEAST) >= 0, (index, fixed)
    code, result = os_fixes(client, osfix_cpu_image, tmp_path)
    pending = result["details"]["findings"]
    assert (code, result["status"]) == (1, "failed"), result
    assert [(f["id"], f["version"], f["fixed"], f["source"]) for f in pending if f["package"] == PACKAGE] == [
        (SUITE, INSTALLED, [fixed], SUITE)], pending
    _, cpu = os_fixes(client, pinned_cpu_image, tmp_path)  # the rest: the CPU image's own, found alike
    assert sorted((f["package"], f["version"], f["fixed"]) for f in pending if f["package"] != PACKAGE) == sorted(
        (f["package"], f["version"], f["fixed"]) for f in cpu["details"]["findings"]), (pending, cpu)
    # the same findings waived: the in-image gate's own report passes them, saying they are waived
    (tmp_path / "w.json").write_text(json.dumps(
        [{"id": f["id"], "package": f["package"], "version": f["version"], "reason": "base refresh pending",
          "approved-by": "ops", "expires": LATER} for f in pending]))
    code, logs = run_in(client, osfix_cpu_image, tmp_path, "selftest", "--os-fixes", "--waivers", "/out/w.json",
                        "--json", "/out/r.json")
    checks = {c["name"]: c for c in json.loads((tmp_path / "r.json").read_text())["suites"][0]["checks"]}
    assert code == 0 and checks[CHECK_NAME]["status"] == "passed", logs[-2000:]
    assert [f["state"] for f in checks[CHECK_NAME]["details"]["findings"]] == ["waived"] * len(pending)
    # The host's gate (`trainimg test --os-fixes`), the committed YAML waivers file: the same judgement.
    waived = tmp_path / "waivers.yaml"
    waived.write_text(yaml.safe_dump({"waivers": json.loads((tmp_path / "w.json").read_text())}))
    r = trainimg("test", osfix_cpu_image, "--replicas", "1", "--os-fixes", "--waivers", str(waived), "--json",
                 str(tmp_path / "gate.json"), env=state_env, timeout=600)
    gate = {c["name"]: c for c in json.loads((tmp_path / "gate.json").read_text())["suites"][0]["checks"]}
    assert r.returncode == 0 and gate[CHECK_NAME]["status"] == "passed", r.stderr[-2000:]
    assert sorted(f["package"] for f in gate[CHECK_NAME]["details"]["findings"]) == sorted(
        f["package"] for f in pending)
    # without the waivers the host's gate fails, naming the check
    r = trainimg("test", osfix_cpu_image, "--replicas", "1", "--os-fixes", env=state_env, timeout=600)
    assert r.returncode == 1 and CHECK_NAME in r.stderr.strip().splitlines()[-1], r.stderr[-2000:]


def test_a_waived_finding_is_in_the_built_images_sbom(team: Path, db: Path, tmp_path: Path,  # noqa: F811
                                                      state_env: dict[str, str], client: docker.DockerClient) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    recipes, tag = team, "trainimg-h43/team-certifi:latest"
    w = waivers(tmp_path / "w.yaml", justification="code_not_reachable")
    try:
        r = trainimg("--recipes", str(recipes), "build", VARIANT, "--base-image", LOCAL_BASE, "--progress", "plain",
                     "--advisories", str(db), "--max-age", ALLOWANCE, "--waivers", str(w), env=state_env,
                     timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        r = trainimg("--recipes", str(recipes), "sbom", VARIANT, env=state_env, timeout=120)
        assert r.returncode == 0, r.stderr
        sbom: dict[str, Any] = json.loads(r.stdout)
        assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(r.stdout) is None
        (vuln,) = sbom["vulnerabilities"]
        assert vuln["id"] == "PYSEC-2023-135" and vuln["analysis"]["state"] == "not_affected"
        assert vuln["analysis"]["justification"] == "code_not_reachable" and "2023.7.22" in vuln["recommendation"]
        assert vuln["affects"][0]["ref"] in {c["bom-ref"] for c in sbom["components"]}
        assert {"name": "trainimg:audit", "value": "audited"} in sbom["metadata"]["properties"]
    finally:
        for image in client.images.list(name=tag.split(":")[0]):
            client.images.remove(image.id, force=True)
