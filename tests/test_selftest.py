"""`trainimg-runtime selftest`: the gate inside the image, with no Docker in it.

Run in real built images (each started by `docker run`, as a GPU runner or a pod would start it): the CPU images
of every framework (gloo, 2 local processes, each on another platform's emulated env), the CUDA torch image built
here (GPU checks skipped with their reason), broken images (failing the same checks `trainimg test` fails), and
the ``--cluster`` form a ``spec --conformance`` job runs on each replica.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import xmlschema
from brokenimages import TestImages
from conftest import ROOT, trainimg
from trainimg.runtime.cluster import parse_cluster
from trainimg.runtime.contract import VARIANT_LABEL
from trainimg.runtime.expect import expectations, image_labels
from trainimg.runtime.probe import CHECK_NAMES
from trainimg.runtime.selftest import NOT_EMULATED, local_replicas, plan_allreduce
from trainimg.runtime.shm import size_for
from trainimg.runtime.topology import PLATFORMS
from shipped import locked, pick

JUNIT_XSD = ROOT / "builder" / "conformance" / "data" / "junit.xsd"
# framework -> (variant, platform its selftest emulates)
CPU_IMAGES = {fw: (pick(fw, gpu=False).name, platform)  # each framework's CPU variant (tests/shipped.py)
              for fw, platform in (("pytorch", "vertex"), ("tensorflow", "aiplatform"), ("jax", "uai"))}


# --- without an engine ---------------------------------------------------------------------------------------------


EMULATED = [p for p in PLATFORMS if p not in NOT_EMULATED]


@pytest.mark.parametrize("platform", EMULATED)
@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_emulated_platform_is_all_on_loopback(platform: str, replicas: int) -> None:
    """Each emulated replica parses as its platform's replica would, every address on 127.0.0.1, ports apart."""
    found = local_replicas(platform, replicas)
    assert [role for _, role, _ in found] == ["chief"] + ["worker"] * (replicas - 1)
    infos = [parse_cluster(env) for _, _, env in found]
    # Slurm's replicas are the tasks of one node: ranks count processes there, nodes elsewhere.
    ranks = [i.process_rank if i.started_by else i.rank for i in infos]
    assert sorted(ranks) == list(range(replicas))
    assert {i.world_size_processes if i.started_by else i.world_size for i in infos} == {replicas}
    assert {i.master_addr for i in infos} == {"127.0.0.1"}
    texts = " ".join(v for _, _, env in found for v in env.values())
    assert "selftest-" not in texts  # every host of the emulated job was rewritten
    if "TF_CONFIG" in found[0][2]:  # Vertex sends none to a one-replica job, a TFJob neither
        tasks = [json.loads(env["TF_CONFIG"]) for _, _, env in found]
        addresses = [a for pool in tasks[0]["cluster"].values() for a in pool]
        assert len(set(addresses)) == replicas and all(a.startswith("127.0.0.1:") for a in addresses)


def test_emulated_kubernetes_and_slurm_ports_are_free_ones() -> None:
    """A rendezvous port a platform states for the whole job is a free one here; Slurm's come from its job id."""
    (_, _, master), (_, _, worker) = local_replicas("pytorchjob", 2)
    assert master["MASTER_PORT"] == worker["PET_MASTER_PORT"] != "23456"
    (_, _, coordinator), _ = local_replicas("trainjob", 2, framework="jax")
    assert coordinator["JAX_COORDINATOR_ADDRESS"].startswith("127.0.0.1:")
    tasks = local_replicas("slurm", 1, 2)
    assert [env["SLURM_LOCALID"] for _, _, env in tasks] == ["0", "1"]
    assert {env["SLURM_STEP_NODELIST"] for _, _, env in tasks} == {"127.0.0.1"}


def test_local_processes_per_framework() -> None:
    """TensorFlow runs N one-process replicas (MultiWorkerMirroredStrategy); the others one replica of N; Slurm
    starts N tasks on its one node whatever the framework."""
    assert plan_allreduce("pytorch", 2, 0).check_name("vertex") == "allreduce_gloo_vertex_x1x2"
    assert plan_allreduce("jax", 2, 0).world == 2
    tf = plan_allreduce("tensorflow", 2, 0)
    assert (tf.replicas, tf.nproc, tf.check_name("uai")) == (2, 1, "allreduce_gloo_uai_x2")
    tf_slurm = plan_allreduce("tensorflow", 2, 0, "slurm")
    assert (tf_slurm.replicas, tf_slurm.nproc, tf_slurm.world) == (1, 2, 2)
    assert plan_allreduce("pytorch", "auto", 0).world == 1  # auto without a GPU: one process
    assert plan_allreduce("pytorch", 1, 1).backend == "nccl"


