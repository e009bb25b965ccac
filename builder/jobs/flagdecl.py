"""How a platform declares the `trainimg spec` flags it reads (`Flag`), and the flags every platform reads.

Why declarations and not a list of refusals: each platform module (`platforms.MODULES`) names in its ``FLAGS``
the flags it reads; the CLI builds ``spec``'s options from those declarations (`specflags`), so a flag that the chosen platform does not
declare is refused by construction, with the platforms that do take it. Nothing lists what to refuse, and a new
flag cannot be dropped silently by a platform that forgot to refuse it.

A flag several platforms read is one `Flag` object, declared once (here, or in the module those platforms share:
`fields` for Google Cloud's, `kubernetes` for Kubernetes') and named in each platform's ``FLAGS``. Declarations
are plain data (no click): the `jobs` layer sits below the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..recipe.loading import FRAMEWORKS


@dataclass(frozen=True)
class Flag:
    """One ``spec`` option: its spelling, what it means, and how its value parses.

    `kind` is ``str``, ``int`` or ``bool`` (an on/off flag; `negation` names its off spelling when it has one);
    `choices` limits a ``str``; `key` is the name the value goes by (`SpecOptions`' field where there is one, else
    its key in ``SpecOptions.platform_flags``).
    `replaces` names other platforms' flags that this one stands in for: the refusal of such a flag on this
    flag's platform points here (``--gpus`` on Vertex: "vertex takes --accelerator TYPE:COUNT").
    """

    name: str
    help: str
    kind: type = str
    default: object = None
    required: bool = False
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    multiple: bool = False
    negation: str | None = None
    dest: str | None = None
    replaces: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.dest or self.name.removeprefix("--").replace("-", "_")

    @property
    def usage(self) -> str:
        """The flag as a person types it: ``--accelerator TYPE:COUNT``."""
        if self.kind is bool:
            return self.name
        return f"{self.name} {self.metavar or ('N' if self.kind is int else self.key.upper())}"


IMAGE = Flag("--image", "A variant (with --registry, or its images.lock entry) or a pullable image reference.",
             required=True, metavar="VARIANT|REF")
REGISTRY = Flag("--registry", "Where the variant was pushed.", metavar="HOST[:PORT][/PREFIX]")
LOCK = Flag("--lock", "The release lockfile a variant's pushed reference is read from (default: images.lock).",
            metavar="FILE")
FRAMEWORK = Flag("--framework", "The image's framework, for a reference that is not local (a local one's labels "
                 "say).", choices=(*FRAMEWORKS,))
REPLICAS = Flag("--replicas", "Primary plus workers (nodes, instances).", kind=int, required=True)
DISPLAY_NAME = Flag("--display-name", "The job's name: Vertex displayName, AI Platform jobId, SageMaker "
                    "TrainingJobName, the Kubernetes object's, Slurm's --job-name, Azure ML display_name (default: "
                    "trainimg-<variant>-<hash of the image>-job, within the platform's limit).")
CONFORMANCE = Flag("--conformance", "Run trainimg's in-image all-reduce check instead of a program.", kind=bool,
                   default=False)
ARGS = Flag("--args", "Arguments for the program given after `--` (repeatable; refused without one).",
            multiple=True)
#: What every platform reads, in help order (``--platform`` itself is the CLI's: its choices are the platforms).
COMMON = (IMAGE, REGISTRY, LOCK, FRAMEWORK, REPLICAS, DISPLAY_NAME, CONFORMANCE, ARGS)

#: GPUs per node: the platforms whose nodes are not a machine type with its accelerators.
GPUS = Flag("--gpus", "GPUs per node (one process each).", kind=int, default=0,
            replaces=("--accelerator",))
