"""Broken JSON files users hand trainimg (a docker config, a release lockfile): one line naming the file and the
fix, never a traceback; a missing file is "nothing recorded yet"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainimg.errors import UserInputError
from trainimg.registry.credentials import stored_credentials
from trainimg.publish.lockfile import read_lock

BROKEN = {
    "not-json": (b"{\"auths\": ", "not valid JSON (line 1"),
    "array": (b"[]", "is not a JSON object"),
    "not-utf8": (b"\xff\xfe{}", "cannot read"),
}


def _docker_config(folder: Path) -> dict[str, str] | None:
    return stored_credentials("registry.example.com", {"DOCKER_CONFIG": str(folder), "HOME": str(folder)})


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_docker_config_is_one_line_naming_it(tmp_path: Path, case: str) -> None:
    content, message = BROKEN[case]
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(UserInputError, match=re.escape(message)) as err:
        _docker_config(tmp_path)
    assert str(tmp_path / "config.json") in str(err.value) and "\n" not in str(err.value)
    assert "fix or remove it" in str(err.value) or case == "not-utf8"


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_lockfile_is_one_line_naming_it(tmp_path: Path, case: str) -> None:
    content, message = BROKEN[case]
    lock = tmp_path / "images.lock"
    lock.write_bytes(content)
    with pytest.raises(UserInputError, match=re.escape(message)) as err:
        read_lock(lock)
    assert str(lock) in str(err.value) and "\n" not in str(err.value)


def test_missing_files_are_empty_and_an_empty_docker_config_too(tmp_path: Path) -> None:
    assert read_lock(tmp_path / "images.lock") == {}
    assert _docker_config(tmp_path) is None
    (tmp_path / "config.json").write_text("", encoding="utf-8")  # `docker logout` can leave one
    assert _docker_config(tmp_path) is None


def test_a_folder_where_the_file_should_be_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "images.lock").mkdir()
    with pytest.raises(UserInputError, match="cannot read the lockfile"):
        read_lock(tmp_path / "images.lock")
