"""Verbs for jobs: cluster, spec, run, tune."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
import yaml

from ..errors import UserInputError
from .context import STDOUT, Ctx, docker_engine, emit_json, image_ref, json_option, pass_ctx, progress_option
from ..options import (
    GOALS,
    NPROC_PER_NODE,
    PARALLEL_TRIALS,
    REPLICAS,
    SIDE_REPLICAS,
    ClusterOptions,
    JobOptions,
    TuneOptions,
    default,
)
from ..progress import log_printer
from ..runtime.contract import CLOUD_PLATFORMS, PLATFORMS
from ..runtime.platforms import FORCEABLE
from ..runtime.topology import PS_PER_NODE
from .program import ProgramCommand
from .speccmd import SpecCommand, given

if TYPE_CHECKING:
    from ..jobs.shape import ImageFacts

_PS_BESIDE = "/".join(PS_PER_NODE).upper()  # the platforms that run a ps beside each node


@click.command()
@json_option("This replica's place in the job")
@click.option("--nproc-per-node", type=int, default=None, help="Add the process-level view.")
@click.option("--reduction-server", is_flag=True, help="workerpool2 holds Reduction Server replicas (not in TF_CONFIG).")
@click.option("--platform", type=click.Choice(FORCEABLE), default=None,
              help="Read this platform's variables, whatever else is set.")
@pass_ctx
def cluster(c: Ctx, json_path: str | None, nproc_per_node: int | None, reduction_server: bool, platform: str | None) -> None:
    """Read this replica's place in the job (platform, role, node and process ranks, the variables read) from the
    environment its platform made: CLUSTER_SPEC/TF_CONFIG, SLURM_*, Kubeflow's PET_*/JAX_*, a JobSet's, env://.
    Reads the environment only: starts no container, reaches no registry.

    \b
    Examples:
      trainimg cluster --json
      CLUSTER_SPEC="$(cat spec.json)" trainimg cluster --platform vertex --nproc-per-node 8
    """
    from ..runtime.cluster import parse_cluster, summary
    from ..runtime.world import ClusterError

    opts = ClusterOptions(nproc_per_node=nproc_per_node, reduction_server=reduction_server, platform=platform)
    c.checked()
    try:
        info = parse_cluster(c.env, opts.nproc_per_node, reduction_server=opts.reduction_server,
                             platform=opts.platform)
    except ClusterError as err:
        raise UserInputError(str(err)) from None
    if json_path:
        emit_json(info.to_json(), json_path)
    else:
        click.echo(summary(info))


@click.command(cls=SpecCommand, program_required=False)
@pass_ctx
def spec(c: Ctx, **flags: Any) -> None:
    """Print the job for PLATFORM: a cloud job body (Vertex CustomJob, AI Platform Job) or gcloud's --config file,
    Kubernetes manifests (TrainJob and its TrainingRuntime, PyTorchJob, TFJob, JobSet), a Slurm sbatch script,
    an Azure ML command job or a SageMaker CreateTrainingJob request; the container's program goes after `--`.

    Each platform reads the flags listed under its name (declared by its module in trainimg.jobs); a flag of
    another platform is refused, naming the platforms that take it.

    \b
    Examples:
      trainimg spec --platform vertex --image pytorch-2.13.0-cpu-py3.11 --registry ghcr.io/team --replicas 2 --machine-type n1-standard-8 -- python train.py
      trainimg spec --platform jobset --image pytorch-2.15.0-cu132-py3.11 --registry ghcr.io/team --replicas 4 --gpus 8 --conformance
    """
    from ..jobs.clusterspec import cluster_job
    from ..jobs.spec import job_spec, notes
    from ..jobs.specflags import check_given, spec_options

    platform = flags["platform"]
    check_given(platform, given(click.get_current_context()))
    ref, facts = _spec_image(c, flags["image"], flags["registry"], flags["lock"], flags["framework"])
    opts = spec_options(flags, image=ref, facts=facts)
    if platform not in CLOUD_PLATFORMS:
        text, said = cluster_job(opts)
        c.checked()
        for note in said:
            click.echo(f"trainimg: {note}", err=True)
        click.echo(text, nl=False)
        return
    form = flags["form"] or "rest"
    body = job_spec(opts, form)
    c.checked()
    for note in notes(opts, body):
        click.echo(f"trainimg: {note}", err=True)
    if form == "gcloud":
        click.echo(yaml.safe_dump(body, sort_keys=False, default_flow_style=False), nl=False)
    else:
        emit_json(body, None)


def _spec_image(c: Ctx, image: str, registry: str | None, lock_path: str | None,
                framework: str | None) -> tuple[str, ImageFacts | None]:
    """--image resolved to a pullable reference and the image's facts (jobs/images.py)."""
    from ..jobs.images import resolve_image
    from ..publish.lockfile import DEFAULT_LOCK, read_lock
    from ..recipe.loading import RecipeError

    try:
        variants = dict(c.recipes().by_name)
    except RecipeError:
        variants = {}  # outside a checkout: variants come from the lockfile only
    lock = read_lock(lock_path or DEFAULT_LOCK)
    return resolve_image(image, variants=variants, lock=lock, registry=registry, framework=framework,
                         inspect=lambda ref: docker_engine().image(ref))


