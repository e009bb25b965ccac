"""A node's NCCL and network variables, tested from their table (`recipe.nodeenv`, ``data/node_env.yaml``):

* every variable x a root recipe's ``env`` and an extending recipe's ``env``: `validate` refuses it, one line
  naming the file, the key and the variable (exit 2), and the same recipe without it renders that ``env`` into the
  Dockerfile's last instructions;
* every variable x an image config that sets it (`conformance.imageenv`): the ``image_env`` check fails naming it;
* every variable x every `spec` platform: ``--env NAME=VALUE`` reaches every replica's environment as that
  platform's own client reads it (the CRDs and kubernetes-validate, azure-ai-ml's ``load_job``, botocore's
  validator, Vertex's ``CustomJob`` proto, the sbatch script), and AI Platform, whose job format has no
  environment, refuses the flag by construction.

In-process: no engine, no network (the image config check reads `ImageInfo` values as the engine returns them).
"""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
from pathlib import Path

import k8sconsumers
import mlschema
import pytest
import yaml
from azure.ai.ml import load_job
from botocore.validate import ParamValidator
from google.cloud import aiplatform_v1

from trainimg.cli.app import main
from trainimg.conformance.imageenv import image_env_check
from trainimg.engine.base import ImageInfo
from trainimg.jobs import sagemaker
from trainimg.jobs.node import ENV
from trainimg.jobs.specflags import PLATFORM_FLAGS, SPEC_PLATFORMS
from trainimg.recipe.nodeenv import node_env_table
from shipped import pick

