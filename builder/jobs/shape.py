"""The typed inputs of a cloud job spec: what the image is (`ImageFacts`), what the user asked for (`SpecOptions`),
and the validated job (`JobShape`) that the platform modules (`vertex`, `aiplatform`) lay out as request bodies.

Why three types: options arrive loose from flags; `spec.job_spec` checks them once and hands the platform modules a
`JobShape` whose every field is already valid, so the layout code only lays out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .flagdecl import Flag

LAUNCHER = "trainimg-launch"
# The launcher flag that keeps a Reduction Server pool out of TF_CONFIG (runtime/launch.py, runtime/cluster.py).
REDUCTION_SERVER_FLAG = "--reduction-server"
# What the facts (and trainimg's version labels) say for a component the image does not have: a CPU build's CUDA.
NONE = "none"


@dataclass(frozen=True, kw_only=True)
class ImageFacts:
    """What trainimg knows about the image a job runs, and where it learnt it.

    `source` is ``recipe`` (the variant's recipe, for ``--image VARIANT``), ``labels`` (a local image's labels) or
    ``--framework`` (a remote reference, where only the framework is known). `cuda`, `nccl` and `reduction_server`
    are None when unknown; a CPU image known from its recipe or labels has ``cuda == nccl == NONE``.
    """

    source: str
    name: str | None
    framework: str
    cuda: str | None = None
    nccl: str | None = None
    reduction_server: bool | None = None
    archs: tuple[str, ...] | None = None  # the CUDA architectures its framework build holds (recipe.gpuarch)
    alternatives: tuple[tuple[str, tuple[str, ...]], ...] = ()  # other variants of its framework: (name, archs)
    # The CPU architectures it is there for (an index's platforms, a variant's builds, a local image's own); None:
    # unknown (a reference known only by --framework), so not checked.
    platforms: tuple[str, ...] | None = None
    # other variants of its framework: (name, the CPU architectures each is built for)
    platform_alternatives: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def knows_libraries(self) -> bool:
        return self.nccl is not None and self.reduction_server is not None


@dataclass(frozen=True, kw_only=True)
class SpecOptions:
    """`trainimg spec`'s flags. `replicas` counts the primary; `reduction_servers` is a count, ``"auto"`` or None."""

    platform: str
    image: str
    replicas: int
    machine_type: str | None = None  # cloud platforms only (required there)
    ps: int = 0
    reduction_servers: int | str | None = None
    evaluators: int = 0
    accelerator: str | None = None
    region: str | None = None
    args: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    facts: ImageFacts | None = None
    conformance: bool = False
    display_name: str | None = None
    use_chief_in_tf_config: bool = False
    # The platform's own flags, by `flagdecl.Flag.key` (``{"instance_type": "ml.p4d.24xlarge"}``): the module whose
    # ``FLAGS`` declares one says what it means and reads it with `flag`, so a new platform's flag is declared in
    # its module only; `specflags` refuses a key the chosen platform does not declare.
    platform_flags: Mapping[str, Any] = field(default_factory=dict)

    def flag(self, declared: Flag) -> Any:
        """The value given for the platform flag `declared`, its declared default where none was."""
        return self.platform_flags.get(declared.key, declared.default)


@dataclass(frozen=True, kw_only=True)
class JobShape:
    """A validated job: every count, name and command checked; `reducers` resolved to a number (0: none).

    `ps_accelerator` is what a parameter server's machine spec names: None on a series GPUs attach to (a parameter
    server needs none), the job's accelerator on a machine type that comes with it (A2, A3, G2...).
    """

    image: str
    replicas: int
    machine_type: str
    ps: int
    reducers: int
    evaluators: int
    accelerator: tuple[str, int] | None
    ps_accelerator: tuple[str, int] | None
    region: str | None
    args: tuple[str, ...]
    command: tuple[str, ...] | None
    facts: ImageFacts | None
    name: str
    use_chief_in_tf_config: bool
    env: tuple[tuple[str, str], ...] = ()  # every replica's environment (`node.job_env`); Vertex's ContainerSpec.env

    @property
    def nproc(self) -> int:
        """Processes per GPU replica: one per accelerator, 1 on a CPU machine."""
        return self.accelerator[1] if self.accelerator else 1

    def container_command(self, nproc: int) -> list[str] | None:
        """The replica's command: CMD behind the in-image launcher, or None to run the image's ENTRYPOINT.

        ``--framework`` is added when the image's framework is known (the launcher also finds it itself, from the
        image's manifest), and ``--reduction-server`` when the job has a reducer pool.
        """
        if self.command is None:
            return None
        head = [LAUNCHER, "--nproc-per-node", str(nproc)]
        if self.facts is not None and self.facts.framework != "none":
            head += ["--framework", self.facts.framework]
        if self.reducers:
            head.append(REDUCTION_SERVER_FLAG)
        return [*head, "--", *self.command]
