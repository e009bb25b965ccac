"""Every platform trainimg's images run on, one module each, and the one rule that picks the module for an env.

Each name in the contract's `contract.PLATFORMS` is a module here of the same name (``platforms/<name>.py``),
imported by name: nothing else lists them, so adding a platform is adding its module, its name to the contract,
its `jobs/` module (where ``trainimg spec`` writes its job) and its tests.

Each platform module has ``NAME`` (its contract name), ``claims(env)`` (the variables of its signature present in
`env`, and the path of a file it is told by where a platform writes one, SageMaker's resource config; empty when
it is not there) and ``read(env, reduction_server=...)`` -> `ClusterInfo` (a missing or wrong variable is a
`ClusterError` naming it), or ``READER``: the module that reads a family of platforms' env (`tfconfig`: one
parser for CLUSTER_SPEC/TF_CONFIG, asked once). For the host's replay of it (`topology.replica_specs`):
``replicas(job)`` (its replicas as the platform lays them out), ``PORT`` (its default port), ``STARTS`` (who
starts a node's processes, `starts`), ``NO_TF_CONFIG`` (why it refuses TensorFlow, or None) and
``NOT_EMULATED`` (why selftest cannot stand in for it on 127.0.0.1, or None). Optional, read through `trait`
with a default: ``SIDE_ROLES``, ``SAMPLES`` (what the probe parses), ``STRAYS``, ``elsewhere(env)`` (`env`
pointed away from a file it is told by) and the few one platform alone has (`topology` reads them).

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

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ..contract import PLATFORMS as NAMES
from ..world import ClusterError, ClusterInfo, local_world, present
from .starts import Starts
from . import envworld, launched, torchrun


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


#: contract name -> its module, in the contract's order (the order help texts list them).
BY_NAME: dict[str, ModuleType] = {name: _module(name) for name in NAMES}
#: The platforms' modules, then ``env://``'s (a world no platform describes, `envworld`).
PLATFORMS: tuple[ModuleType, ...] = (*BY_NAME.values(), envworld)
#: The modules that read an env, each once, in detection order: a family's shared ``READER`` stands for each of its
#: platforms.
READERS: tuple[ModuleType, ...] = tuple(dict.fromkeys(getattr(m, "READER", m) for m in PLATFORMS))
LAYERS: tuple[ModuleType, ...] = (torchrun, launched)
#: Every ``--platform`` value `detect` takes, in the order help texts list them.
FORCEABLE: tuple[str, ...] = tuple(module.NAME for module in PLATFORMS)
#: The platforms that run TensorFlow: a TF_CONFIG of their own, or one made from the hosts they list (``NO_TF_CONFIG``
#: None).
RUNS_TENSORFLOW: tuple[str, ...] = tuple(name for name, module in BY_NAME.items() if not module.NO_TF_CONFIG)
#: ``--platform`` value -> who starts a node's processes there (each module's ``STARTS``; None: the launcher).
STARTS: dict[str, Starts | None] = {module.NAME: module.STARTS for module in PLATFORMS}
#: Every variable by which the runtime recognises a platform or a launcher layer (each reader's and layer's
#: ``RECOGNISED``): an emulation (selftest) removes them from what it inherits, so the emulated platform's are the
#: only ones.
VARIABLES = frozenset(variable for module in (*READERS, *LAYERS) for variable in module.RECOGNISED)


def trait(name: str, attribute: str, default: Any = None) -> Any:
    """Platform `name`'s optional `attribute`, `default` where its module has none: how the code around the
    platforms asks what is one platform's own without naming it."""
    return getattr(BY_NAME[name], attribute, default)


def having(attribute: str) -> dict[str, Any]:
    """platform name -> its module's `attribute`, for the platforms whose module has it (truthy)."""
    return {name: value for name, module in BY_NAME.items() if (value := getattr(module, attribute, None))}


def samples() -> list[tuple[str, dict[str, str], dict[str, object]]]:
    """(label, env, expected facts) for each platform's env shape that its module gives (``SAMPLES``): what the
    probe's cluster-parsing check parses in the image."""
    return [sample for module in PLATFORMS for sample in getattr(module, "SAMPLES", ())]


# Variables that only a platform sets but that describe no world alone -> what would, by each module that knows
# (its ``STRAYS``).
def _strays() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for module in READERS:
        for variable, why in getattr(module, "STRAYS", {}).items():
            found.setdefault(variable, []).append(why)
    return found


_STRAYS = _strays()


def elsewhere(env: Mapping[str, str]) -> dict[str, str]:
    """`env` read as if no platform's file lay on this machine: each module that reads a file it is told by gives
    ``elsewhere(env)``, pointing it away, so a sample of another platform's variables parsed inside such a
    platform's container (the probe's) does not meet the container's own file."""
    out = dict(env)
    for module in READERS:
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
        module = next((m for m in PLATFORMS if m.NAME == platform), None)
        if module is None:
            raise ClusterError("--platform", f"{platform!r} is not one of {', '.join(FORCEABLE)}")
        return getattr(module, "READER", module).read(env, reduction_server=reduction_server)
    claims = {m: set(m.claims(env)) for m in READERS}
    claims = {m: c for m, c in claims.items() if c}
    kept = [m for m, c in claims.items() if not any(c < other for other in claims.values())]
    if len(kept) > 1:
        described = " and ".join(f"{m.NAME} ({', '.join(sorted(claims[m]))})" for m in kept)
        raise ClusterError("environment", f"holds the variables of two platforms at once: {described}; pass "
                                          "--platform to say which one started this job")
    if kept:
        return kept[0].read(env, reduction_server=reduction_server)
    for variable in present(env, tuple(_STRAYS)):
        raise ClusterError(variable, "only a platform sets it, but nothing gives the world: "
                                     + "; ".join(_STRAYS[variable]))
    return local_world()

