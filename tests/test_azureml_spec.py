"""`trainimg spec --platform azureml` as a user runs it: a generated flag matrix (framework x nodes x GPUs x VM size x
distribution x program or conformance) whose every command job azure-ai-ml's own ``load_job`` accepts (strict: an
unknown key or a value of the wrong kind raises) and reads back as written: image, compute, instance count,
distribution, the launcher's command. Then the GPU check against the VM sizes' data, and the refusals, each one line
and exit 2, before anything queues. The CLI runs in this process (`cli.app.main`), so the matrix stays fast.
"""

from __future__ import annotations

import itertools
import shlex
from pathlib import Path

import pytest
import yaml
from test_cluster_spec import GPU, REGISTRY, refused, spec

from trainimg.jobs.azureml import DISTRIBUTIONS, vm_sizes

SIZES = (None, "Standard_NC24ads_A100_v4", "Standard_ND96isr_H100_v5", "Standard_NC64as_T4_v3", "Standard_D16s_v5")
BASE = ("--platform", "azureml", "--compute", "gpu-cluster")


def distributions(framework: str) -> tuple[str | None, ...]:
    """The default and every distribution the framework's image may be given."""
    return (None, "tensorflow") if framework == "tensorflow" else (None, "pytorch", "mpi")


def matrix() -> list[tuple[str, int, int, str | None, str | None, bool]]:
    """Every combination the checks let through, GPU counts that disagree with a known size left to the refusals."""
    out = []
    for framework, nodes, gpus, size, conformance in itertools.product(sorted(GPU), (1, 2, 4, 16), (0, 1, 4, 8),
                                                                        SIZES, (False, True)):
        carried = vm_sizes().get(size.lower())[1] if size and size.lower() in vm_sizes() else 0
        if size and gpus not in (0, carried):
            continue
        out += [(framework, nodes, gpus, size, d, conformance) for d in distributions(framework)]
    return out


def test_every_generated_job_is_read_back_by_azure_ai_ml(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    from azure.ai.ml import load_job  # here, not at collection: its import takes 5 s, on every xdist worker

    counts = dict.fromkeys(DISTRIBUTIONS, 0)
    for number, (framework, nodes, gpus, size, asked, conformance) in enumerate(matrix()):
        program = ["--conformance"] if conformance else ["--", "python", "train.py", "--data", "a b", "--lr=0.1"]
        flags = [*(["--vm-size", size] if size else []), *(["--distribution", asked] if asked else [])]
        code, out, err = spec(capsys, *BASE, "--image", GPU[framework], "--registry", REGISTRY, "--replicas",
                              str(nodes), "--gpus", str(gpus), *flags, *program)
        assert code == 0, (framework, nodes, gpus, size, asked, err)
        path = tmp_path / f"job{number}.yaml"
        path.write_text(out)
        job = load_job(source=path)
        written = yaml.safe_load(out)
        kind = asked or ("tensorflow" if framework == "tensorflow" else "pytorch")
        nproc = gpus or (vm_sizes()[size.lower()][1] if size and size.lower() in vm_sizes() else 0) or 1
        assert (job.environment.image, job.compute, job.resources.instance_count, job.distribution.type) == (
            written["environment"]["image"], "gpu-cluster", nodes, kind)
        assert job.environment.image.startswith(f"{REGISTRY}/trainimg/{framework}:")
        if kind == "tensorflow":
            assert job.distribution.worker_count == nodes
        else:
            assert job.distribution.process_count_per_instance == nproc
        words = shlex.split(job.command)
        assert words[0] == "trainimg-launch" and "--nproc-per-node" not in words, words
        assert words[words.index("--") + 1:] == (
            ["python", "-m", "trainimg_runtime", "selftest", "--cluster", "--framework", framework] if conformance
            else ["python", "train.py", "--data", "a b", "--lr=0.1"])
        counts[kind] += 1
    print(f"\nazureml command jobs read back by azure-ai-ml's load_job: {sum(counts.values())} ({counts})")
    assert all(n >= 40 for n in counts.values()), counts


@pytest.mark.parametrize(("where", "text", "extra"), [
    ("--compute", "name it", ["--platform", "azureml"]),
    ("--compute", "no Azure ML compute name", [*BASE[:2], "--compute", "gpu cluster!"]),
    ("--gpus", "carries 8 H100 GPU(s)", [*BASE, "--vm-size", "Standard_ND96isr_H100_v5", "--gpus", "4"]),
    ("--gpus", "carries no GPU", [*BASE, "--vm-size", "Standard_D16s_v5", "--gpus", "1"]),
    ("--vm-size", "not an Azure VM size", [*BASE, "--vm-size", "n1-standard-8"]),
    ("--distribution", "would train alone", [*BASE, "--distribution", "pytorch"]),
    ("--namespace", "not an azureml flag", [*BASE, "--namespace", "ml"]),
    ("--machine-type", "not an azureml flag", [*BASE, "--machine-type", "n1-standard-8"]),
    ("--compute", "not a slurm flag", ["--platform", "slurm", "--compute", "c1"]),
    ("command", "expand", [*BASE, "--args=x"]),
])
def test_refusals_are_one_line_before_anything_queues(capsys: pytest.CaptureFixture[str], where: str, text: str,
                                                      extra: list[str]) -> None:
    image = GPU["tensorflow"] if where == "--distribution" else GPU["pytorch"]
    program = ["--", "python", "t.py", "${{inputs.data}}"] if where == "command" else ["--", "python", "t.py"]
    args = [a for a in extra if a != "--args=x"]
    refused(capsys, where, text, *args, "--image", image, "--registry", REGISTRY, "--replicas", "2", *program)


def test_cpu_build_on_a_gpu_size_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """The VM size alone asks for its GPUs: a CPU build there is refused like --gpus on one."""
    refused(capsys, "--gpus", "CPU", *BASE, "--vm-size", "Standard_NC24ads_A100_v4", "--image",
            "pytorch-2.13.0-cpu-py3.11", "--registry", REGISTRY, "--replicas", "2", "--", "python", "t.py")
