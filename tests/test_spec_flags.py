"""`trainimg spec`'s flags and names, tested from the tables they come from (`jobs.specflags`, each platform
module's ``FLAGS`` and ``NAME_LIMIT``, `runtime.topology.refusal`, `registry.references.why_unshared`):

* every platform x every flag another platform declares: refused (exit 2, one line naming the flag and the
  platforms that take it), also when given at its default value; and every flag accepted on its own platforms;
* every pair of shipped variants x every platform: distinct job names, within the platform's limit, accepted by the
  platform's writer (Kubernetes' derived pod and Service names at 10**INDEX_DIGITS - 1 nodes, botocore's
  TrainingJobName model, sbatch's job-name rule);
* `cluster --platform P` with none of P's variables, for every forceable platform: exit 2, one line;
* TensorFlow on every platform the runtime's table refuses it on: refused up front, naming the way out;
* `ci github|gitlab` with a loopback or bare registry: refused, by the rule `spec` refuses such images with.

The CLI runs in this process (`cli.app.main`), so the matrices stay fast.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from trainimg.cli.app import main
from trainimg.jobs import clusterspec, sagemaker, slurm
from trainimg.jobs.clusterspec import K8S_WRITERS, NAME_LIMITS
from trainimg.jobs.flagdecl import COMMON, Flag
from trainimg.jobs.images import resolve_image
from trainimg.jobs.k8s_shape import K8sJob
from trainimg.jobs.kubernetes import INDEX_DIGITS
from trainimg.jobs.shape import SpecOptions
from trainimg.jobs.spec import validate
from trainimg.errors import UserInputError
from trainimg.jobs.specflags import PLATFORM_FLAGS, SPEC_PLATFORMS, check_options, owners, platform_flags, \
    spec_options
from trainimg.options.ci import CI_SYSTEMS
from trainimg.recipe.loading import load_recipes
from trainimg.runtime.contract import CLOUD_PLATFORMS
from trainimg.runtime.platforms import FORCEABLE, VARIABLES
from trainimg.runtime.topology import refusal
from shipped import pick

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = "europe-docker.pkg.dev/acme/ml"
IMAGE = ["--image", pick("pytorch", gpu=True).name, "--registry", REGISTRY]
ROLE = "arn:aws:iam::123456789012:role/trainer"
#: What each platform needs besides the common flags to write a job (a value per flag it requires).
NEEDS = {
    "vertex": ["--machine-type", "a2-highgpu-1g", "--accelerator", "NVIDIA_TESLA_A100:1"],
    "aiplatform": ["--machine-type", "n1-standard-8", "--accelerator", "NVIDIA_TESLA_T4:1"],
    "azureml": ["--compute", "gpu-cluster"],
    "sagemaker": ["--instance-type", "ml.p4d.24xlarge", "--role-arn", ROLE, "--output-path", "s3://acme/out"],
}
#: A value each platform flag accepts on its own platforms (with `NEEDS`), to show it is read there: none is what
#: the platform does without the flag, so the job written with it differs from the job written without it.
VALUES = {"--machine-type": "a2-highgpu-1g", "--accelerator": "NVIDIA_TESLA_A100:1", "--ps": "1", "--evaluators": "1",
          "--region": "europe-west4", "--format": "gcloud", "--reduction-servers": "1", "--gpus": "2",
          "--namespace": "ml", "--container-runtime": "docker", "--partition": "gpu", "--compute": "gpu-cluster",
          "--vm-size": "Standard_ND96isr_H100_v5", "--distribution": "mpi", "--instance-type": "ml.p4d.24xlarge",
          "--role-arn": ROLE, "--output-path": "s3://acme/out", "--volume-size": "100", "--max-runtime": "3600",
          "--env": "NCCL_SOCKET_IFNAME=eth0"}


def spec(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["spec", *args])
    out, err = capsys.readouterr()
    return code, out, err


def typed(flag: Flag, value: str | None) -> list[str]:
    """`flag` on a command line: an on/off flag alone, else with `value` (its sample when None)."""
    if flag.kind is bool:
        return [flag.name]
    return [flag.name, VALUES[flag.name] if value is None else value]


def foreign() -> list[tuple[str, str, str | None]]:
    """platform x flag it does not read x (a sample value, and the flag's default where it has one)."""
    cases = []
    for platform, flag in itertools.product(SPEC_PLATFORMS, platform_flags()):
        if flag not in PLATFORM_FLAGS[platform]:
            defaults = [str(flag.default)] if flag.kind is not bool and flag.default is not None else []
            cases += [(platform, flag.name, value) for value in (None, *defaults)]
    return cases


def test_every_platform_flag_is_declared_once_and_every_platform_has_a_sample() -> None:
    assert set(VALUES) == {flag.name for flag in platform_flags() if flag.kind is not bool}
    assert not {flag.name for flag in COMMON} & set(VALUES)
    assert all(flag.help.strip() for flag in (*COMMON, *platform_flags()))


@pytest.mark.parametrize(("platform", "name", "value"), foreign())
def test_a_flag_of_another_platform_is_refused_naming_its_platforms(capsys: pytest.CaptureFixture[str],
                                                                    platform: str, name: str,
                                                                    value: str | None) -> None:
    flag = next(f for f in platform_flags() if f.name == name)
    code, out, err = spec(capsys, "--platform", platform, *IMAGE, "--replicas", "2", *NEEDS.get(platform, []),
                          *typed(flag, value), "--", "python", "t.py")
    article = "an" if platform[0] in "aeiou" else "a"
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert err.startswith(f"{name}: not {article} {platform} flag; it is for {', '.join(owners(flag))}"), err


@pytest.mark.parametrize(("platform", "name"), [(p, f.name) for p in SPEC_PLATFORMS for f in PLATFORM_FLAGS[p]])
def test_every_flag_is_accepted_on_its_own_platform(capsys: pytest.CaptureFixture[str], platform: str,
                                                    name: str) -> None:
    flag = next(f for f in platform_flags() if f.name == name)
    needs = NEEDS.get(platform, [])
    given = [] if name in needs else typed(flag, None)  # one the platform needs is given, with its own value
    code, out, err = spec(capsys, "--platform", platform, *IMAGE, "--replicas", "2", *needs, *given,
                          "--", "python", "t.py")
    assert code == 0 and out, err
    if given:  # read, not dropped: the job differs from the one written without it, or says why it cannot
        _, without, _ = spec(capsys, "--platform", platform, *IMAGE, "--replicas", "2", *needs, "--", "python", "t.py")
        if (platform, name) == ("vertex", "--region"):  # picks the Reduction Server's image; none is asked for here
            assert out == without and err.startswith("trainimg: --region is checked but written nowhere"), err
        else:
            assert out != without, (platform, name)


#: The flags that are `SpecOptions` fields (read by the shared cloud checks); every other one is a platform's own.
FIELDS = {field.name for field in dataclasses.fields(SpecOptions)}


def sample(flag: Flag) -> object:
    """`VALUES`' sample for `flag`, typed as click would give it."""
    return True if flag.kind is bool else flag.kind(VALUES[flag.name])


@pytest.mark.parametrize(("platform", "name"), [(p, f.name) for p in SPEC_PLATFORMS for f in PLATFORM_FLAGS[p]
                                                if f.key not in FIELDS])
def test_a_platforms_own_flag_reaches_its_module_by_its_declaration(platform: str, name: str) -> None:
    """The CLI's values become `SpecOptions.platform_flags` from the platform's ``FLAGS`` alone: no field per flag."""
    flag = next(f for f in platform_flags() if f.name == name)
    values = {"platform": platform, "replicas": 1, **{f.key: f.default for f in platform_flags()},
              flag.key: sample(flag)}
    opts = spec_options(values, image="registry.example/t:1")
    assert opts.flag(flag) == sample(flag)
    assert set(opts.platform_flags) == {f.key for f in PLATFORM_FLAGS[platform] if f.key not in FIELDS}


@pytest.mark.parametrize(("platform", "name"), [(p, f.name) for p in SPEC_PLATFORMS for f in platform_flags()
                                                if f not in PLATFORM_FLAGS[p] and f.key not in FIELDS])
def test_a_library_caller_gets_the_same_refusal(platform: str, name: str) -> None:
    """`SpecOptions` made without the CLI: another platform's flag in ``platform_flags`` is refused as on the CLI."""
    flag = next(f for f in platform_flags() if f.name == name)
    with pytest.raises(UserInputError) as info:
        check_options(SpecOptions(platform=platform, image="t", replicas=1, platform_flags={flag.key: sample(flag)}))
    assert info.value.where == name and f"it is for {', '.join(owners(flag))}" in str(info.value)


def test_a_flag_no_platform_declares_is_refused_not_dropped() -> None:
    with pytest.raises(UserInputError) as info:
        check_options(SpecOptions(platform="slurm", image="t", replicas=1, platform_flags={"nodes_per_gpu": 2}))
    assert info.value.where == "--nodes-per-gpu" and "\n" not in str(info.value)


def test_help_groups_every_flag_under_the_platforms_that_read_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "--help"]) == 0
    text = capsys.readouterr().out
    for flag in platform_flags():
        heading = text.index(f"\n{', '.join(owners(flag))}:\n")
        section = text[heading:].split("\n\n")[0]
        assert flag.name in section, (flag.name, section)