def test_expectations_from_the_image_files(tmp_path: Path) -> None:
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"trainimg.framework": "pytorch", "trainimg.recipe.nccl": "2.30.7",
                                  "trainimg.reduction-server": "wanted"}))
    absent = tmp_path / "absent"
    absent.mkdir()
    assert expectations(image_labels(str(labels), str(absent)))["reduction_server"] == "present"
    (absent / "google-reduction-server").touch()
    expect = expectations(image_labels(str(labels), str(absent)))
    assert expect["reduction_server"] == "absent" and expect["nccl"] == "2.30.7"
    assert image_labels(str(tmp_path / "none.json"), str(absent)) == {}


@pytest.mark.parametrize("args,words", [
    (["--nproc-per-node", "17"], "use 1 to 16"),
    (["--timeout", "1"], "use 5 to 7200"),
    (["--labels", "@list"], "not a JSON object of strings"),
    (["--labels", "@none", "--json", "@blocked"], "cannot write"),
    (["--labels", "@none", "--platform", "jobset"], "no emulation can point at 127.0.0.1"),
    (["--labels", "@none", "--platform", "sagemaker"], "no emulation can point at 127.0.0.1"),
    (["--labels", "@none", "--platform", "trainjob", "--framework", "tensorflow"], "--platform tfjob"),
])
def test_bad_usage_is_one_line_and_exit_2(args: list[str], words: str, tmp_path: Path) -> None:
    bad = tmp_path / "list.json"
    bad.write_text("[1, 2]")
    places = {"@list": str(bad), "@none": str(tmp_path / "none.json"), "@blocked": str(bad / "report.json")}
    args = [places.get(a, a) for a in args]
    r = subprocess.run([sys.executable, "-m", "trainimg.runtime", "selftest", *args], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("trainimg-runtime selftest: ")


# --- in built images -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_images(pinned_cpu_image: str, pinned_framework_images: dict[str, str],
               client: docker.DockerClient) -> dict[str, str]:
    """The three CPU images, as this session built them from this checkout (the labels file is part of what is
    tested), by ID: other runs on this engine may retag the same names meanwhile."""
    tags = {"pytorch": pinned_cpu_image, **pinned_framework_images}
    images = {fw: client.images.get(tags[fw]) for fw in CPU_IMAGES}
    assert {fw: i.labels.get(VARIANT_LABEL) for fw, i in images.items()} == {fw: v for fw, (v, _) in CPU_IMAGES.items()}
    return {fw: i.id for fw, i in images.items()}


@pytest.fixture(scope="module")
def cuda_image_id(pinned_cuda_image: str, client: docker.DockerClient) -> str:
    return client.images.get(pinned_cuda_image).id


@pytest.fixture(scope="module")
def images(client: docker.DockerClient, cpu_images: dict[str, str]) -> Iterator[TestImages]:
    made = TestImages(client, cpu_images["pytorch"])
    yield made
    made.remove_all()


def selftest(client: docker.DockerClient, image: str, out: Path, *args: str,
             environment: dict[str, str] | None = None, command: list[str] | None = None,
             volumes: dict[str, dict[str, str]] | None = None) -> tuple[int, str]:
    """``trainimg-runtime selftest ARGS`` (or `command`) in a fresh container of `image`; /out is `out`. The
    container gets the /dev/shm a node set up as ``trainimg spec`` writes it gives two local ranks (the ``shm``
    check's floor; tests/test_node_gate.py is the one with Docker's 64 MiB)."""
    out.mkdir(parents=True, exist_ok=True)
    container = client.containers.run(image, command or ["trainimg-runtime", "selftest", *args], detach=True,
                                      entrypoint=[], volumes={str(out): {"bind": "/out", "mode": "rw"},
                                                              **(volumes or {})},
                                      environment=environment or {}, labels={"trainimg.test": "1"},
                                      shm_size=size_for(2))
    try:
        code = container.wait(timeout=600)["StatusCode"]
        return code, container.logs().decode("utf-8", "replace")
    finally:
        container.remove(force=True)


def checks_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["suites"][0]["checks"]}


