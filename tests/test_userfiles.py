"""Broken JSON files users hand trainimg (a docker config, a release lockfile): one line naming the file and the
fix, never a traceback; a missing file is "nothing recorded yet"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainimg.errors import UserInputError
from trainimg.registry.credentials import stored_credentials
from trainimg.publish.lockfile import LockEntry, PendingLock, read_lock, write_lock

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


def _entry(variant: str, digest: str) -> LockEntry:
    return LockEntry(variant=variant, recipe="r.yaml", tag=f"t/{variant}:1", image_id="sha256:" + "1" * 64,
                     base_image="b", base_digest="sha256:" + "2" * 64, pushed={f"h/t/{variant}:1": digest})


def test_a_pending_lock_is_the_old_file_or_the_whole_new_one(tmp_path: Path) -> None:
    """A release's lockfile is written beside its path before any tag moves and put in place only by commit():
    leaving without a commit (a tag that failed to move) keeps the old bytes and leaves nothing beside them."""
    path = tmp_path / "images.lock"
    write_lock(path, [_entry("a", "sha256:" + "a" * 64)])
    old = path.read_bytes()
    with pytest.raises(RuntimeError):
        with PendingLock(path, [_entry("b", "sha256:" + "b" * 64)]):
            assert path.read_bytes() == old
            raise RuntimeError("a moving tag failed")
    assert path.read_bytes() == old and sorted(p.name for p in tmp_path.iterdir()) == ["images.lock"]
    with PendingLock(path, [_entry("b", "sha256:" + "b" * 64)]) as pending:
        pending.commit()
    assert sorted(read_lock(path)) == ["a", "b"] and sorted(p.name for p in tmp_path.iterdir()) == ["images.lock"]


def test_a_lockfile_that_cannot_be_written_is_one_line_before_anything_moves() -> None:
    # A folder that reads (no lockfile there yet) but takes no new file: procfs (as root, permissions would not stop
    # the write).
    path = Path("/proc/images.lock")
    with pytest.raises(UserInputError) as err:
        PendingLock(path, [_entry("a", "sha256:" + "a" * 64)])
    assert err.value.where == str(path) and err.value.message.startswith("cannot write the lockfile: ")
    assert "\n" not in str(err.value)