# --- names ----------------------------------------------------------------------------------------------------


def shipped() -> list[tuple[str, str]]:
    """Every shipped variant as `spec --image VARIANT --registry R` resolves it: (variant, reference)."""
    variants = load_recipes(ROOT / "recipes").by_name
    refs = []
    for name in sorted(variants):
        ref, _ = resolve_image(name, variants=variants, lock={}, registry=REGISTRY, framework=None,
                               inspect=lambda ref: None)
        refs.append((name, ref))
    return refs


def made_up(platform: str, variant: str, ref: str, conformance: bool) -> str:
    if platform in CLOUD_PLATFORMS:
        facts = resolve_image(variant, variants=load_recipes(ROOT / "recipes").by_name, lock={}, registry=REGISTRY,
                              framework=None, inspect=lambda ref: None)[1]
        opts = SpecOptions(platform=platform, image=ref, replicas=1, machine_type="n1-standard-8", facts=facts,
                           conformance=conformance, command=None if conformance else ("python", "t.py"))
        return validate(opts).name
    return clusterspec.job_name(variant, ref, conformance, NAME_LIMITS[platform])


def accepted_by_platform(platform: str, name: str) -> None:
    """The name through the platform's own checks: a Kubernetes writer at the most nodes the name leaves room for,
    botocore's TrainingJobName model, sbatch's rule."""
    if platform in K8S_WRITERS:
        K8S_WRITERS[platform](K8sJob(name=name, image=REGISTRY + "/t:1", nodes=10**INDEX_DIGITS - 1, gpus_per_node=8,
                                     command=["python"], framework="pytorch"))
    elif platform == sagemaker.PLATFORM:
        sagemaker.check_value(name, "--display-name", "TrainingJobName")
    elif platform == slurm.PLATFORM:
        slurm.sbatch_script(name=name, image=REGISTRY + "/t:1", nodes=2, tasks_per_node=1, gpus_per_node=0,
                            command=["python"], container_runtime=slurm.DOCKER)


