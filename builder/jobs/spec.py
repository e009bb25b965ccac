"""Cloud job specs: one set of flags -> the body a platform's API (or gcloud) accepts, checked before submission.

Why this exists: the platform layouts are easy to get subtly wrong and the mistakes only show after a job has
queued for GPUs. `job_spec` validates `SpecOptions` once into a `JobShape`, refuses the combinations the platforms
reject or that would silently run badly, and lets `vertex` or `aiplatform` lay the body out in the ``rest`` form
(the API request) or the ``gcloud`` form (the ``--config`` file):

* The image: a reference a cluster can pull, and no accelerator for a CPU build (`clusterimage`, the checks every
  platform makes). The accelerator: a type in the platform's enum (`fields`), on a machine type that carries it in
  that count (`machines`, Google Cloud's table).
* Reduction Server: Vertex only; GPU workers only (reducers serve NCCL all-reduce between GPU replicas); at least
  two replicas; never together with parameter servers (both want pool 2); and only for an image known to hold NCCL
  >= ``compat.nccl.minimum`` and ``google-reduction-server``. ``"auto"`` sizes the pool (`reducers.reducers_for`).
  The primary's and workers' launcher gets ``--reduction-server`` so the reducers never enter ``TF_CONFIG``.
* The launcher: with a command, every replica runs it as ``trainimg-launch --nproc-per-node N [--framework F]
  [--reduction-server] -- CMD...``, N the replica's accelerator count; the launcher keeps TensorFlow at one process
  per replica (from ``--framework`` or the image's manifest). Without a command the image's ENTRYPOINT runs, and
  args without a command are refused (trainimg's images have no ENTRYPOINT to take them).
* ``conformance=True`` replaces the program with trainimg's in-image check (`conformance_command`), so a team can
  prove a tag on the real cluster, with its real interconnect, before promoting it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from packaging.specifiers import InvalidSpecifier
from packaging.version import InvalidVersion, Version

from ..errors import UserInputError
from ..recipe.compat import floor_of, load_compat
from ..runtime.shm import local_ranks
from .clusterimage import check_gpu_image, check_pullable
from .fields import FORMATS, check_machine_type, check_platform, check_region, count, nproc_per_node, parse_accelerator, \
    strings
from .gpucheck import check_gpus
from .machines import check_machine_accelerator, comes_with_accelerators
from .node import ENV, job_env, shm_note
from .platforms import job_platform
from .reducers import reducers_for
from .shape import ImageFacts, JobShape, SpecOptions
from .specflags import check_options

MAX_NAME_CHARS = 128  # Vertex displayName and AI Platform jobId, both counted in characters


def job_spec(opts: SpecOptions, form: str = "rest") -> dict[str, Any]:
    """The body for `opts.platform` in `form` (``rest``: the API request; ``gcloud``: the ``--config`` file).

    Every refusal is a `UserInputError` naming the flag, raised before any body is returned.
    """
    if form not in FORMATS:
        raise UserInputError(f"expected one of {', '.join(FORMATS)}, got {form!r}", where="--format")
    job = validate(opts)
    body = job_platform(opts.platform).body
    if body is None:
        raise UserInputError(f"{opts.platform} takes a cluster job, not a cloud job body", where="--platform")
    return body(job, form)


def notes(opts: SpecOptions, body: dict[str, Any]) -> tuple[str, ...]:
    """The lines for stderr after a cloud body: the platform's own (`JobPlatform.notes`), then what the job cannot
    say of its nodes (`node`): a /dev/shm the platform gives no way to set."""
    note = shm_note(opts.platform, local_ranks(1, nproc_per_node(opts.accelerator, opts.platform)))
    return (*job_platform(opts.platform).notes(opts, body), *((note,) if note else ()))


def validate(opts: SpecOptions) -> JobShape:
    """Check every option and resolve the reducer count and the job's name."""
    platform = check_platform(opts.platform)
    check_options(opts)
    check_pullable(opts.image)
    if opts.region is not None:
        check_region(opts.region)
    opts = program(opts)
    machine_type = check_machine_type(opts.machine_type)
    check_gpus(opts)
    accelerator = parse_accelerator(opts.accelerator, platform)
    check_machine_accelerator(machine_type, accelerator, platform)
    check_gpu_image(opts.image, opts.facts, accelerator[1] if accelerator else 0)
    return JobShape(
        image=opts.image,
        replicas=count(opts.replicas, "--replicas", minimum=1),
        machine_type=machine_type,
        ps=count(opts.ps, "--ps", minimum=0),
        reducers=_reducer_count(opts),
        evaluators=count(opts.evaluators, "--evaluators", minimum=0),
        accelerator=accelerator,
        ps_accelerator=accelerator if comes_with_accelerators(machine_type) else None,
        region=opts.region,
        args=opts.args,
        command=opts.command,
        facts=opts.facts,
        name=_name(opts),
        use_chief_in_tf_config=bool(opts.use_chief_in_tf_config),
        env=job_env(opts.flag(ENV)),
    )


