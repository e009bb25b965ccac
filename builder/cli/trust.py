"""Verbs for images a cluster can trust: `trust keygen` (a key pair in cosign's format) and `trust policy` (the
admission policy a cluster checks the signatures with); `--sign-key` on release, push and promote signs, and
`verify REF --key` checks (cli/verify.py). The formats are library code (`trust/`); this module reads flags."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UserInputError
from ..options import default
from ..options.trust import POLICY_KINDS, KeygenOptions, PolicyOptions
from .ci import write_text
from .context import Ctx, pass_ctx
from .group import TrainimgGroup


@click.group(cls=TrainimgGroup)
def trust() -> None:
    """Signing keys, and the admission policies that make a cluster run only the images signed with them.

    Reaches nothing: no engine, no registry.

    \b
    Examples:
      trainimg trust keygen --output-key-prefix release
      trainimg trust policy kyverno --registry ghcr.io/team --key release.pub --output policy.yaml
    """


@trust.command("keygen")
@click.option("--output-key-prefix", "prefix", type=click.Path(path_type=Path),
              default=default(KeygenOptions, "prefix"), show_default=True, metavar="PREFIX",
              help="Write PREFIX.key (encrypted, mode 0600) and PREFIX.pub; an existing file is never overwritten.")
@pass_ctx
def keygen(c: Ctx, prefix: Path) -> None:
    """Make a signing key pair in cosign's format (ECDSA P-256; the private key encrypted with the passphrase in
    TRAINIMG_SIGN_PASSWORD, else COSIGN_PASSWORD). `cosign generate-key-pair` keys work the same.

    Writes two files; reaches nothing.

    \b
    Examples:
      trainimg trust keygen
      trainimg trust keygen --output-key-prefix keys/release
    """
    from ..trust.keys import passphrase, write_pair

    opts = KeygenOptions(prefix=prefix)
    c.checked()
    password = passphrase(c.env, "trainimg trust keygen")
    if not password:
        raise UserInputError("the passphrase is empty: a key on disk needs one (TRAINIMG_SIGN_PASSWORD)")
    key_path, pub_path = write_pair(opts.prefix, password)
    click.echo(f"wrote {key_path} (private, encrypted) and {pub_path} (public: give it to `verify --key` and "
               "`trust policy --key`)")


@trust.command("policy")
@click.argument("kind", type=click.Choice(POLICY_KINDS))
@click.argument("variants", nargs=-1)
@click.option("--registry", required=True, metavar="HOST[:PORT][/PREFIX]",
              help="Where the images are pushed: the policy covers each variant's repository there.")
@click.option("--key", required=True, type=click.Path(path_type=Path), metavar="PUB",
              help="The public key the images are signed with (the .pub of the pair).")
@click.option("--name", default=default(PolicyOptions, "name"), show_default=True,
              help="The policy object's name (a DNS label).")
@click.option("--output", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Write the policy here (default: stdout).")
@pass_ctx
def policy(c: Ctx, kind: str, variants: tuple[str, ...], registry: str, key: Path, name: str,
           output: Path | None) -> None:
    """Write the admission policy that makes a cluster run the variants' images only when signed by KEY with
    their SLSA provenance: a Kyverno ClusterPolicy or a sigstore policy-controller ClusterImagePolicy.

    VARIANTS (names or globs; default every variant of the recipes) give the repositories it covers, every tag and
    digest in them. Reads the recipes and the key; reaches nothing.

    \b
    Examples:
      trainimg trust policy kyverno --registry ghcr.io/team --key release.pub | kubectl apply -f -
      trainimg trust policy policy-controller 'pytorch-*' --registry ghcr.io/team --key release.pub
    """
    from ..jobs.kubernetes import dns1123_label, dump_yaml
    from ..registry.references import RegistryTarget
    from ..trust.admission import WRITERS
    from ..trust.keys import load_public_key, public_pem

    opts = PolicyOptions(kind=kind, registry=registry, key=key, variants=variants, name=dns1123_label(name, "--name"))
    target = RegistryTarget.parse(opts.registry)
    public = public_pem(load_public_key(opts.key)).decode("ascii")
    chosen = c.recipes().select(list(opts.variants))
    identities = sorted({f"{target.host}/{target.repository(v.repository)}" for v in chosen})
    text = dump_yaml([WRITERS[opts.kind](opts.name, identities, public)])
    c.checked()
    write_text(text, output)