@pytest.mark.parametrize("platform", SPEC_PLATFORMS)
def test_every_pair_of_shipped_variants_gets_distinct_valid_names(platform: str) -> None:
    variants = shipped()
    assert len(variants) >= 2
    for conformance in (False, True):
        names = {variant: made_up(platform, variant, ref, conformance) for variant, ref in variants}
        for (a, name_a), (b, name_b) in itertools.combinations(names.items(), 2):
            assert name_a != name_b, (platform, a, b, name_a)
        for name in names.values():
            assert len(name) <= NAME_LIMITS.get(platform, 128), (platform, name)
            accepted_by_platform(platform, name)


def test_sagemaker_name_limit_is_botocores() -> None:
    assert sagemaker.NAME_LIMIT == sagemaker.member("TrainingJobName").metadata["max"]


# --- cluster without its variables, TensorFlow where no TF_CONFIG, ci registries ------------------------------


@pytest.mark.parametrize("platform", FORCEABLE)
def test_cluster_without_the_platforms_variables_is_one_line(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch, platform: str) -> None:
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    code = main(["cluster", "--platform", platform, "--json"])
    out, err = capsys.readouterr()
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert "internal error" not in err and "is not set" in err, err


@pytest.mark.parametrize("platform", [p for p in SPEC_PLATFORMS if refusal(p, "tensorflow") is not None])
def test_tensorflow_is_refused_up_front_where_the_launcher_would(capsys: pytest.CaptureFixture[str],
                                                                 platform: str) -> None:
    code, out, err = spec(capsys, "--platform", platform, "--image", "tensorflow-2.21.0-cu125-py3.11", "--registry",
                          REGISTRY, "--replicas", "2", *NEEDS.get(platform, []), "--", "python", "t.py")
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert err.startswith("--image: ") and "--platform tfjob" in err, err


LOOPBACK = ("localhost:5000", "127.0.0.1:5005", "127.1.2.3", "localhost/team")
BARE = ("acme", "acme/ml")


@pytest.mark.parametrize(("system", "registry"), itertools.product(CI_SYSTEMS, (*LOOPBACK, *BARE)))
def test_ci_refuses_registries_its_runners_cannot_share(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch, system: str,
                                                        registry: str) -> None:
    monkeypatch.chdir(ROOT)
    code = main(["ci", system, "--registry", registry])
    out, err = capsys.readouterr()
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert "--registry" in err and ("loopback" in err if registry in LOOPBACK else "Docker Hub" in err), err
    # The same registry is refused by spec, for the image a cluster would pull from it.
    code, out, err = spec(capsys, "--platform", "jobset", "--image", f"{registry}/trainimg/pytorch:1",
                          "--framework", "pytorch", "--replicas", "2", "--", "python", "t.py")
    assert (code, out) == (2, "") and ("loopback" in err if registry in LOOPBACK else "Docker Hub" in err), err


def test_ci_takes_a_loopback_registry_when_every_job_runs_on_this_machine(capsys: pytest.CaptureFixture[str],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["ci", "gitlab", "--registry", LOOPBACK[0], "--one-machine"]) == 0
    assert f"--registry {LOOPBACK[0]}" in capsys.readouterr().out


@pytest.mark.parametrize("form", ["rest", "gcloud"])
def test_vertex_says_when_region_is_written_nowhere(capsys: pytest.CaptureFixture[str], form: str) -> None:
    """--region on Vertex only picks the Reduction Server image: without one, spec says so rather than drop it."""
    base = ["--platform", "vertex", *IMAGE, "--replicas", "2", *NEEDS["vertex"], "--format", form,
            "--region", "europe-west4"]
    code, out, err = spec(capsys, *base, "--", "python", "t.py")
    assert code == 0 and out and "--region is checked but written nowhere" in err, err
    code, out, err = spec(capsys, *base, "--reduction-servers", "1", "--", "python", "t.py")
    assert code == 0 and "europe-docker.pkg.dev/vertex-ai-restricted" in out and "--region" not in err, err
