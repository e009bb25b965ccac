"""The options of `trainimg trust`: the key pair `keygen` writes, the admission policy `policy` writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError


@dataclass(frozen=True, kw_only=True)
class KeygenOptions:
    """`trainimg trust keygen`: the key pair's files, `<prefix>.key` and `<prefix>.pub` (cosign's names)."""

    prefix: Path = Path("cosign")


POLICY_KINDS = ("kyverno", "policy-controller")  # `trainimg trust policy KIND`: the admission controllers written for


@dataclass(frozen=True, kw_only=True)
class PolicyOptions:
    """`trainimg trust policy KIND`: which controller, the registry and variants whose repositories it covers, the
    public key it trusts, the policy's name (a DNS label: `jobs.kubernetes` checks it)."""

    kind: str
    registry: str
    key: Path
    variants: tuple[str, ...] = ()  # names or globs; none: every variant of the recipes
    name: str = "trainimg-signed-images"

    def __post_init__(self) -> None:
        object.__setattr__(self, "variants", tuple(self.variants))
        if self.kind not in POLICY_KINDS:
            raise UserInputError(f"{self.kind!r} is not one of {', '.join(POLICY_KINDS)}")