Decorator = Callable[[Any], Any]

# What goes into a job's containers, the same for `run` and `tune`.
_JOB_CONTENTS: list[Decorator] = [
    click.option("--nproc-per-node", type=int, default=default(JobOptions, "nproc_per_node"), show_default=True,
                 help=f"Processes per replica, {NPROC_PER_NODE}."),
    click.option("--env", "envs", multiple=True, metavar="K=V", help="Extra environment (repeatable)."),
    click.option("--volume", "volumes", multiple=True, metavar="SRC:DST", help="Bind mount (repeatable)."),
    click.option("--timeout", type=float, default=default(JobOptions, "timeout"),
                 help="Seconds before the job is stopped."),
    json_option("The job's report (each replica's exit code and seconds)"),
    progress_option("each replica's output (prefixed with its task)"),
]


def job_flags(shaped_by: str = "") -> Decorator:
    """Flags `run` and `tune` share: the job's shape and what goes into its containers. `shaped_by` ends the shape
    flags' helps where the verb takes them only with another flag (`tune`: with --platform)."""
    flags: list[Decorator] = [
        click.option("--replicas", type=int, default=default(JobOptions, "replicas"), show_default=True,
                     help=f"Chief plus workers ({_PS_BESIDE}: nodes), {REPLICAS}; the default 1 is one container, a job "
                          f"of one node (`test` defaults to 2, the fewest that test a collective).{shaped_by}"),
        click.option("--ps", type=int, default=default(JobOptions, "ps"),
                     help=f"Parameter servers ({_PS_BESIDE} default: one per node), {SIDE_REPLICAS}; only where the "
                          f"platform has them.{shaped_by}"),
        click.option("--evaluators", type=int, default=default(JobOptions, "evaluators"), show_default=True,
                     help=f"Evaluators, {SIDE_REPLICAS}; only where the platform has them.{shaped_by}"),
        *_JOB_CONTENTS,
    ]

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for deco in reversed(flags):
            fn = deco(fn)
        return fn

    return decorate


@click.command(cls=ProgramCommand, program_required=False)
@click.argument("image")
@click.option("--platform", type=click.Choice(PLATFORMS), required=True,
              help="The platform replayed: the variables, hostnames and way of starting processes each replica gets.")