def program(opts: SpecOptions) -> SpecOptions:
    """`opts` with the command and args checked, and the conformance check as the command when asked for.

    Args need a command to go to: without one the image's ENTRYPOINT gets them, and trainimg's images have none
    (their CMD is ``bash``), so each replica would run the first argument as its program.
    """
    command = None if opts.command is None else tuple(strings(opts.command, "command"))
    if command is not None and not command:
        raise UserInputError("an empty command; leave it out to run the image's ENTRYPOINT", where="command")
    opts = replace(opts, args=tuple(strings(opts.args, "args")), command=command)
    if opts.conformance:
        return replace(opts, command=tuple(_conformance(opts)))
    if opts.args and command is None:
        raise UserInputError(f"arguments need the program they are for, after `--` (e.g. -- python train.py); "
                             f"without one each replica would run {opts.args[0]!r} as its program (trainimg's "
                             "images have no ENTRYPOINT)", where="--args")
    return opts


def conformance_command(framework: str) -> list[str]:
    """The in-image gate a conformance job runs on every replica instead of the user's program, under the
    launcher: local rank 0 runs the image's checks, every process its rank of the all-reduce across the replicas,
    and each replica prints its JSON report as one log line (`runtime.selftest`, ``--cluster``)."""
    return ["python", "-m", "trainimg_runtime", "selftest", "--cluster", "--framework", framework]


def _conformance(opts: SpecOptions) -> list[str]:
    """The check replaces the user's program, so neither a command nor args may be given."""
    if opts.command is not None or opts.args:
        raise UserInputError("runs trainimg's all-reduce check instead of your program; drop the command and args",
                             where="--conformance")
    if opts.ps or opts.evaluators:
        raise UserInputError("the all-reduce check runs on the primary and workers only; drop --ps/--evaluators",
                             where="--conformance")
    framework = opts.facts.framework if opts.facts is not None else "pytorch"
    if framework == "none":
        raise UserInputError(f"image {opts.image} has no framework to run the all-reduce with", where="--conformance")
    return conformance_command(framework)


def _name(opts: SpecOptions) -> str:
    """Vertex's displayName (1..128 UTF-8 characters) or AI Platform's jobId (its grammar: the platform's
    `made_name` and `check_name`). Both APIs count characters, not bytes."""
    platform = job_platform(opts.platform)
    given = opts.display_name
    if given is None:
        stem = "trainimg-" + (f"{opts.facts.name}-" if opts.facts and opts.facts.name else "")
        given = platform.made_name(stem + ("conformance" if opts.conformance else "job"))
    if not isinstance(given, str) or not given.strip() or len(given) > MAX_NAME_CHARS or not _is_utf8(given):
        raise UserInputError(f"a name is 1..{MAX_NAME_CHARS} UTF-8 characters, got {given!r}", where="--display-name")
    platform.check_name(given)
    return given


def _is_utf8(text: str) -> bool:
    """False for a name with lone surrogates (undecodable bytes in argv), which no JSON body can carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _reducer_count(opts: SpecOptions) -> int:
    """The reducer pool's size (0: none), after every reason to refuse a Reduction Server has been checked."""
    where, wanted = "--reduction-servers", opts.reduction_servers
    if wanted is None:
        return 0
    if wanted != "auto":
        if isinstance(wanted, str) and wanted.isdigit():
            wanted = int(wanted)
        if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 0:
            raise UserInputError(f"expected a count or 'auto', got {wanted!r}", where=where)
        if wanted == 0:
            return 0
    if opts.ps:
        raise UserInputError("worker pool 2 holds parameter servers or reducers, not both; drop --ps", where=where)
    if opts.accelerator is None:
        raise UserInputError("the Reduction Server serves GPU workers (NCCL all-reduce); add --accelerator",
                             where=where)
    if isinstance(opts.replicas, int) and opts.replicas < 2:
        raise UserInputError(f"the Reduction Server reduces between replicas; needs --replicas >= 2, got "
                             f"{opts.replicas}", where=where)
    _check_reduction_server_image(opts.image, opts.facts)
    if wanted == "auto":
        return reducers_for(check_machine_type(opts.machine_type), opts.replicas, opts.accelerator,
                            platform=opts.platform)
    return int(wanted)


def _check_reduction_server_image(image: str, facts: ImageFacts | None) -> None:
    """The image must be known to hold NCCL >= the compat minimum and google-reduction-server."""
    where = "--reduction-servers"
    if facts is None or not facts.knows_libraries:
        raise UserInputError(f"cannot tell whether {image} holds NCCL and google-reduction-server; use "
                             "--image VARIANT --registry R, or a local image whose labels say", where=where)
    minimum = load_compat().nccl.minimum
    low = _nccl_floor(facts.nccl)
    if low is None or low < Version(minimum):
        found = "no NCCL" if facts.nccl in (None, "none") else f"NCCL {facts.nccl}"
        raise UserInputError(f"image {image}: {found}; the Reduction Server needs NCCL >= {minimum}", where=where)
    if not facts.reduction_server:
        raise UserInputError(f"image {image}: built without google-reduction-server", where=where)


def _nccl_floor(nccl: str | None) -> Version | None:
    """The lowest NCCL the image can hold: a recipe gives a constraint (``>=2.27.7,<3``), labels a version."""
    if nccl in (None, "none"):
        return None
    try:
        return floor_of(nccl)
    except (InvalidSpecifier, InvalidVersion):
        return None
