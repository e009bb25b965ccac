"""Fixtures for the registry tests: a real registry in docker-compose, a fault proxy in front of it, test images.

Import them from tests/conftest.py with `from conftest_registry import *  # noqa: F401,F403`.

The registry is built from tests/registry/Dockerfile (Debian's docker-registry on local/debian:bookworm), takes a
per-session random password through a mounted htpasswd file, and is published on 127.0.0.1 only, which the engine
treats as plain-http-allowed. `docker-compose down -v --rmi local` removes its container, network and image.
"""

from __future__ import annotations

import io
import os
import secrets
import shlex
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import docker
import pytest
import requests
from faultproxy import FaultProxy
from pytest_docker.plugin import Services

from trainimg.registry.localregistry import write_htpasswd

__all__ = [
    "RegistryLogin", "docker_cleanup", "docker_compose_command", "docker_compose_file", "docker_compose_project_name",
    "docker_setup", "fault_proxy", "registry", "registry_client", "registry_image", "registry_login",
]

TEST_LABEL = {"trainimg.test": "1"}
_REGISTRY_DIR = Path(__file__).parent / "registry"


class RegistryLogin(NamedTuple):
    """Address and login of the compose registry."""

    host: str
    username: str
    password: str


@pytest.fixture(scope="session")
def registry_login(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path]:
    """A random password for this session and the htpasswd file the registry container mounts."""
    password = secrets.token_urlsafe(18)
    htpasswd = tmp_path_factory.mktemp("registry-auth") / "htpasswd"
    write_htpasswd(htpasswd, "trainimg-test", password)
    return "trainimg-test", password, htpasswd


@pytest.fixture(scope="session")
def docker_compose_command(registry_login: tuple[str, str, Path]) -> str:
    """Debian ships docker-compose v1; the htpasswd path reaches the compose file through the environment."""
    return f"TRAINIMG_TEST_HTPASSWD={shlex.quote(str(registry_login[2]))} docker-compose"


@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    return str(_REGISTRY_DIR / "docker-compose.yml")


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    return f"trainimgtest{os.getpid()}"


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    """v1 has no `up --wait`; readiness is polled by the `registry` fixture."""
    return ["up --build -d"]


@pytest.fixture(scope="session")
def docker_cleanup() -> list[str]:
    return ["down -v --rmi local"]


@pytest.fixture(scope="session")
def registry(docker_services: Services, registry_login: tuple[str, str, Path]) -> RegistryLogin:
    """The compose registry, once `GET /v2/` answers 401 (up, and asking for the htpasswd login)."""
    port = docker_services.port_for("registry", 5000)
    url = f"http://127.0.0.1:{port}/v2/"

    def answers_401() -> bool:
        try:
            return requests.get(url, timeout=2).status_code == 401
        except requests.RequestException:
            return False

    docker_services.wait_until_responsive(check=answers_401, timeout=30.0, pause=0.3)
    return RegistryLogin(f"127.0.0.1:{port}", registry_login[0], registry_login[1])


@pytest.fixture(scope="session")
def registry_client() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture
def registry_image(registry_client: docker.DockerClient) -> Iterator[Callable[[], str]]:
    """A factory of small fresh images (a random 1 MiB file over local/debian:bookworm); all removed at teardown.

    Each image has a new layer, so the engine must really upload a blob (an existing one would be mounted).
    """
    built: list[str] = []

    def build() -> str:
        dockerfile = (
            "FROM local/debian:bookworm\n"
            f"RUN head -c 1048576 /dev/urandom > /trainimg-test-{uuid.uuid4().hex}\n"
        )
        image, _ = registry_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), labels=TEST_LABEL,
                                                rm=True, forcerm=True)
        built.append(image.id)
        return image.id

    yield build
    for image_id in built:
        try:
            registry_client.images.remove(image_id, force=True)
        except docker.errors.NotFound:
            pass


@pytest.fixture
def fault_proxy(registry: RegistryLogin) -> Iterator[FaultProxy]:
    """A FaultProxy on 127.0.0.1 in front of the compose registry, stopped at teardown (or after 120 s)."""
    host, port = registry.host.rsplit(":", 1)
    with FaultProxy(upstream=(host, int(port)), lifetime=120.0) as proxy:
        yield proxy
