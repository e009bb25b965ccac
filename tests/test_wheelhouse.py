"""The wheelhouse server and the pip.conf secret: what builds reach over loopback, and nothing else."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from trainimg.errors import UserInputError
from trainimg.imagebuild.wheelhouse import check_dirs, default_ca_bundle, default_wheelhouses, pip_conf, serve


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_serves_find_links_and_index_folders_confined_to_their_roots(tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    (links / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
    index = tmp_path / "index"
    (index / "simple" / "a").mkdir(parents=True)
    (index / "simple" / "a" / "index.html").write_text('<a href="../../files/a.whl">a.whl</a>')
    (tmp_path / "secret.txt").write_text("not for builds")
    with serve(check_dirs((links, index))) as lines:
        assert lines[0].startswith("find-links = http://127.0.0.1:") and lines[0].endswith("/w0/")
        assert lines[1].startswith("extra-index-url = http://127.0.0.1:") and lines[1].endswith("/w1/simple/")
        base = lines[0].split("=", 1)[1].strip().rsplit("/w0/", 1)[0]
        assert _get(f"{base}/w0/a-1.0-py3-none-any.whl") == (200, b"wheel")
        assert _get(f"{base}/w1/simple/a/index.html")[0] == 200
        for escape in ("/w0/../secret.txt", "/w0/%2e%2e/secret.txt", "/w1/../../etc/passwd", "/w9/x", "/x/y"):
            assert _get(base + escape)[0] == 404, escape


def test_pip_conf_carries_tokens_and_ca_path_but_fails_fast() -> None:
    env = {"PIP_INDEX_URL": "https://__token__:tok@mirror.example/simple"}
    text = pip_conf(["find-links = http://127.0.0.1:1/w0/"], Path("/etc/ssl/certs/ca.pem"), env)
    assert "index-url = https://__token__:tok@mirror.example/simple" in text
    assert "cert = /dev/trainimg-build/secrets/ca_bundle" in text  # the path of the secret mount, not the host's file
    assert "retries = 1" in text
    assert "retries = 4" in pip_conf([], None, {"PIP_RETRIES": "4"})
    assert "retries = 1" in pip_conf([], None, {"PIP_RETRIES": "many; rm -rf /"})
    assert "cert" not in pip_conf([], None, {})


def test_defaults_come_from_the_environment_passed_in(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    assert default_ca_bundle({"SSL_CERT_FILE": str(ca)}) == ca
    assert default_ca_bundle({"SSL_CERT_FILE": str(tmp_path / "missing"), "PIP_CERT": str(ca)}) == ca
    assert default_ca_bundle({}) is None
    assert default_wheelhouses({"PIP_FIND_LINKS": f"file://{tmp_path} /nonexistent"}) == (tmp_path,)


def test_a_wheelhouse_that_is_not_a_folder_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UserInputError) as err:
        check_dirs((tmp_path / "nope",))
    assert err.value.where == "--wheelhouse"