@pytest.mark.parametrize("framework", list(CPU_IMAGES))
def test_selftest_in_each_cpu_image(framework: str, cpu_images: dict[str, str], client: docker.DockerClient,
                                    tmp_path: Path) -> None:
    platform = CPU_IMAGES[framework][1]
    code, logs = selftest(client, cpu_images[framework], tmp_path, "--platform", platform, "--nproc-per-node", "2",
                          "--json", "/out/r.json", "--junit", "/out/r.xml")
    assert code == 0, logs[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["passed"] is True
    checks = checks_of(report)
    name = f"allreduce_gloo_{platform}_x2" if framework == "tensorflow" else f"allreduce_gloo_{platform}_x1x2"
    assert list(checks) == [*CHECK_NAMES, name, "allreduce_nccl"]
    assert checks[name]["status"] == "passed" and checks[name]["reason"] == "sum 3 on all 2 ranks", checks[name]
    assert checks["framework"]["status"] == "passed" and "CPU build" in checks["framework"]["reason"]
    assert checks["hypertune"]["status"] == "passed"
    # Skipped is never passed: what could not run here says why.
    assert checks["allreduce_nccl"] == {**checks["allreduce_nccl"], "status": "skipped",
                                        "reason": "CPU variant: no NCCL all-reduce"}
    assert checks["gpu"]["status"] == "skipped" and checks["gpu"]["reason"] == "no GPU"
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(tmp_path / "r.xml"))
    assert report["suites"][0]["name"] == CPU_IMAGES[framework][0]


# (framework, platform, how each emulated launcher says its processes started), beside the one platform per image
# above: Slurm started its tasks, a TrainJob's torchrun its processes, else the launcher starts them.
EMULATIONS = [("pytorch", "slurm", "started by slurm"), ("pytorch", "trainjob", "started by torchrun"),
              *(("pytorch", p, "via torchrun") for p in ("pytorchjob", "tfjob", "jaxjob")),
              ("jax", "trainjob", "via spawn"), ("tensorflow", "slurm", "started by slurm")]


@pytest.mark.parametrize(("framework", "platform", "started"), EMULATIONS)
def test_selftest_emulates_each_platform(framework: str, platform: str, started: str, cpu_images: dict[str, str],
                                         client: docker.DockerClient, tmp_path: Path) -> None:
    """2 local processes under the platform's own env on 127.0.0.1, started as it starts them: Slurm's 2 tasks of
    one node (TensorFlow's ports 8888 + local id, its workers-only TF_CONFIG: TensorFlow's all-reduce joins as the
    worker TF_CONFIG names, not as TRAINIMG_ROLE's chief), a TrainJob's torchrun (its JAX runtime: the launcher's two)."""
    code, logs = selftest(client, cpu_images[framework], tmp_path, "--platform", platform, "--nproc-per-node", "2",
                          "--json", "/out/r.json")
    check = checks_of(json.loads((tmp_path / "r.json").read_text()))[f"allreduce_gloo_{platform}_x1x2"]
    assert code == 0, logs[-3000:]
    assert check["status"] == "passed" and check["reason"] == "sum 3 on all 2 ranks", check
    launched = [line for line in logs.splitlines() if "trainimg-launch: " in line]
    assert launched and all(started in line for line in launched), launched


def test_selftest_in_the_cuda_image_skips_gpu_checks_with_reasons(cuda_image_id: str, client: docker.DockerClient,
                                                                   tmp_path: Path) -> None:
    code, logs = selftest(client, cuda_image_id, tmp_path, "--nproc-per-node", "2", "--json", "/out/r.json")
    assert code == 0, logs[-3000:]
    checks = checks_of(json.loads((tmp_path / "r.json").read_text()))
    cuda = pick("pytorch", gpu=True)  # the image cuda_image_id is (tests/conftest_images.py), its facts its lock's
    cudnn = ".".join(locked(cuda, "nvidia-cudnn-").split(".")[:2])  # cudnnGetVersion's parts, as the check says it
    assert checks["nccl"]["status"] == "passed" and locked(cuda, "nvidia-nccl-") in checks["nccl"]["reason"]
    assert checks["framework"]["status"] == "passed" and f"CUDA {cuda.cuda} build" in checks["framework"]["reason"]
    assert checks["cudnn"]["status"] == "passed" and cudnn in checks["cudnn"]["reason"], checks["cudnn"]
    assert checks["reduction_server"]["status"] == "skipped" and "absent" in checks["reduction_server"]["reason"]
    for name in ("gpu", "allreduce_nccl"):
        assert checks[name]["status"] == "skipped" and checks[name]["reason"] == "no GPU", checks[name]
    assert checks["allreduce_gloo_vertex_x1x2"]["status"] == "passed"  # no GPU visible: gloo


BROKEN = {"gpu_labels": "nccl_missing", "wrong_allreduce": "allreduce_wrong_sum"}


