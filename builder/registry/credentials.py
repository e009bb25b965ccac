"""Registry credentials found exactly where the docker CLI finds them.

The folder is `$DOCKER_CONFIG` when it is set (and then that folder only: CI jobs set it to isolate credentials,
so falling back to the home folder would push with someone else's login), else `~/.docker`; the file is its
`config.json`. For a registry host, `credHelpers[host]` names a helper, else `credsStore` does, else the plain
`auths` entry is used. A helper is the program `docker-credential-<name>`, asked with `get` and the server on
stdin; as in the CLI, a configured helper's answer replaces the `auths` entry, and "not found" means none.
Keys come back lowercase (`username`, `password`, `identitytoken`, `serveraddress`), the engine's auth form.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import UserInputError
from ..userfiles import read_json_object
from .references import RegistryTarget

HELPER_PREFIX = "docker-credential-"
_IDENTITY_TOKEN_USER = "<token>"  # a helper's Username when Secret is an identity token


def config_path(env: Mapping[str, str]) -> Path:
    """The config.json the docker CLI reads: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`."""
    folder = env.get("DOCKER_CONFIG")
    if folder:
        return Path(folder).expanduser() / "config.json"
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".docker" / "config.json"


def _hostname(key: str) -> str:
    """`https://host:5000/v1/` -> `host:5000`: auths keys may carry a scheme and a path (docker's
    ConvertToHostname)."""
    return key.removeprefix("http://").removeprefix("https://").split("/", 1)[0]


def _from_auths(config: Mapping[str, Any], host: str, path: Path) -> dict[str, str] | None:
    entry = next((v for k, v in (config.get("auths") or {}).items() if _hostname(k) == host), None)
    if not isinstance(entry, dict):
        return None
    creds = {k.lower(): v for k, v in entry.items() if isinstance(v, str) and v}
    encoded = creds.pop("auth", None)
    if encoded:
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            sep = ""
        if not sep:
            raise UserInputError(f"auths.{host}.auth is not base64 of user:password: run docker login {host}",
                                 where=str(path))
        creds.update(username=user, password=password)
    return creds


def _from_helper(name: str, host: str) -> dict[str, str] | None:
    program = shutil.which(HELPER_PREFIX + name)
    if program is None:
        raise UserInputError(f"the docker credential helper {HELPER_PREFIX}{name} (named in config.json for "
                             f"{host}) is not on PATH: install it or run docker login {host}")
    out = subprocess.run([program, "get"], input=host, capture_output=True, text=True, timeout=60, check=False)
    if out.returncode != 0:
        said = (out.stdout.strip() or out.stderr.strip()).splitlines()
        if said and "credentials not found" in said[-1].lower():
            return None
        raise UserInputError(f"{HELPER_PREFIX}{name} get {host} failed: {said[-1][:200] if said else out.returncode}")
    try:
        answer = json.loads(out.stdout)
    except json.JSONDecodeError:
        raise UserInputError(f"{HELPER_PREFIX}{name} get {host} did not answer JSON") from None
    user, secret = str(answer.get("Username") or ""), str(answer.get("Secret") or "")
    if not secret:
        return None
    if user == _IDENTITY_TOKEN_USER:
        return {"identitytoken": secret}
    return {"username": user, "password": secret}


def stored_credentials(host: str, env: Mapping[str, str]) -> dict[str, str] | None:
    """What `docker login host` stored, looked up as the docker CLI does (see the module doc); None if nothing."""
    path = config_path(env)
    config = read_json_object(path, "docker credentials", "fix or remove it") or {}
    helper = (config.get("credHelpers") or {}).get(host) or config.get("credsStore")
    creds = _from_helper(str(helper), host) if helper else _from_auths(config, host, path)
    if not creds or not (creds.get("password") or creds.get("identitytoken")):
        return None
    creds.setdefault("serveraddress", host)
    return creds


def resolve_credentials(
    target: RegistryTarget,
    username: str | None,
    password: str | None,
    docker_config_dir: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str] | None:
    """Credentials for `target`: explicit username+password, else what `docker login` stored (found as the
    docker CLI finds it, `stored_credentials`; `docker_config_dir` stands for `$DOCKER_CONFIG`),
    else None. A person who ran `docker login` needs to pass nothing."""
    if username and password:
        return {"username": username, "password": password, "serveraddress": target.host}
    if username and not password:
        raise UserInputError(f"--username {username} given without a password: set TRAINIMG_REGISTRY_PASSWORD or "
                             "use --password-stdin")
    if password and not username:
        raise UserInputError("a registry password was given without --username")
    env = dict(os.environ if env is None else env)
    if docker_config_dir:
        env["DOCKER_CONFIG"] = docker_config_dir
    return stored_credentials(target.host, env)
