"""Signing and provenance in process (tier 1): cosign's key format against go-securesystemslib's own test vectors,
the payloads and tags cosign reads, the DSSE encoding against its spec's example, the builder id from each CI's
variables, the admission policies against the vendored Kyverno and policy-controller CRDs, and the refusals of
`trust`, `verify --key` and `--sign-key` (one line, exit 2, before anything is built or pushed).

The real consumers (cosign, skopeo, a registry) are tests/test_trust_consumers.py.
"""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import click
import k8sconsumers
import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT

from trainimg.cli.app import cli, main
from trainimg.cli.verify import verify_cmd
from trainimg.errors import UserInputError
from trainimg.options.trust import POLICY_KINDS
from trainimg.registry.references import PushedRef
from trainimg.registry.referrers import fallback_tag
from trainimg.trust import admission, attached, dsse, keys, provenance, simplesigning

# go-securesystemslib encrypted/encrypted_test.go (commit bcb0d9f5): TestDecrypt's envelope and the kdfVectors
# (Legacy, Standard, OWASP), all under "supersecret": TestDecrypt's plaintext is "reallyimportant", the vectors' (read
# with Unmarshal, which JSON-decodes it) the JSON of a []byte, the base64 string; TestUnsupportedKDFParameters' N=99.
VECTORS = {
    "TestDecrypt": '{"kdf":{"name":"scrypt","params":{"N":32768,"r":8,"p":1},"salt":"N9a7x5JFGbrtB2uBR81jPwp0eiLR4A7FV3mjVAQrg1g="},"cipher":{"name":"nacl/secretbox","nonce":"2h8HxMmgRfuYdpswZBQaU3xJ1nkA/5Ik"},"ciphertext":"SEW6sUh0jf2wfdjJGPNS9+bkk2uB+Cxamf32zR8XkQ=="}',  # noqa: E501
    "Legacy": '{"kdf":{"name":"scrypt","params":{"N":32768,"r":8,"p":1},"salt":"WO3mVvyTwJ9vwT5/Tk5OW5WPIBUofMjcpEfrLnfY4uA="},"cipher":{"name":"nacl/secretbox","nonce":"tCy7HcTFr4uxv4Nrg/DWmncuZ148U1MX"},"ciphertext":"08n43p5G5yviPEZpO7tPPF4aZQkWiWjkv4taFdhDBA0tamKH4nw="}',  # noqa: E501
    "Standard": '{"kdf":{"name":"scrypt","params":{"N":65536,"r":8,"p":1},"salt":"FhzPOt9/bJG4PTq6lQ6ecG6GzaOuOy/ynG5+yRiFlNs="},"cipher":{"name":"nacl/secretbox","nonce":"aw1ng1jHaDz/tQ7V2gR9O2+IGQ8xJEuE"},"ciphertext":"HycvuLZL4sYH0BrYTh4E/H20VtAW6u5zL5Pr+IBjYLYnCPzDkq8="}',  # noqa: E501
    "OWASP": '{"kdf":{"name":"scrypt","params":{"N":131072,"r":8,"p":1},"salt":"m38E3kouJTtiheLQN22NQ8DTito5hrjpUIskqcd375k="},"cipher":{"name":"nacl/secretbox","nonce":"Y6PM13yA+o44pE/W1ZBwczeGnTV/m9Zc"},"ciphertext":"6H8sqj1K6B6yDjtH5AQ6lbFigg/C2yDDJc4rYJ79w9aVPImFIPI="}',  # noqa: E501
}
UNSUPPORTED = '{"kdf":{"name":"scrypt","params":{"N":99,"r":99,"p":99},"salt":"cZFcQJdwPhPyhU1R4qkl0qVOIjZd4V/7LYYAavq166k="},"cipher":{"name":"nacl/secretbox","nonce":"7vhRS7j0hEPBWV05skAdgLj81AkGeE7U"},"ciphertext":"6WYU/YSXVbYzl/NzaeAzmjLyfFhOOjLc0d8/GFV0aBFdJvyCcXc="}'  # noqa: E501
DIGEST = "sha256:" + "ab" * 32
PASSWORD = "correct horse battery staple"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err.splitlines()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A key pair written by `trainimg trust keygen` (the passphrase from the environment)."""
    folder = tmp_path_factory.mktemp("keys")
    r = CliRunner().invoke(cli, ["trust", "keygen", "--output-key-prefix", str(folder / "release")],
                           env={"TRAINIMG_SIGN_PASSWORD": PASSWORD}, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert PASSWORD not in r.output
    return folder / "release.key", folder / "release.pub"


# -- the key format -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(VECTORS))
def test_go_securesystemslib_vectors_decrypt(name: str) -> None:
    plain = keys.decrypt(VECTORS[name].encode(), b"supersecret", "vector")
    assert plain == b"reallyimportant" if name == "TestDecrypt" else base64.b64decode(json.loads(plain)) == b"reallyimportant"
    with pytest.raises(UserInputError, match="does not open this key"):
        keys.decrypt(VECTORS[name].encode(), b"Supersecret", "vector")


def test_unsupported_scrypt_parameters_are_refused_as_go_refuses_them() -> None:
    with pytest.raises(UserInputError, match="unsupported key encryption"):
        keys.decrypt(UNSUPPORTED.encode(), b"supersecret", "vector")


def test_what_trainimg_encrypts_is_what_cosign_writes_and_opens_again() -> None:
    envelope = json.loads(keys.encrypt(b"payload", b"pw"))
    assert envelope["kdf"]["name"] == "scrypt" and envelope["kdf"]["params"] == {"N": 32768, "r": 8, "p": 1}
    assert envelope["cipher"]["name"] == "nacl/secretbox"
    assert len(base64.b64decode(envelope["kdf"]["salt"])) == 32 and len(base64.b64decode(envelope["cipher"]["nonce"])) == 24
    assert keys.decrypt(json.dumps(envelope).encode(), b"pw", "x") == b"payload"


def test_keygen_writes_a_cosign_pair_readable_with_either_variable(pair: tuple[Path, Path]) -> None:
    key_path, pub_path = pair
    text = key_path.read_text()
    assert text.startswith("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n") and PASSWORD not in text
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert pub_path.read_text().startswith("-----BEGIN PUBLIC KEY-----\n")
    for env in ({"TRAINIMG_SIGN_PASSWORD": PASSWORD}, {"COSIGN_PASSWORD": PASSWORD},
                {"TRAINIMG_SIGN_PASSWORD": PASSWORD, "COSIGN_PASSWORD": "other"}):
        key = keys.load_signing_key(key_path, env)
        assert key.public_pem() == pub_path.read_bytes()
        assert PASSWORD not in repr(key)
    # cosign before 2.0 labelled the same body ENCRYPTED COSIGN PRIVATE KEY: still read
    old = text.replace("SIGSTORE PRIVATE KEY", "COSIGN PRIVATE KEY").encode()
    assert keys.open_private(old, PASSWORD.encode(), "x").public_pem() == pub_path.read_bytes()


@pytest.mark.parametrize("env,says", [
    ({}, "set the key's passphrase in TRAINIMG_SIGN_PASSWORD or COSIGN_PASSWORD"),
    ({"TRAINIMG_SIGN_PASSWORD": "wrong"}, "does not open this key"),
    ({"COSIGN_PASSWORD": PASSWORD, "TRAINIMG_SIGN_PASSWORD": "wrong"}, "does not open this key"),  # ours first
])
def test_a_key_that_cannot_be_opened_is_one_line_naming_the_flag(pair: tuple[Path, Path], env: dict[str, str],
                                                                 says: str) -> None:
    with pytest.raises(UserInputError, match=says) as err:
        keys.load_signing_key(pair[0], env)
    assert err.value.lines() == [f"--sign-key: {err.value.message}"]


def test_keygen_never_overwrites_and_needs_a_passphrase(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = str(pair[0].with_suffix(""))
    before = pair[0].read_bytes()
    monkeypatch.setenv("TRAINIMG_SIGN_PASSWORD", PASSWORD)
    rc, _, err = run(capsys, "trust", "keygen", "--output-key-prefix", prefix)
    assert rc == 2 and len(err) == 1 and "exists: keygen never overwrites" in err[0], err
    assert pair[0].read_bytes() == before
    monkeypatch.setenv("TRAINIMG_SIGN_PASSWORD", "")
    rc, _, err = run(capsys, "trust", "keygen", "--output-key-prefix", prefix + "-new")
    assert rc == 2 and len(err) == 1 and "passphrase is empty" in err[0], err
    monkeypatch.delenv("TRAINIMG_SIGN_PASSWORD")
    monkeypatch.delenv("COSIGN_PASSWORD", raising=False)
    rc, _, err = run(capsys, "trust", "keygen", "--output-key-prefix", prefix + "-new")
    assert rc == 2 and len(err) == 1 and "TRAINIMG_SIGN_PASSWORD" in err[0], err
    assert not Path(prefix + "-new.key").exists()


# -- what cosign reads ----------------------------------------------------------------------------------------------

def test_the_payload_is_cosigns_simple_signing_with_the_repository_twice() -> None:
    doc = json.loads(simplesigning.payload("reg.example:5000/team/pytorch", DIGEST))
    assert doc == {"critical": {"identity": {"docker-reference": "reg.example:5000/team/pytorch"},
                                "image": {"docker-manifest-digest": DIGEST},
                                "type": "cosign container image signature"},
                   "optional": {"trainimg.repository": "reg.example:5000/team/pytorch"}}


@pytest.mark.parametrize("reference,repository", [
    ("reg.example:5000/team/pytorch", "reg.example:5000/team/pytorch"),
    ("reg.example:5000/team/pytorch:2.13-cpu", "reg.example:5000/team/pytorch"),
    (f"reg.example:5000/team/pytorch@{DIGEST}", "reg.example:5000/team/pytorch"),
    (f"reg.example/team/pytorch:2.13-cpu@{DIGEST}", "reg.example/team/pytorch"),
    ("localhost:5000/pytorch", "localhost:5000/pytorch"),
])
def test_a_signed_reference_is_compared_by_its_repository(reference: str, repository: str) -> None:
    assert simplesigning.repository_of(reference) == repository


@pytest.mark.parametrize("digest", [DIGEST, "sha256:" + "0" * 64, "sha512:" + "f" * 128])
def test_the_sig_and_att_tags_never_collide_with_the_referrers_fallback_tag(digest: str) -> None:
    tags = {fallback_tag(digest), attached.signature_tag(digest), attached.attestation_tag(digest)}
    assert len(tags) == 3
    hexpart = digest.split(":")[1]
    assert attached.signature_tag(digest) == f"{digest.split(':')[0]}-{hexpart}.sig"
    assert attached.attestation_tag(digest) == f"{digest.split(':')[0]}-{hexpart}.att"


def test_dsse_pae_is_the_specs_example_and_a_seal_opens_with_its_key_only(pair: tuple[Path, Path]) -> None:
    # secure-systems-lab/dsse protocol.md, "Test vectors": PAE("http://example.com/HelloWorld", "hello world")
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    key = keys.load_signing_key(pair[0], {"TRAINIMG_SIGN_PASSWORD": PASSWORD})
    envelope = dsse.seal(key, b'{"a":1}')
    assert dsse.open_envelope(envelope, key.public) == (dsse.IN_TOTO_PAYLOAD_TYPE, b'{"a":1}')
    other = keys.SigningKey(keys.ec.generate_private_key(keys.CURVE))
    assert dsse.open_envelope(envelope, other.public) == "1 signature(s), none by this key"
    tampered = json.loads(envelope)
    tampered["payloadType"] = "text/plain"  # the signature covers the type too
    assert dsse.open_envelope(json.dumps(tampered).encode(), key.public) == "1 signature(s), none by this key"


# -- provenance -----------------------------------------------------------------------------------------------------

GITHUB = {"GITHUB_ACTIONS": "true", "GITHUB_SERVER_URL": "https://github.com",
          "GITHUB_WORKFLOW_REF": "acme/ml/.github/workflows/images.yml@refs/heads/main",
          "GITHUB_REPOSITORY": "acme/ml", "GITHUB_RUN_ID": "42", "GITHUB_RUN_ATTEMPT": "1"}
GITLAB = {"GITLAB_CI": "true", "CI_SERVER_URL": "https://gitlab.example", "CI_PROJECT_PATH": "acme/ml",
          "CI_RUNNER_ID": "7", "CI_JOB_URL": "https://gitlab.example/acme/ml/-/jobs/9"}


@pytest.mark.parametrize("env,builder,invocation", [
    (GITHUB, "https://github.com/acme/ml/.github/workflows/images.yml@refs/heads/main",
     "https://github.com/acme/ml/actions/runs/42/attempts/1"),
    (GITLAB, "https://gitlab.example/acme/ml/-/runners/7", "https://gitlab.example/acme/ml/-/jobs/9"),
    ({k: v for k, v in GITHUB.items() if k != "GITHUB_WORKFLOW_REF"}, provenance.LOCAL_BUILDER, None),
    ({**GITLAB, "GITLAB_CI": "false"}, provenance.LOCAL_BUILDER, None),  # gitlab-ci-local says false
    ({}, provenance.LOCAL_BUILDER, None),
])
def test_the_builder_is_the_cis_only_where_its_variables_say_so(env: dict[str, str], builder: str,
                                                                invocation: str | None) -> None:
    assert provenance.builder(env) == (builder, invocation)
    doc = json.loads(provenance.statement("reg.example/team/x", DIGEST, provenance.Build({"variant": "x"}), env))
    run_details = doc["predicate"]["runDetails"]
    assert run_details["builder"]["id"] == builder
    assert run_details.get("metadata", {}).get("invocationId") == invocation
    assert "startedOn" not in run_details.get("metadata", {})  # not seen, not claimed


def test_the_statement_is_in_toto_v1_slsa_v1_and_reads_back() -> None:
    build = provenance.Build({"variant": "v", "recipe": "recipes/v.yaml"},
                             (provenance.Resource("source", {"gitCommit": "a" * 40}, uri="https://git.example/r"),),
                             (provenance.Resource("sbom.cdx.json", {"sha256": "c" * 64},
                                                  media_type="application/vnd.cyclonedx+json"),),
                             started="2026-11-27T10:00:00Z", finished="2026-11-27T10:05:00Z",
                             extra={"inputsKey": "sha256:" + "d" * 64})
    body = provenance.statement("reg.example/team/v", DIGEST, build, {})
    doc = json.loads(body)
    assert doc["_type"] == "https://in-toto.io/Statement/v1"
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    assert doc["subject"] == [{"name": "reg.example/team/v", "digest": {"sha256": "ab" * 32}}]
    definition = doc["predicate"]["buildDefinition"]
    assert definition["buildType"] == provenance.BUILD_TYPE
    assert definition["resolvedDependencies"][0] == {"name": "source", "digest": {"gitCommit": "a" * 40},
                                                     "uri": "https://git.example/r"}
    assert definition["internalParameters"] == {"inputsKey": "sha256:" + "d" * 64}
    assert doc["predicate"]["runDetails"]["metadata"] == {"startedOn": "2026-11-27T10:00:00Z",
                                                          "finishedOn": "2026-11-27T10:05:00Z"}
    claims = provenance.read_statement(body)
    assert isinstance(claims, provenance.Claims)
    assert claims.subjects == (("reg.example/team/v", DIGEST),) and claims.parameters["variant"] == "v"
    assert provenance.read_statement(b'{"_type": "x"}') == "a statement of type 'x', not https://in-toto.io/Statement/v1"


# -- the cluster's admission policies -------------------------------------------------------------------------------

IDENTITIES = (["reg.example.com/ml/trainimg/pytorch"],
              ["localhost:5000/trainimg/pytorch", "10.20.30.40:5005/team/trainimg/jax", "reg.example/x/y/z"])


@pytest.mark.parametrize("kind", POLICY_KINDS)
@pytest.mark.parametrize("identities", IDENTITIES, ids=["one", "three"])
def test_every_policy_passes_its_crd_and_covers_exactly_the_repositories(kind: str, identities: list[str],
                                                                         pair: tuple[Path, Path]) -> None:
    manifest = admission.WRITERS[kind]("trainimg-signed-images", identities, pair[1].read_text())
    assert k8sconsumers.check(manifest) == ["crd-schema", "cel:0", "kubernetes-validate:0"]
    assert set(_keys_in(manifest)) == {pair[1].read_text()}
    patterns = ([r for image in manifest["spec"]["rules"][0]["verifyImages"] for r in image["imageReferences"]]
                if kind == "kyverno" else [g["glob"] for g in manifest["spec"]["images"]])
    assert sorted(patterns) == sorted(f"{i}{sep}{'*' if kind == 'kyverno' else '**'}" for i in identities
                                      for sep in (":", "@"))


def _keys_in(manifest: dict[str, object]) -> list[str]:
    """Every public key a policy trusts, wherever it is written."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            found.extend(v for k, v in node.items() if k in ("publicKeys", "data") and isinstance(v, str))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(manifest)
    return found


