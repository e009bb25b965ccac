"""The embedded local registry: registry start|stop|status."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..errors import CheckFailed
from .context import Ctx, pass_ctx

if TYPE_CHECKING:
    from ..publish.localregistry import LocalRegistry


@click.group()
def registry() -> None:
    """The embedded local registry (localhost, htpasswd auth): push and release without an account anywhere."""


def _local_registry(c: Ctx, port: int) -> LocalRegistry:
    from ..publish.localregistry import LocalRegistry
    from ..state import state_dir

    return LocalRegistry(state_dir(c.env) / "registry", port=port)


@registry.command("start")
@click.option("--port", type=int, default=5000, show_default=True)
@click.option("--login", is_flag=True, help="Also log the docker CLI in (config.json), as a user would.")
@pass_ctx
def registry_start(c: Ctx, port: int, login: bool) -> None:
    info = _local_registry(c, port).start()
    if login:
        from ..engine.docker import DockerEngine

        DockerEngine().login(info.host, info.username, info.password)
    click.echo(f"registry {info.host} running (user {info.username}, password in {info.htpasswd.parent}/password)")


@registry.command("stop")
@click.option("--port", type=int, default=5000, show_default=True)
@pass_ctx
def registry_stop(c: Ctx, port: int) -> None:
    _local_registry(c, port).stop()
    click.echo("registry stopped (data kept)")


@registry.command("status")
@click.option("--port", type=int, default=5000, show_default=True)
@pass_ctx
def registry_status(c: Ctx, port: int) -> None:
    st = _local_registry(c, port).status()
    click.echo(f"registry {st.host}: {'running' if st.running else 'stopped'} ({st.backend}, data {st.data_dir})")
    if not st.running:
        raise CheckFailed("registry not running")


