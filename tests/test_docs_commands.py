"""Every `trainimg ...` command the README and the site show is one trainimg accepts (issue 55): each is parsed by
the real CLI and run up to its verb's checkpoint (`cli.app.main(check_only=True)`: click's parsing, then the verb's
own checks, such as release's audit flags, test's `--waivers` without `--os-fixes`, spec's per-platform flags),
never further. A command it would refuse fails here, naming the page and line. The conventions (placeholders,
synopses, mentions, `<!-- check: refused -->`) are tests/docscheck.py's.

In process, in a sandbox checkout (tests/data/docs/sandbox), with the network and the engine out of reach: a verb
that reached either before its checkpoint would fail, not act. Tier 1.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

import docscheck
from docscheck import Command

COMMANDS = docscheck.all_commands()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return docscheck.make_sandbox(tmp_path_factory.mktemp("docs-commands") / "checkout")


@pytest.fixture
def in_sandbox(sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The sandbox as the current folder; no trainimg variable from outside; no engine, no network."""
    monkeypatch.chdir(sandbox)
    for key in [k for k in os.environ if k.startswith("TRAINIMG_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("TRAINIMG_STATE_DIR", str(sandbox / ".trainimg-state"))
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/trainimg-docs-commands.sock")

    def refuse(*_: object) -> None:
        raise OSError("the documentation's command check reaches no network: a verb acted before its checkpoint")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    return sandbox


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_every_documented_command_is_one_trainimg_accepts(command: Command, in_sandbox: Path) -> None:
    problem = docscheck.judge(command)
    assert problem is None, f"{command.where}: `{command.text}`: {problem}"


def test_the_pages_hold_commands_and_every_verb_page_its_examples() -> None:
    """The list above is never empty: each verb's reference page contributes its help's examples, fully checked."""
    full = {c.where.split(":")[0] for c in COMMANDS if not c.names_only}
    verbs = [p for p in (docscheck.DOCS / "reference" / "cli").rglob("*.md") if p.name != "index.md"]
    assert len(verbs) >= 25
    for page in verbs:
        assert docscheck.shown(page) in full, f"{page}: no command checked"


def page(tmp_path: Path, text: str) -> list[Command]:
    path = tmp_path / "page.md"
    path.write_text(text)
    return docscheck.all_commands([path])


def test_a_wrong_flag_fails_naming_the_file_and_line(tmp_path: Path, in_sandbox: Path) -> None:
    (command,) = page(tmp_path, "# Build\n\n```bash\n# the CPU image\ntrainimg build pytorch-2.13.0-cpu-py3.11 \\\n"
                                "  --base-imag local/debian:bookworm\n```\n")
    assert command.where.endswith("page.md:5") and command.words[-2] == "--base-imag"
    problem = docscheck.judge(command)
    assert problem is not None and problem.startswith("exit 2:") and "--base-imag" in problem, problem


@pytest.mark.parametrize("line, said", [
    # refused inside the verb's callback, after click accepted every word
    ("trainimg test IMAGE --waivers FILE", "--os-fixes"),
    ("trainimg release VARIANT --registry R --skip-audit --advisories osv/", "--skip-audit"),
    ("trainimg build --lock images.lock", "--locked"),
    ("trainimg prune --label team", "KEY=VALUE"),
    ("trainimg spec --platform slurm --image VARIANT --registry R --replicas 2 --machine-type n1-standard-8",
     "--machine-type"),
    ("trainimg run IMAGE --platform vertex --replicas 65 -- python train.py", "--replicas"),
    ("trainimg spec --platform vertex --replicas 2 --machine-type n1-standard-8", "Missing option '--image'"),
    # refused by click itself
    ("trainimg test IMAGE --platform nowhere", "nowhere"),
    ("trainimg list --jsn", "--jsn"),
])
def test_a_refusal_inside_the_verb_fails_too(tmp_path: Path, in_sandbox: Path, line: str, said: str) -> None:
    (command,) = page(tmp_path, f"```sh\n{line}\n```\n")
    problem = docscheck.judge(command)
    assert problem is not None and said in problem, problem


def test_a_block_marked_refused_must_be_refused(tmp_path: Path, in_sandbox: Path) -> None:
    bad, good = page(tmp_path, "<!-- check: refused -->\n```console\n$ trainimg push VARIANT --registry R "
                               "--compression zstd:25\nerror line\n$ trainimg list\n```\n")
    assert docscheck.judge(bad) is None
    assert "shown as refused, but trainimg exits 0" in (docscheck.judge(good) or "")


def test_placeholders_are_filled_for_what_they_fill() -> None:
    assert docscheck.fill(("test", "IMAGE", "--junit", "FILE", "--waivers", "FILE")) == [
        "test", docscheck.VARIANT, "--junit", "report.xml", "--waivers", "waivers.yaml"]
    assert docscheck.fill(("promote", "LOCK_DIR", "--registry", "HOST[:PORT][/PREFIX]")) == [
        "promote", "lock.d", "--registry", "registry.example/team"]
    # a real uppercase value is no placeholder: it is checked as written
    words = ("spec", "--platform", "vertex", "--accelerator", "NVIDIA_H100_80GB:8", "--", "python", "FILE")
    assert docscheck.fill(words) == list(words)
    assert docscheck.fill(("run", "IMAGE", "--env", "$TOKEN")) == ["run", docscheck.VARIANT, "--env", "NAME=value"]


def test_shell_around_a_command_is_understood() -> None:
    calls = docscheck.trainimg_calls('echo "$TOKEN" | TRAINIMG_X=1 trainimg push VARIANT --registry R '
                                     '--password-stdin 2>&1 | tee log && trainimg list > out.txt  # note')
    assert calls == [("push", "VARIANT", "--registry", "R", "--password-stdin"), ("list",)]
    assert docscheck.trainimg_calls("pip install trainimg") == []
    assert docscheck.trainimg_calls("  - name: trainimg launcher from the base") == []
    assert docscheck.trainimg_calls("      run: trainimg release --all") == [("release", "--all")]
    assert docscheck.trainimg_calls("\ttrainimg release $(VARIANT) --base-image ${BASE}") == [
        ("release", "$VARIANT", "--base-image", "$BASE")]
    assert docscheck.trainimg_calls("trainimg release: give --advisories DIR|URL") == []  # what it printed


def test_output_blocks_hold_no_command(tmp_path: Path) -> None:
    assert page(tmp_path, "```text\ntrainimg build --nope\n```\n\n```json\n{\"run\": \"trainimg x\"}\n```\n") == []
    (command,) = page(tmp_path, "```\n$ trainimg validate\ntrainimg validate: 1 mistake\ntrainimg lock x\n```\n")
    assert command.words == ("validate",)  # under a prompt, the other lines are output


def test_mentions_and_synopses_check_names_only(tmp_path: Path, in_sandbox: Path) -> None:
    found = page(tmp_path, "Run `trainimg test` first, then `trainimg test --platfrom vertex`; "
                           "`trainimg validate: 2 mistakes` is its output.\n\n```\n"
                           "trainimg [--recipes DIR] list [--json [FILE]]\ntrainimg [OPTIONS] COMMAND [ARGS]...\n"
                           "trainimg tune IMAGE --param NAME=V1,V2,... [--goal max|min] [--jsn] -- CMD...\n```\n")
    problems = {c.text: docscheck.judge(c) for c in found}
    assert all(c.names_only for c in found) and len(found) == 5, found
    assert problems["trainimg test"] is None
    assert problems["trainimg test --platfrom vertex"] == ("trainimg test has no option --platfrom "
                                                           "(did you mean --platform?)")
    assert problems["trainimg [--recipes DIR] list [--json [FILE]]"] is None
    assert problems["trainimg [OPTIONS] COMMAND [ARGS]..."] is None
    assert "no option --jsn" in (problems[next(t for t in problems if "tune" in t)] or "")


def test_check_only_stops_at_the_checkpoint_and_a_verb_without_one_is_an_internal_error(
        in_sandbox: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from trainimg.cli.app import main
    from trainimg.cli.context import Ctx

    assert main(["validate"], check_only=True) == 0
    assert capsys.readouterr() == ("", "")  # it stopped before reading a recipe: nothing said
    assert main(["validate"]) == 0 and "valid in" in capsys.readouterr().out
    monkeypatch.setattr(Ctx, "checked", lambda self: None)  # a verb that never calls it
    assert main(["validate"], check_only=True) == 70
    assert "never calls Ctx.checked()" in capsys.readouterr().err
