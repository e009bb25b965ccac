"""Registry side: target parsing, credentials, pushing to a real registry, faults on the wire, the local registry.

Everything runs against the real engine and a real registry (tests/registry, through conftest_registry.py); the
fault proxy sits on 127.0.0.1 so the engine still treats it as a plain-http-allowed registry.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from conftest_registry import RegistryLogin
from faultproxy import FaultProxy
from trainimg.engine.docker import DockerEngine
from trainimg.errors import RegistryError, UserInputError
from trainimg.options import AUTO_UPLOAD, CLIENT_UPLOAD, DEFAULT_UPLOAD, ENGINE_UPLOAD
from trainimg.registry.credentials import resolve_credentials
from trainimg.registry.localregistry import LocalRegistry
from trainimg.registry.registryapi import RegistryAPI, sha256_digest
from trainimg.publish.push import (
    PushResult,
    RegistryTarget,
    push,
)
from registryread import missing_blobs, remote_digest, remote_tags

BLOB_OR_MANIFEST = r"^(HEAD|GET|PUT|POST|PATCH) /v2/.+/(manifests|blobs)/"
# The two ways layers travel (`--upload auto` picks one of them: tests/test_layers.py).
TRANSPORTS = (ENGINE_UPLOAD, CLIENT_UPLOAD)
BLOB_UPLOAD = r"^(PATCH|PUT) /v2/.+/blobs/uploads/"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _creds(registry: RegistryLogin, password: str | None = None) -> dict[str, str]:
    return {"username": registry.username, "password": password or registry.password}


# -- targets ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "host", "prefix", "ref"),
    [
        ("localhost:5000", "localhost:5000", "", "localhost:5000/trainimg/pytorch:2.13.0-cpu-py3.11"),
        ("registry.example.com/team/ml", "registry.example.com", "team/ml",
         "registry.example.com/team/ml/trainimg/pytorch:2.13.0-cpu-py3.11"),
        ("127.0.0.1:5000/a.b/c__d/e-f", "127.0.0.1:5000", "a.b/c__d/e-f",
         "127.0.0.1:5000/a.b/c__d/e-f/trainimg/pytorch:2.13.0-cpu-py3.11"),
        ("localhost", "localhost", "", "localhost/trainimg/pytorch:2.13.0-cpu-py3.11"),
        ("Reg-1.Example.com:443", "Reg-1.Example.com:443", "", "Reg-1.Example.com:443/trainimg/pytorch:2.13.0-cpu-py3.11"),
    ],
)
def test_parse_valid_targets(text: str, host: str, prefix: str, ref: str) -> None:
    target = RegistryTarget.parse(text)
    assert (target.host, target.prefix) == (host, prefix)
    assert target.ref("trainimg/pytorch:2.13.0-cpu-py3.11") == ref


def test_loopback_targets_are_plain_http() -> None:
    assert RegistryTarget.parse("localhost:5000").scheme == "http"
    assert RegistryTarget.parse("127.0.0.1:5000").scheme == "http"
    assert RegistryTarget.parse("registry.example.com").scheme == "https"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "https://registry.example.com",
        "localhost:0",
        "localhost:65536",
        "localhost:port",
        "localhost:",
        "-bad.example.com",
        "bad-.example.com",
        "under_score.example.com",
        "registry.example.com/Team",
        "registry.example.com/team//ml",
        "registry.example.com/team/",
        "registry.example.com/team/-ml",
        "registry.example.com/team/ml.",
        "registry",  # no dot, no port: docker would read it as a Docker Hub user
        "reg istry.example.com",
        "registry..example.com",
    ],
)
def test_parse_invalid_targets(text: str) -> None:
    with pytest.raises(UserInputError, match="--registry") as info:
        RegistryTarget.parse(text)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("tag", ["Trainimg/pytorch:1", "trainimg/pytorch:.bad", "trainimg//x:1", ":1", "a:" + "x" * 129])
def test_bad_image_tags(tag: str) -> None:
    with pytest.raises(UserInputError):
        RegistryTarget.parse("localhost:5000").ref(tag)


# -- credentials ----------------------------------------------------------------------------------------------


def test_explicit_credentials_win(tmp_path: Path) -> None:
    target = RegistryTarget.parse("localhost:5000")
    (tmp_path / "config.json").write_text(json.dumps(
        {"auths": {"localhost:5000": {"auth": base64.b64encode(b"stored:storedpw").decode()}}}))
    creds = resolve_credentials(target, "alice", "s3cret", docker_config_dir=str(tmp_path))
    assert creds is not None and (creds["username"], creds["password"]) == ("alice", "s3cret")


def test_credentials_from_docker_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(
        {"auths": {"localhost:5000": {"auth": base64.b64encode(b"stored:storedpw").decode()}}}))
    creds = resolve_credentials(RegistryTarget.parse("localhost:5000"), None, None, docker_config_dir=str(tmp_path))
    assert creds is not None and (creds["username"], creds["password"]) == ("stored", "storedpw")
    assert resolve_credentials(RegistryTarget.parse("other.example.com"), None, None,
                               docker_config_dir=str(tmp_path)) is None


def test_half_credentials_are_user_errors(tmp_path: Path) -> None:
    target = RegistryTarget.parse("localhost:5000")
    with pytest.raises(UserInputError, match="TRAINIMG_REGISTRY_PASSWORD"):
        resolve_credentials(target, "alice", None, docker_config_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="--username"):
        resolve_credentials(target, None, "s3cret", docker_config_dir=str(tmp_path))


# -- pushing to the real registry -----------------------------------------------------------------------------


@pytest.mark.parametrize("upload", TRANSPORTS)
def test_push_then_push_again(registry_client: docker.DockerClient, registry: RegistryLogin,
                              registry_image: Callable[[], str], caplog: pytest.LogCaptureFixture,
                              capsys: pytest.CaptureFixture[str], upload: str) -> None:
    caplog.set_level(logging.DEBUG)
    image_id = registry_image()
    target = RegistryTarget.parse(f"{registry.host}/team")
    gated: list[str] = []
    lines: list[str] = []
    first = push(DockerEngine(registry_client), image_id, target, "trainimg/pushtest:v1", credentials=_creds(registry),
                 upload=upload, gate=gated.append, on_progress=lines.append)
    assert gated == [image_id]
    assert first.ref == f"{registry.host}/team/trainimg/pushtest:v1"
    assert first.digest == remote_digest(target, "trainimg/pushtest:v1", _creds(registry))
    assert first.bytes_uploaded > 1_000_000 and first.attempts == 1
    assert "v1" in remote_tags(target, "trainimg/pushtest", _creds(registry))
    assert missing_blobs(target, "trainimg/pushtest:v1", _creds(registry)) == []

    again = push(DockerEngine(registry_client), image_id, target, "trainimg/pushtest:v1", credentials=_creds(registry),
                 upload=upload)
    assert again == PushResult(first.ref, first.digest, 0, 1)
    assert registry.password not in caplog.text + capsys.readouterr().out + "\n".join(lines)


def test_auto_pushes_a_first_image_by_the_engine_and_a_repush_by_the_client(
        registry_client: docker.DockerClient, registry: RegistryLogin, registry_image: Callable[[], str]) -> None:
    """`--upload auto`: a repository that holds nothing of the image gets the engine's streamed push; the same image
    again (an empty CI runner re-releasing), or a team's image whose layers a sibling repository holds, goes through
    the client, which sends nothing the registry has. (The default is the client: one digest for one input.)"""
    assert DEFAULT_UPLOAD == CLIENT_UPLOAD
    image_id, target = registry_image(), RegistryTarget.parse(registry.host)
    run = f"auto{time.monotonic_ns() % 10**8}"
    first = push(DockerEngine(registry_client), image_id, target, f"trainimg/{run}:v1", credentials=_creds(registry),
                 upload=AUTO_UPLOAD)
    assert first.upload == ENGINE_UPLOAD and first.bytes_uploaded > 1_000_000
    again = push(DockerEngine(registry_client), image_id, target, f"trainimg/{run}:v1", credentials=_creds(registry),
                 upload=AUTO_UPLOAD)
    assert (again.upload, again.bytes_uploaded) == (CLIENT_UPLOAD, 0)
    team = push(DockerEngine(registry_client), image_id, target, f"team/{run}:v1", credentials=_creds(registry),
                siblings=[f"trainimg/{run}:v1"], upload=AUTO_UPLOAD)
    assert (team.upload, team.bytes_uploaded) == (CLIENT_UPLOAD, 0)
    assert missing_blobs(target, f"team/{run}:v1", _creds(registry)) == []


def test_gate_stops_the_push_before_anything_is_sent(registry_client: docker.DockerClient, registry: RegistryLogin,
                                                    registry_image: Callable[[], str], fault_proxy: FaultProxy) -> None:
    def refuse(image_id: str) -> None:
        raise RegistryError(f"{image_id} has no passing conformance record")

    fault_proxy.fail(r".*", status=500, times=1000)  # every request that reaches the registry is counted
    target = RegistryTarget.parse(fault_proxy.address)
    with pytest.raises(RegistryError, match="conformance"):
        push(DockerEngine(registry_client), registry_image(), target, "trainimg/gated:v1", credentials=_creds(registry), gate=refuse)
    assert fault_proxy.fired("error") == 0  # not one request was sent
    assert registry_client.images.list(name=f"{fault_proxy.address}/trainimg/gated") == []  # nor a name given
    assert remote_tags(RegistryTarget.parse(registry.host), "trainimg/gated", _creds(registry)) == []


def test_wrong_password_is_an_auth_error_at_once(registry_client: docker.DockerClient, registry: RegistryLogin,
                                                 registry_image: Callable[[], str], caplog: pytest.LogCaptureFixture
                                                 ) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-" + registry.password
    with pytest.raises(RegistryError) as info:
        push(DockerEngine(registry_client), registry_image(), RegistryTarget.parse(registry.host), "trainimg/auth:v1",
             credentials=_creds(registry, wrong), backoff=0.5)
    assert "retrying" not in caplog.text, caplog.text  # not retried: a retry logs "...; retrying in 0.5 s"
    assert str(info.value) == (f"registry {registry.host} rejected the credentials for {registry.username}: check "
                               f"the username and TRAINIMG_REGISTRY_PASSWORD or run docker login {registry.host}")
    assert info.value.exit_code == 1
    assert wrong not in caplog.text and registry.password not in caplog.text


def test_no_credentials_asks_for_them(registry_client: docker.DockerClient, registry: RegistryLogin,
                                      registry_image: Callable[[], str]) -> None:
    with pytest.raises(RegistryError, match=rf"registry {registry.host} asks for credentials: run docker login"):
        push(DockerEngine(registry_client), registry_image(), RegistryTarget.parse(registry.host), "trainimg/auth:v1",
             credentials=None, backoff=5.0)


def test_unreachable_registry(registry_client: docker.DockerClient, registry_image: Callable[[], str]) -> None:
    port = _free_port()  # bound and released: nothing listens there
    # Retried (a refused port may be a registry restarting), and bounded: the default 4 retries, then one line.
    with pytest.raises(RegistryError, match=rf"^registry 127.0.0.1:{port} is unreachable \(connection refused\).* "
                                            r"\(gave up after 5 attempts\)$"):
        push(DockerEngine(registry_client), registry_image(), RegistryTarget.parse(f"127.0.0.1:{port}"), "trainimg/x:v1",
             credentials=None, backoff=0.2)


def test_unknown_host(registry_client: docker.DockerClient, registry_image: Callable[[], str]) -> None:
    with pytest.raises(RegistryError, match=r"registry host no-such-host.invalid could not be resolved \(DNS\)"):
        push(DockerEngine(registry_client), registry_image(), RegistryTarget.parse("no-such-host.invalid:5000"), "trainimg/x:v1",
             credentials=None, backoff=5.0)


# -- faults on the wire -------------------------------------------------------------------------------------------


def _assert_registry_consistent(registry: RegistryLogin, repo: str) -> None:
    """Every tag the registry lists must have all its blobs: a half-pushed image must never be visible."""
    target = RegistryTarget.parse(registry.host)
    for tag in remote_tags(target, repo, _creds(registry)):
        assert missing_blobs(target, f"{repo}:{tag}", _creds(registry)) == [], tag


@pytest.mark.parametrize("upload", TRANSPORTS)
def test_push_retries_through_503s(registry_client: docker.DockerClient, registry: RegistryLogin,
                                   registry_image: Callable[[], str], fault_proxy: FaultProxy,
                                   caplog: pytest.LogCaptureFixture, upload: str) -> None:
    caplog.set_level(logging.DEBUG)
    fault_proxy.fail(BLOB_OR_MANIFEST, status=503, times=2)  # the engine retries these layers itself; the client not
    fault_proxy.fail(r"^PUT /v2/.+/manifests/", status=500, times=1)  # neither retries this: push() must
    target = RegistryTarget.parse(fault_proxy.address)
    result = push(DockerEngine(registry_client), registry_image(), target, "trainimg/flaky:v1", credentials=_creds(registry),
                  upload=upload, backoff=0.5)
    assert fault_proxy.fired("error") == 3 and result.attempts == (2 if upload == ENGINE_UPLOAD else 4)
    assert result.digest == remote_digest(RegistryTarget.parse(registry.host), "trainimg/flaky:v1", _creds(registry))
    assert registry.password not in caplog.text


@pytest.mark.parametrize("upload", TRANSPORTS)
def test_connection_dropped_mid_blob(registry_client: docker.DockerClient, registry: RegistryLogin,
                                     registry_image: Callable[[], str], fault_proxy: FaultProxy, upload: str) -> None:
    """A blob upload cut after 256 KiB is a transient fault push() promises to retry: the push succeeds, the tag
    names the manifest it reported, and every blob of it is in the registry with the content its digest names."""
    fault_proxy.drop(BLOB_UPLOAD, after_bytes=256 * 1024, times=1)
    target = RegistryTarget.parse(fault_proxy.address)
    result = push(DockerEngine(registry_client), registry_image(), target, "trainimg/dropped:v1",
                  credentials=_creds(registry), upload=upload, backoff=0.5)
    # The engine retries a layer upload itself (one attempt of push()'s); trainimg's client retries the attempt.
    assert (fault_proxy.fired("drop"), result.attempts) == (1, 1 if upload == ENGINE_UPLOAD else 2), \
        (fault_proxy.events, result)
    assert result.digest == remote_digest(target, "trainimg/dropped:v1", _creds(registry))
    direct = RegistryAPI(RegistryTarget.parse(registry.host), _creds(registry))  # not through the proxy
    stored = direct.manifest_json("trainimg/dropped", result.digest)
    assert stored is not None and sha256_digest(stored[0]) == result.digest
    manifest = json.loads(stored[0])
    for blob in [manifest["config"], *manifest["layers"]]:
        content = direct.blob("trainimg/dropped", blob["digest"])
        assert (len(content), sha256_digest(content)) == (blob["size"], blob["digest"]), blob
    _assert_registry_consistent(registry, "trainimg/dropped")


@pytest.mark.parametrize("upload", TRANSPORTS)
def test_stalled_registry_is_bounded(registry_client: docker.DockerClient, registry: RegistryLogin,
                                     registry_image: Callable[[], str], fault_proxy: FaultProxy, upload: str) -> None:
    fault_proxy.stall(r"^GET /v2/$", seconds=90, times=1)
    target = RegistryTarget.parse(fault_proxy.address)
    result = push(DockerEngine(registry_client), registry_image(), target, "trainimg/stalled:v1", credentials=_creds(registry),
                  upload=upload, backoff=0.5, timeout=3.0)
    assert fault_proxy.fired("stall") == 1 and result.attempts == 2
    # the client's 3 s timeout ended the stall (it hung up), not the proxy's 90 s
    assert fault_proxy.stall_outcomes() == ["ended by the client"], fault_proxy.events
    _assert_registry_consistent(registry, "trainimg/stalled")


def test_stall_every_time_gives_a_clear_error(registry_client: docker.DockerClient, registry: RegistryLogin,
                                              registry_image: Callable[[], str], fault_proxy: FaultProxy) -> None:
    fault_proxy.stall(r"^GET /v2/$", seconds=90, times=10)
    with pytest.raises(RegistryError, match=r"did not answer within 2 s.*gave up after 2 attempts"):
        push(DockerEngine(registry_client), registry_image(), RegistryTarget.parse(fault_proxy.address), "trainimg/stalled:v2",
             credentials=_creds(registry), retries=1, backoff=0.2, timeout=2.0)
    # both stalls ended by the client's 2 s timeout (it hung up), neither waited out
    assert fault_proxy.fired("stall") == 2 and fault_proxy.stall_outcomes() == ["ended by the client"] * 2, \
        fault_proxy.events


# -- the local registry -------------------------------------------------------------------------------------------


def test_local_registry_start_push_stop(tmp_path: Path, registry_client: docker.DockerClient,
                                        registry_image: Callable[[], str]) -> None:
    local = LocalRegistry(tmp_path / "state", port=_free_port())
    info = local.start()
    try:
        assert info.host == f"localhost:{local.port}" and info.username == "trainimg"
        assert (local.password_path.stat().st_mode & 0o777) == 0o600
        again = local.start()
        assert again.password == info.password
        status = local.status()
        assert status.running and status.backend == "binary"
        assert info.password not in repr(info)

        target = RegistryTarget.parse(info.host)
        creds = {"username": info.username, "password": info.password}
        result = push(DockerEngine(registry_client), registry_image(), target, "trainimg/local:v1", credentials=creds)
        assert result.digest == remote_digest(target, "trainimg/local:v1", creds)
    finally:
        local.stop()
    assert not local.status().running
    assert not local.pid_path.exists() and (local.data_dir / "docker").is_dir()