@pytest.mark.parametrize("method", list(BROKEN))
def test_broken_image_fails_selftest_as_it_fails_trainimg_test(method: str, images: TestImages,
                                                               client: docker.DockerClient,
                                                               state_env: dict[str, str], tmp_path: Path) -> None:
    """The same failed checks, with the same reasons, and the same exit code, from both gates."""
    tag = getattr(images, method)()
    r = trainimg("test", tag, "--replicas", "1", "--nproc-per-node", "2", "--json", str(tmp_path / "test.json"),
                 "--progress", "quiet", env=state_env, timeout=900)
    code, logs = selftest(client, tag, tmp_path / "self", "--nproc-per-node", "2", "--json", "/out/r.json")
    assert r.returncode == 1 and code == 1, (r.stderr[-2000:], logs[-2000:])
    by_test = checks_of(json.loads((tmp_path / "test.json").read_text()))
    by_self = checks_of(json.loads((tmp_path / "self" / "r.json").read_text()))
    failed_test = {n.replace("allreduce_", "allreduce_gloo_"): c for n, c in by_test.items() if c["status"] == "failed"}
    failed_self = {n: c for n, c in by_self.items() if c["status"] == "failed"}
    assert failed_self.keys() == failed_test.keys() and failed_self, (failed_self.keys(), failed_test.keys())
    for name, check in failed_self.items():
        if name in CHECK_NAMES:
            assert check["reason"] == failed_test[name]["reason"], name
        else:
            assert "expected 3" in check["reason"], check["reason"]


def test_cluster_form_prints_each_replicas_report_as_one_line(cpu_images: dict[str, str],
                                                              client: docker.DockerClient, tmp_path: Path) -> None:
    """What `spec --conformance` runs: two Vertex replicas (here in one container, on loopback) under the
    launcher, each running the checks and then its rank of the all-reduce across both."""
    replicas = local_replicas("vertex", 2)
    env = {f"{var}_{i}": value for i, (_, _, e) in enumerate(replicas) for var, value in e.items()}
    one = ('{{ CLUSTER_SPEC="$CLUSTER_SPEC_{i}" TF_CONFIG="$TF_CONFIG_{i}" trainimg-launch --nproc-per-node 1 '
           '--framework pytorch -- python -m trainimg_runtime selftest --cluster > /out/{i}.out; '
           'echo $? > /out/{i}.rc; }} &')
    script = " ".join(one.format(i=i) for i in range(2)) + " wait"
    code, logs = selftest(client, cpu_images["pytorch"], tmp_path, environment=env, command=["sh", "-c", script])
    assert code == 0, logs[-3000:]
    for i, (name, _, _) in enumerate(replicas):
        assert (tmp_path / f"{i}.rc").read_text().strip() == "0", logs[-3000:]
        lines = (tmp_path / f"{i}.out").read_text().splitlines()
        assert len(lines) == 1, lines
        report = json.loads(lines[0])
        assert report["passed"] is True and report["suites"][0]["name"].endswith(name), report["suites"][0]["name"]
        checks = checks_of(report)
        assert list(checks) == [*CHECK_NAMES, "allreduce_cluster"]
        assert checks["allreduce_cluster"]["reason"] == f"rank {i} of 2: sum 3 over gloo", checks["allreduce_cluster"]


def test_gpu_script_fails_clearly_without_a_gpu(cpu_images: dict[str, str], client: docker.DockerClient,
                                                tmp_path: Path) -> None:
    """benchmarks/gpu_selftest.sh, run where there is no GPU (the CPU torch image, repository mounted): every GPU
    check is named as not passed, the timing says there is no CUDA device, and it exits 1."""
    code, logs = selftest(client, cpu_images["pytorch"], tmp_path, environment={"PYTHON": "/opt/venv/bin/python"},
                          command=["bash", "/repo/benchmarks/gpu_selftest.sh", "/out"],
                          volumes={str(ROOT): {"bind": "/repo", "mode": "ro"}})
    assert code == 1, logs[-3000:]
    assert "FAIL: gpu skipped: no GPU" in logs and "FAIL: allreduce_nccl skipped: no GPU" in logs
    assert "FAIL: framework failed: torch 2.13.0+cpu is a CPU-only build" in logs
    assert "needs at least one CUDA device" in logs
    assert logs.strip().splitlines()[-1].startswith("GPU GATE FAILED: all-reduce timing")
    report = json.loads((tmp_path / "selftest-pytorch.json").read_text())
    assert checks_of(report)["gpu"]["status"] == "skipped"