@pytest.mark.parametrize("kind", POLICY_KINDS)
@pytest.mark.parametrize("damage", ["unknown field", "bad enum"])
def test_the_crd_check_refuses_a_damaged_policy(kind: str, damage: str, pair: tuple[Path, Path]) -> None:
    manifest = admission.WRITERS[kind]("p", IDENTITIES[0], pair[1].read_text())
    if kind == "kyverno":
        image = manifest["spec"]["rules"][0]["verifyImages"][0]
        image.update({"imageReference": ["x"]} if damage == "unknown field" else {"failureAction": "Deny"})
    else:
        authority = manifest["spec"]["authorities"][0]
        authority.update({"keys": {}} if damage == "unknown field" else {"key": {"data": 3}})
    with pytest.raises(k8sconsumers.Refused, match="crd-schema"):
        k8sconsumers.check(manifest)


def test_trust_policy_writes_the_variants_repositories(pair: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "policy.yaml"
    r = CliRunner().invoke(cli, ["--recipes", str(ROOT / "recipes"), "trust", "policy", "kyverno", "pytorch-*",
                                 "--registry", "reg.example.com/ml", "--key", str(pair[1]), "--output", str(out)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    (manifest,) = yaml.safe_load_all(out.read_text())
    assert k8sconsumers.check(manifest)[0] == "crd-schema"
    refs = [image["imageReferences"][0] for image in manifest["spec"]["rules"][0]["verifyImages"]]
    assert refs == ["reg.example.com/ml/trainimg/pytorch:*"]  # every PyTorch variant shares one repository


# -- refusals: one line, exit 2, nothing done -----------------------------------------------------------------------

@pytest.mark.parametrize("argv,where", [
    (("trust", "policy", "kyverno", "--registry", "https://r.example", "--key", "{pub}"), "--registry"),
    (("trust", "policy", "kyverno", "--registry", "r.example", "--key", "{key}"), "--key"),
    (("trust", "policy", "kyverno", "--registry", "r.example", "--key", "{pub}", "--name", "Not_A_Name"), "--name"),
    (("trust", "policy", "kyverno", "--registry", "r.example", "--key", "/nonexistent.pub"), "--key"),
    (("verify", "trainimg/pytorch:2.13-cpu", "--key", "{pub}"), "REF"),  # no registry host
    (("verify", "r.example/Bad/Name:1", "--key", "{pub}"), "REF"),
    (("verify", "r.example/team/x:1", "--key", "{key}"), "--key"),
    (("verify", "pytorch-2.13.0-cpu-py3.11"), "trainimg verify"),  # neither --registry nor --key
    (("push", "pytorch-2.13.0-cpu-py3.11", "--registry", "r.example", "--sign-key", "{pub}"), "--sign-key"),
    (("push", "pytorch-2.13.0-cpu-py3.11", "--registry", "r.example", "--sign-key", "/nonexistent.key"),
     "--sign-key"),
    (("release", "pytorch-2.13.0-cpu-py3.11", "--registry", "r.example", "--skip-audit", "--sign-key", "{pub}"),
     "--sign-key"),
    (("promote", "{folder}", "--registry", "r.example", "--sign-key", "{pub}"), "--sign-key"),
])
def test_bad_trust_input_is_one_line_and_exit_2_before_anything_runs(
        argv: tuple[str, ...], where: str, pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/trainimg-trust.sock")  # reaching the engine would fail
    monkeypatch.setenv("TRAINIMG_SIGN_PASSWORD", PASSWORD)
    filled = [a.format(key=pair[0], pub=pair[1], folder=pair[0].parent) for a in argv]
    rc, out, err = run(capsys, "--recipes", str(ROOT / "recipes"), *filled)
    assert rc == 2 and len(err) == 1 and where in err[0], (rc, err)
    assert PASSWORD not in out + "".join(err)


# What a signature check needs: the public key and the registry's login, nothing a rebuild does. Written here, not
# imported: a product that took one more option for --key's (and dropped it) would take it out of the cases below.
SIGNATURE_OPTIONS = ("key", "username", "password_stdin")
# Every other option of `verify`, with a value of its kind (generated from the command).
REBUILD_FLAGS = tuple((o.opts[0], *(() if o.is_flag else (
    o.type.choices[0] if isinstance(o.type, click.Choice) else "x",))) for o in verify_cmd.params
    if isinstance(o, click.Option) and o.name not in SIGNATURE_OPTIONS)


@pytest.mark.parametrize("flag", REBUILD_FLAGS, ids=[f[0] for f in REBUILD_FLAGS])
def test_verify_key_refuses_every_rebuild_flag_never_dropping_one(flag: tuple[str, ...], pair: tuple[Path, Path],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "verify", "r.example/team/x:1", "--key", str(pair[1]), *flag)
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"{flag[0]}: for the rebuild"), err
    assert len(REBUILD_FLAGS) >= 7  # --registry and the build flags


@pytest.mark.parametrize("text,identity,reference", [
    ("reg.example/team/x:1", "reg.example/team/x", "1"),
    ("127.0.0.1:5000/team/x", "127.0.0.1:5000/team/x", "latest"),
    (f"localhost:05000/x@{DIGEST}", "localhost:5000/x", DIGEST),
    (f"reg.example/x:2.13-cpu@{DIGEST}", "reg.example/x", DIGEST),  # the digest names it, as the engine reads it
])
def test_a_pushed_reference_parses_to_its_repository_and_what_names_it(text: str, identity: str,
                                                                        reference: str) -> None:
    ref = PushedRef.parse(text, "REF")
    assert (ref.identity, ref.reference) == (identity, reference)


def test_no_flag_takes_a_passphrase_only_the_environment_does() -> None:
    names = {opt for path in (("push",), ("release",), ("promote",), ("trust", "keygen"), ("trust", "policy"),
                              ("verify",), ("ci", "github")) for opt in _options(*path)}
    assert {"--sign-key", "--key", "--password-stdin", "--sign-password-var"} & names
    assert not [n for n in names if "pass" in n and n not in ("--password-stdin", "--password-var",
                                                              "--sign-password-var")], names


def _options(*path: str) -> list[str]:
    command = cli
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return [opt for param in command.params for opt in getattr(param, "opts", ())]
