"""The embedded local registry: registry start|stop|status."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..errors import CheckFailed
from .context import Callback, Ctx, pass_ctx
from .group import TrainimgGroup

if TYPE_CHECKING:
    from ..registry.localregistry import LocalRegistry


@click.group(cls=TrainimgGroup)
def registry() -> None:
    """The embedded local registry (localhost, htpasswd auth): push and release without an account anywhere.

    Its data and password live under ~/.cache/trainimg/registry (or $TRAINIMG_STATE_DIR).

    \b
    Examples:
      trainimg registry start --login
      trainimg registry status
      trainimg registry stop
    """


def port_option(fn: Callback) -> Callback:
    return click.option("--port", type=int, default=5000, show_default=True,
                        help="The localhost port the registry listens on.")(fn)


def _local_registry(c: Ctx, port: int) -> LocalRegistry:
    from ..registry.localregistry import LocalRegistry
    from ..state import state_dir

    return LocalRegistry(state_dir(c.env) / "registry", port=port)


@registry.command("start")
@port_option
@click.option("--login", is_flag=True, help="Also log the docker CLI in (config.json), as a user would.")
@pass_ctx
def registry_start(c: Ctx, port: int, login: bool) -> None:
    """Start the local registry (a background process, or a container where no registry binary is installed).

    \b
    Examples:
      trainimg registry start
      trainimg registry start --port 5001 --login
    """
    c.checked()
    info = _local_registry(c, port).start()
    if login:
        from ..engine.docker import DockerEngine

        DockerEngine().login(info.host, info.username, info.password)
    click.echo(f"registry {info.host} running (user {info.username}, password in {info.htpasswd.parent}/password)")


@registry.command("stop")
@port_option
@pass_ctx
def registry_stop(c: Ctx, port: int) -> None:
    """Stop the local registry; its images and password are kept for the next start.

    \b
    Examples:
      trainimg registry stop
    """
    c.checked()
    _local_registry(c, port).stop()
    click.echo("registry stopped (data kept)")


@registry.command("status")
@port_option
@pass_ctx
def registry_status(c: Ctx, port: int) -> None:
    """Say whether the local registry runs, and where its data is; exit 1 when it does not run.

    \b
    Examples:
      trainimg registry status
    """
    c.checked()
    st = _local_registry(c, port).status()
    click.echo(f"registry {st.host}: {'running' if st.running else 'stopped'} ({st.backend}, data {st.data_dir})")
    if not st.running:
        raise CheckFailed("registry not running")