@job_flags()
@click.option("--trial", default=None, help="Hyperparameter trial id the platform would set.")
@pass_ctx
def run(c: Ctx, image: str, platform: str, replicas: int, ps: int | None, evaluators: int, nproc_per_node: int,
        envs: tuple[str, ...], volumes: tuple[str, ...], timeout: float | None, json_path: str | None, progress: str,
        trial: str | None, command: tuple[str, ...]) -> None:
    """Run CMD on replicas as the platform would (its env, a fresh network); exit with the first failure's code.

    Without `-- CMD` each replica runs the image's own ENTRYPOINT and CMD, as `docker run IMAGE` would. Starts
    one container per replica on the Docker engine, on a network made for the job and removed after; reaches no
    registry (the image must be on the engine).

    \b
    Examples:
      trainimg run pytorch-2.13.0-cpu-py3.11 --platform vertex --replicas 2 -- python train.py --epochs 1
      trainimg run IMAGE --platform slurm --replicas 2 --nproc-per-node 2 --json run.json -- python train.py
      trainimg run team/trainer:1 --platform vertex --replicas 2
    """
    from ..jobs.run import parse_env, parse_volumes, run_job

    opts = JobOptions(command=command, platform=platform, replicas=replicas, ps=ps, evaluators=evaluators,
                      nproc_per_node=nproc_per_node, env=parse_env(envs), volumes=parse_volumes(volumes),
                      timeout=timeout, trial=trial)
    c.checked()
    result = run_job(docker_engine(), image_ref(c, image)[0], opts, on_log=log_printer(progress, c.env))
    click.echo(result.summary(), err=True)
    if json_path:
        emit_json(result.to_json(), json_path)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


@click.command(cls=ProgramCommand)
@click.argument("image")
@click.option("--param", "params", multiple=True, required=True, metavar="NAME=V1,V2,...",
              help="A hyperparameter and the values to try, passed to the program as --NAME=value; repeatable "
                   "(the grid is every combination).")
@click.option("--metric", default=None, metavar="TAG", help="The hypertune metric tag (default: the only one).")
@click.option("--goal", type=click.Choice(GOALS), default=default(TuneOptions, "goal"), show_default=True,
              help="Whether the best trial has the highest (max) or lowest (min) final metric.")
@click.option("--parallel", type=int, default=default(TuneOptions, "parallel"), show_default=True,
              help=f"Trials at once, {PARALLEL_TRIALS}.")
@click.option("--platform", type=click.Choice(PLATFORMS), default=None,
              help="Run each trial distributed as this platform would (default: one container per trial).")
@job_flags(" With --platform only: without it each trial is one container.")
@pass_ctx
def tune(c: Ctx, image: str, params: tuple[str, ...], metric: str | None, goal: str, parallel: int,
         platform: str | None, replicas: int, ps: int | None, evaluators: int, nproc_per_node: int,
         envs: tuple[str, ...], volumes: tuple[str, ...], timeout: float | None, json_path: str | None,
         progress: str, command: tuple[str, ...]) -> None:
    """One trial per combination of --param values, hyperparameters as --NAME=value, metrics from hypertune.

    Starts containers on the Docker engine (one per trial, or a job's replicas with --platform); reaches no
    registry.

    \b
    Examples:
      trainimg tune IMAGE --param lr=0.1,0.01 --param batch=32,64 --parallel 2 -- python train.py
      trainimg tune IMAGE --param lr=0.1,0.2 --goal min --metric loss --json tune.json -- python train.py
    """
    from ..jobs.run import parse_env, parse_volumes
    from ..jobs.tune import parse_params
    from ..jobs.tune import tune as run_tune

    job = JobOptions(command=command, platform=platform, replicas=replicas, ps=ps, evaluators=evaluators,
                     nproc_per_node=nproc_per_node, env=parse_env(envs), volumes=parse_volumes(volumes),
                     timeout=timeout)
    opts = TuneOptions(params=parse_params(params), job=job, metric=metric, goal=goal, parallel=parallel)
    c.checked()
    result = run_tune(docker_engine(), image_ref(c, image)[0], opts, on_log=log_printer(progress, c.env))
    click.echo(result.table(), err=json_path == STDOUT)  # stdout holds the JSON then
    if json_path:
        emit_json(result.to_json(), json_path)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


