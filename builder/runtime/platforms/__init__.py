"""Every platform trainimg's images run on, one module each, and the one rule that picks the module for an env.

Each platform module has ``NAME``, ``FORCED_BY`` (the ``--platform`` values it answers), ``claims(env)`` (the
variables of its signature present in `env`, and the path of a file it is told by where a platform writes one,
SageMaker's resource config; empty when it is not there) and ``read(env, reduction_server=...)`` -> `ClusterInfo` (a
missing or wrong variable is a `ClusterError` naming it), and for the host's replay of it (`topology.replica_specs`,
which dispatches through this registry): ``replicas(job)`` (its replicas as the platform lays them out), ``PORT``
(its default port), ``STARTS`` (who starts a node's processes, `starts`), ``NO_TF_CONFIG`` (why it refuses
TensorFlow, or None) and ``NOT_EMULATED`` (why selftest cannot stand in for it on 127.0.0.1, or None); a
module that reads a file it is told by also gives ``elsewhere(env)`` (`env` pointed away from that file). Adding a
platform is adding a module to `PLATFORMS`, its name to the contract's `PLATFORMS`, its `jobs/` module and its
tests.

`detect` applies the rule, so it is written once:
1. a process a launcher started is described by that launcher's layer, innermost first: torchrun's workers
   (`torchrun`), then trainimg-launch's own children (`launched`);
2. ``--platform`` names the module to read, whatever else is set;
3. otherwise exactly one platform may claim the env: a claim that is part of another's (the ``RANK`` of a
   PyTorchJob is also an ``env://`` world's) yields to the larger one; two that remain are an error naming both;
4. an env no platform claims is one local process, unless it holds a variable that only a platform sets
   (``JOB_COMPLETION_INDEX``): that is refused, never turned silently into a world of one.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType

from ..world import ClusterError, ClusterInfo, local_world, present
from .starts import Starts
from . import azureml, envworld, jaxjob, jobset, launched, ompi, pytorchjob, sagemaker, slurm, tfconfig, \
    torchrun, trainjob

PLATFORMS: tuple[ModuleType, ...] = (tfconfig, slurm, trainjob, pytorchjob, jaxjob, jobset, azureml, sagemaker,
                                     ompi, envworld)
LAYERS: tuple[ModuleType, ...] = (torchrun, launched)
#: Every ``--platform`` value `detect` takes, in the order help texts list them.
FORCEABLE: tuple[str, ...] = tuple(name for module in PLATFORMS for name in module.FORCED_BY)
#: ``--platform`` value -> who starts a node's processes there (each module's ``STARTS``; None: the launcher).
STARTS: dict[str, Starts | None] = {name: module.STARTS for module in PLATFORMS for name in module.FORCED_BY}
#: Every variable by which the runtime recognises a platform or a launcher layer: an emulation (selftest) removes
#: them from what it inherits, so the emulated platform's are the only ones.
VARIABLES = frozenset({
    *tfconfig.VARIABLES, *slurm.VARIABLES, *slurm.RENDEZVOUS, slurm.JAX_PORT, slurm.JAX_ADDRESS,
    *trainjob.TORCH, *trainjob.TORCH_OPTIONAL, *trainjob.JAX, *pytorchjob.REQUIRED, *pytorchjob.OPTIONAL,
    *jaxjob.REQUIRED, *jobset.REQUIRED, *envworld.REQUIRED, *envworld.OPTIONAL, torchrun.MARKER, *torchrun.REQUIRED,
    launched.MARKER, launched.ROLE, *launched.GROUP, *azureml.VARIABLES,
    *sagemaker.VARIABLES, *ompi.VARIABLES,
})
# Variables that only a platform sets but that describe no world alone -> what would.
_STRAYS = {
    jobset.INDEX: "a Kubernetes Indexed Job sets it, but nothing gives the world: a JobSet's pods need the JOBSET_* "
                  "variables (trainimg spec --platform jobset writes them), a TrainJob's its runtime's PET_*",
}


def elsewhere(env: Mapping[str, str]) -> dict[str, str]:
    """`env` read as if no platform's file lay on this machine: each module that reads a file it is told by gives
    ``elsewhere(env)``, pointing it away, so a sample of another platform's variables parsed inside such a
    platform's container (the probe's) does not meet the container's own file."""
    out = dict(env)
    for module in PLATFORMS:
        hide = getattr(module, "elsewhere", None)
        if hide is not None:
            out = hide(out)
    return out


def who_starts(platform: str, framework: str | None) -> str | None:
    """How `platform` starts a `framework` job's processes (`starts.PLATFORM`, `TORCHRUN` or `SAYS`), or None where
    trainimg's launcher starts them."""
    said = STARTS.get(platform)
    return None if said is None or framework in said.unless else said.how


def detect(env: Mapping[str, str], platform: str | None = None, *, reduction_server: bool = False) -> ClusterInfo:
    """This process's `ClusterInfo` by the rule in the module docstring."""
    for layer in LAYERS:
        if layer.claims(env):
            return layer.read(env, reduction_server=reduction_server)
    if platform is not None:
        module = next((m for m in PLATFORMS if platform in m.FORCED_BY), None)
        if module is None:
            raise ClusterError("--platform", f"{platform!r} is not one of {', '.join(FORCEABLE)}")
        return module.read(env, reduction_server=reduction_server)
    claims = {m: set(m.claims(env)) for m in PLATFORMS}
    claims = {m: c for m, c in claims.items() if c}
    kept = [m for m, c in claims.items() if not any(c < other for other in claims.values())]
    if len(kept) > 1:
        described = " and ".join(f"{m.NAME} ({', '.join(sorted(claims[m]))})" for m in kept)
        raise ClusterError("environment", f"holds the variables of two platforms at once: {described}; pass "
                                          "--platform to say which one started this job")
    if kept:
        return kept[0].read(env, reduction_server=reduction_server)
    for variable in present(env, tuple(_STRAYS)):
        raise ClusterError(variable, _STRAYS[variable])
    return local_world()