VARIABLES = sorted(node_env_table().variables)
REGISTRY = "europe-docker.pkg.dev/acme/ml"
IMAGE = ["--image", pick("pytorch", gpu=True).name, "--registry", REGISTRY, "--replicas", "2"]
ROLE = "arn:aws:iam::123456789012:role/trainer"
NEEDS = {
    "vertex": ["--machine-type", "a2-highgpu-1g", "--accelerator", "NVIDIA_TESLA_A100:1"],
    "aiplatform": ["--machine-type", "a2-highgpu-1g", "--accelerator", "NVIDIA_TESLA_A100:1"],
    "azureml": ["--compute", "gpu-cluster"],
    "sagemaker": ["--instance-type", "ml.p4d.24xlarge", "--role-arn", ROLE, "--output-path", "s3://acme/out"],
}
ROOT = """\
framework: pytorch
version: "2.13.0"
os: debian12
python: "3.11"
env:
  OMP_NUM_THREADS: "4"
"""
CHILD = """\
extends: pytorch-2.13.0-cpu-py3.11
name: team-image
env:
  TEAM_SETTING: "on"
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("variable", "where"), list(itertools.product(VARIABLES, ("root", "extends"))))
def test_validate_refuses_a_node_variable_as_image_environment(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               variable: str, where: str) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "root.yaml").write_text(ROOT + (f"  {variable}: eth0\n" if where == "root" else ""))
    (recipes / "team.yaml").write_text(CHILD + (f"  {variable}: eth0\n" if where == "extends" else ""))
    code, _out, err = run(capsys, "--recipes", str(recipes), "validate")
    file = "root.yaml" if where == "root" else "team.yaml"
    line = 5 if where == "root" else 3
    assert code == 2, err
    assert err.startswith(f"recipes/{file}:{line}:env: {variable} names "), err
    assert "a node's fact, not an image's" in err and f"trainimg spec --env {variable}=VALUE" in err
    assert err.count("\n") == 1, err  # the one mistake, one line


def test_a_recipes_own_environment_is_rendered_last(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "root.yaml").write_text(ROOT)
    (recipes / "team.yaml").write_text(CHILD)
    code, _out, err = run(capsys, "--recipes", str(recipes), "render")
    assert code == 0, err
    for name, line in (("pytorch-2.13.0-cpu-py3.11", 'OMP_NUM_THREADS="4"'), ("team-image", 'TEAM_SETTING="on"')):
        text = (tmp_path / "images" / name / "Dockerfile").read_text()
        assert text.rstrip("\n").endswith(f"ENV \\\n    {line}"), text[-400:]


@pytest.mark.parametrize("text", ["PATH=$PATH:/x", 'A="b"', "A=b\\c", "A=`id`"])
def test_an_environment_value_that_is_not_one_literal_word_is_refused(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path, text: str) -> None:
    name, _, value = text.partition("=")
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "root.yaml").write_text(ROOT + f"  {name}: {json.dumps(value)}\n")
    code, _out, err = run(capsys, "--recipes", str(recipes), "validate")
    assert code == 2 and f"value of {name} has characters outside" in err, err


@pytest.mark.parametrize("variable", VARIABLES)
def test_the_gate_fails_an_image_whose_config_sets_a_node_variable(variable: str) -> None:
    clean = ImageInfo(id="sha256:0", labels={}, env=(("PATH", "/opt/venv/bin:/usr/bin"), ("NCCL_DEBUG", "WARN")))
    assert image_env_check(clean).status == "passed"
    team = ImageInfo(id="sha256:1", labels={}, env=(*clean.env, (variable, "ens6")))
    check = image_env_check(team)
    assert check.status == "failed" and check.name == "image_env"
    assert check.reason.startswith(f"the image's config sets {variable}=ens6: {variable} names ")
    assert check.details == {"node_variables": {variable: "ens6"}}


def written_env(platform: str, out: str, tmp_path: Path) -> list[dict[str, str]]:
    """The environment of every replica of a written job, as the platform's own client reads it."""
    if platform == "azureml":
        path = tmp_path / "job.yaml"
        path.write_text(out)
        return [dict(load_job(source=path).environment_variables)]
    if platform == "sagemaker":
        request = json.loads(out)
        assert not ParamValidator().validate(request, sagemaker._request_shape()).has_errors()
        return [request["Environment"]]
    if platform == "vertex":
        job = aiplatform_v1.CustomJob.from_json(out, ignore_unknown_fields=False)
        return [{e.name: e.value for e in pool.container_spec.env} for pool in job.job_spec.worker_pool_specs]
    if platform == "slurm":
        (tmp_path / "job.sbatch").write_text(out)
        subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], check=True)  # a script bash reads
        exports = [shlex.split(line)[1] for line in out.splitlines() if line.startswith("export ")]
        return [dict(item.split("=", 1) for item in exports)]
    envs = []
    for manifest in yaml.safe_load_all(out):
        k8sconsumers.check(manifest)
        for kind, _path, doc in k8sconsumers.embedded(manifest):
            if kind == "PodTemplate":
                envs += [{e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
                         for c in doc["spec"]["containers"]]
    return envs


# The one platform whose job has no place for environment variables: AI Platform Training's ReplicaConfig
# (ml.v1.json, the document its client ships; asserted below) has none. Every other platform's job has one.
NO_ENVIRONMENT = "aiplatform"


def test_only_the_platform_without_an_environment_refuses_env() -> None:
    replica_fields = mlschema.schemas()["GoogleCloudMlV1__ReplicaConfig"]["properties"]
    assert "imageUri" in replica_fields and [f for f in replica_fields if "env" in f.lower()] == []
    assert [p for p in SPEC_PLATFORMS if ENV not in PLATFORM_FLAGS[p]] == [NO_ENVIRONMENT]


@pytest.mark.parametrize(("platform", "variable"), list(itertools.product(SPEC_PLATFORMS, VARIABLES)))
def test_spec_writes_a_node_variable_where_the_platform_takes_an_environment(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, platform: str, variable: str) -> None:
    args = ["spec", "--platform", platform, *IMAGE, *NEEDS.get(platform, []), "--env", f"{variable}==ens6,ib0",
            "--env", "NCCL_DEBUG=WARN", "--", "python", "train.py"]
    code, out, err = run(capsys, *args)
    if platform == NO_ENVIRONMENT:
        assert code == 2 and err.startswith(f"--env: not an {platform} flag; it is for "), err
        return
    assert code == 0, err
    envs = written_env(platform, out, tmp_path)
    assert envs and all(env[variable] == "=ens6,ib0" and env["NCCL_DEBUG"] == "WARN" for env in envs), envs


@pytest.mark.parametrize(("given", "why"), [("NCCL_SOCKET_IFNAME", "expected NAME=VALUE"),
                                            ("9X=1", "expected NAME=VALUE"),
                                            ("A=1\nB=2", "must be printable")])
def test_a_malformed_env_flag_is_one_line(capsys: pytest.CaptureFixture[str], given: str, why: str) -> None:
    code, _out, err = run(capsys, "spec", "--platform", "jobset", *IMAGE, "--env", given, "--", "python", "t.py")
    assert code == 2 and err.startswith("--env: ") and why in err and err.count("\n") == 1, err
