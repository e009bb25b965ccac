"""A CLI people learn once (issue 36): every verb's help, one spelling per idea, global options anywhere, every
recipe mistake in one run, one error-line scheme, and what runs said out loud.

The cases are generated from the click app itself (every command and group, recursively) and from the tables the
CLI keeps (`group.OLD_SPELLINGS`, `group.GLOBAL_OPTIONS`), so a new verb or a new alias is checked without a new
test. All run in process (click's CliRunner or `main`), except `diff`, which reads two lock entries through the
engine.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from conftest import ROOT

from trainimg.recipe.compat import load_compat
from trainimg.cli.app import cli, main
from trainimg.cli.group import GLOBAL_OPTIONS, OLD_SPELLINGS
from trainimg.publish.lockfile import LockEntry, write_lock

CPU = "framework: pytorch\nversion: '2.13.0'\nos: debian12\npython: '3.11'\n"
PARENT = "pytorch-2.13.0-cpu-py3.11"
# spec's flags and help are being rebuilt from per-platform declarations (helper A1, issue 35/36); cluster's help
# is theirs too. Remove an entry once its help has its examples and every option its description.


def commands(command: click.Command = cli, path: str = "trainimg") -> Iterator[tuple[str, click.Command]]:
    """Every command and group of the app, with its path (`trainimg ci github`)."""
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from commands(sub, f"{path} {name}")


ALL = list(commands())


def case(path: str) -> object:
    return pytest.param(path, id=path.replace(" ", "-"))


def invoke(*args: str, **kwargs: object) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, **kwargs)  # type: ignore[arg-type]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err.splitlines()


# --- every verb's help -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [case(p) for p, _ in ALL])
def test_help_has_a_purpose_an_example_and_every_option_described(path: str) -> None:
    command = dict(ALL)[path]
    r = invoke(*path.split()[1:], "--help")
    assert r.exit_code == 0, r.output
    purpose = (command.help or "").strip().splitlines()[0]
    assert purpose.endswith((".", ":")) or len(purpose) > 20, purpose  # one line saying what it is for
    examples = re.search(r"\n *Examples:\n((?: +trainimg .+\n?)+)", r.output)
    assert examples, r.output  # the docstring ends with \b Examples: and indented `trainimg ...` lines
    for line in examples.group(1).splitlines():
        assert line.strip().startswith(path.split()[0]), line
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"{path} {param.opts[0]} has no description"


def refused_by_itself(command: click.Command) -> list[str]:
    """The options `command` offers and then refuses whatever else is given: a top-level `if OPTION:` (or `if OPTION
    is not None:`) of its callback whose body only raises. Such an option belongs in no help."""
    options = {p.name: p.opts[0] for p in command.params if isinstance(p, click.Option) and p.name}
    callback = inspect.unwrap(command.callback) if command.callback else None
    if callback is None:
        return []
    (func,) = ast.parse(textwrap.dedent(inspect.getsource(callback))).body
    assert isinstance(func, ast.FunctionDef)
    refused = []
    for node in func.body:
        if not isinstance(node, ast.If) or node.orelse or not all(isinstance(b, ast.Raise) for b in node.body):
            continue
        test = node.test
        if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.IsNot) and \
                isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
            test = test.left
        if isinstance(test, ast.Name) and test.id in options:
            refused.append(options[test.id])
    return refused


@pytest.mark.parametrize("path", [case(p) for p, c in ALL if not isinstance(c, click.Group)])
def test_no_verb_offers_an_option_it_refuses_by_itself(path: str) -> None:
    """`audit --help` once offered --skip-audit, which audit always refused: each verb declares what it takes."""
    command = dict(ALL)[path]
    refused = refused_by_itself(command)
    shown = invoke(*path.split()[1:], "--help").output
    assert [o for o in refused if re.search(rf"^  {re.escape(o)}\b", shown, re.MULTILINE)] == [], (refused, shown)


def test_audit_takes_no_skip_audit_build_and_release_do(capsys: pytest.CaptureFixture[str]) -> None:
    """`audit` is the audit: --skip-audit is no option of it (click's own usage error), and the verbs that offer it
    say so in their help."""
    assert "--skip-audit" not in invoke("audit", "--help").output
    for verb in ("build", "release"):
        assert "--skip-audit" in invoke(verb, "--help").output
    rc, out, err = run(capsys, "audit", PARENT, "--skip-audit")
    assert (rc, out) == (2, "") and len(err) == 1 and "No such option '--skip-audit'" in err[0], err


@pytest.mark.parametrize("path", [p for p, c in ALL if isinstance(c, click.Group)])
def test_a_bare_group_prints_its_verbs_and_exits_0(capsys: pytest.CaptureFixture[str], path: str) -> None:
    rc, out, err = run(capsys, *path.split()[1:])
    assert rc == 0 and err == [], err
    group = dict(ALL)[path]
    assert isinstance(group, click.Group)
    for name in group.commands:
        assert f"\n  {name} " in out, (name, out)


def test_verbs_that_start_containers_or_reach_a_registry_say_so() -> None:
    says = ("container", "registry", "engine")
    for path in ("trainimg build", "trainimg test", "trainimg run", "trainimg tune", "trainimg push",
                 "trainimg release", "trainimg promote", "trainimg sbom", "trainimg diff", "trainimg prune"):
        text = " ".join((dict(ALL)[path].help or "").split())
        assert any(word in text for word in says), (path, text)


# --- one spelling per idea -------------------------------------------------------------------------------------------

JSON_VERBS = [p for p, c in ALL if any(isinstance(o, click.Option) and "--json" in o.opts for o in c.params)]


@pytest.mark.parametrize("path", JSON_VERBS)
def test_json_means_one_thing_on_every_verb(path: str) -> None:
    """`--json` alone prints on stdout, `--json FILE` writes FILE: one option object, one help text."""
    (option,) = [o for o in dict(ALL)[path].params if isinstance(o, click.Option) and "--json" in o.opts]
    assert option.name == "json_path" and option.flag_value == "-" and option.default is None
    assert not option.is_flag and option.metavar == "[FILE]"
    assert option.help and option.help.endswith("as JSON: on stdout with `--json` alone (or `--json -`), else into FILE.")


def test_json_alone_and_json_file(tmp_path: Path) -> None:
    d = tmp_path / "recipes"
    d.mkdir()
    (d / "a.yaml").write_text(CPU)
    out = invoke("--recipes", str(d), "list", "--json")
    assert out.exit_code == 0 and json.loads(out.stdout)[0]["name"] == PARENT, out.output
    target = tmp_path / "list.json"
    out = invoke("--recipes", str(d), "list", "--json", str(target))
    assert out.exit_code == 0 and out.stdout == "" and json.loads(target.read_text())[0]["name"] == PARENT


SPELLINGS = [(path, old, new) for path, table in OLD_SPELLINGS.items() for old, new in table.items()]


@pytest.mark.parametrize("path, old, new", SPELLINGS, ids=[f"{p.split()[-1]}{o}" for p, o, _ in SPELLINGS])
def test_old_spelling_still_works_warns_once_and_is_not_in_the_help(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch, path: str, old: str,
                                                                   new: str) -> None:
    monkeypatch.setenv("TRAINIMG_STATE_DIR", str(tmp_path / "state"))  # bake's folder: this test's own
    command = dict(ALL)[path]
    assert any(new in getattr(p, "opts", ()) for p in command.params), f"{path} has no {new}"
    assert old not in invoke(*path.split()[1:], "--help").output.replace(new, "")
    d = tmp_path / "recipes"
    d.mkdir()
    (d / "a.yaml").write_text(CPU)
    results = {}
    for spelling in (new, old):
        target = tmp_path / spelling.strip("-")
        rc, out, err = run(capsys, "--recipes", str(d), *path.split()[1:], spelling, str(target), spelling,
                           str(target))
        results[spelling] = (rc, sorted(p.name for p in target.rglob("*")) if target.is_dir() else target.is_file())
        warnings = [line for line in err if f"{old} is now spelled {new}" in line]
        assert len(warnings) == (1 if spelling == old else 0), err  # twice on the line, one warning
    assert results[old] == results[new] and results[new][0] == 0, results


# --- global options anywhere -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("option", GLOBAL_OPTIONS)
@pytest.mark.parametrize("verb", [["list"], ["validate"], ["render", "--check"]])
def test_global_option_after_the_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str,
                                      verb: list[str]) -> None:
    d = tmp_path / "recipes"
    d.mkdir()
    (d / "a.yaml").write_text(CPU)
    before = run(capsys, option, str(d), *verb)
    assert run(capsys, *verb, option, str(d)) == before
    assert run(capsys, *verb, f"{option}={d}") == before
    # render --check finds the fresh folder's Dockerfile missing (1); list and validate succeed
    assert before[0] == (1 if verb[0] == "render" else 0) and not any("No such option" in line for line in before[2]), \
        before


@pytest.mark.parametrize("tail", [[], ["--json"]])
def test_a_global_option_without_its_value_says_where_it_goes(capsys: pytest.CaptureFixture[str],
                                                              tail: list[str]) -> None:
    rc, out, err = run(capsys, "validate", "--recipes", *tail)
    assert rc == 2 and out == "" and len(err) == 1, (out, err)
    assert "--recipes needs a value, before or after the verb: `trainimg --recipes DIR validate ...`" in err[0], err


def test_a_global_option_after_the_separator_is_the_programs(tmp_path: Path) -> None:
    """After `--` every word is the program's: `--recipes` there is not moved (spec prints the program back)."""
    r = invoke("spec", "--platform", "vertex", "--image", "example.com/t:1", "--framework", "pytorch",
               "--replicas", "1", "--machine-type", "n1-standard-4", "--", "python", "x.py", "--recipes", "DIR")
    assert r.exit_code == 0, r.output
    command = json.loads(r.stdout)["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["command"]
    assert command[-4:] == ["python", "x.py", "--recipes", "DIR"]


def test_a_global_option_as_another_options_value_is_left_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """`run IMG --env --recipes`: the word is --env's value (and a bad one), not trainimg's --recipes."""
    rc, _, err = run(capsys, "run", "img:1", "--platform", "vertex", "--env", "--recipes", "--", "true")
    assert rc == 2 and len(err) == 1 and "--env" in err[0] and "--recipes" in err[0], err


# --- every recipe mistake in one run ---------------------------------------------------------------------------------

MISTAKES = {
    "a.yaml": ("framework: pytorch\nversion: '2.13.0'\npyton: '3.11'\nos: debian11\npython: 3.10\n"
               "matrix:\n  flavor: [base]\n"),
    "team/b.yaml": "framework: torch\nversion: '2.13.0'\npython: '3.11'\nos: debian12\nextras: [numpy>=1]\n",
    "team/c.yaml": "framework: [\n",
    "good.yaml": CPU.replace("3.11", "3.12").replace("debian12", "ubuntu24.04") + "cuda: '13.0'\nname: ok\n",
}
EXPECTED = [  # file:line:key, in file and line order
    "recipes/a.yaml:3:pyton: unknown key; did you mean 'python'?",
    "recipes/a.yaml:4:os: 'debian11' is not one of",
    "recipes/a.yaml:5:python: YAML reads the unquoted 3.10 as the number 3.1; quote it",
    "recipes/a.yaml:7:matrix.flavor: unknown key; did you mean 'flavour'?",
    "recipes/team/b.yaml:1:framework: 'torch' is not one of pytorch",
    "recipes/team/b.yaml:5:extras: 'numpy>=1' is not a pinned requirement",
    "recipes/team/c.yaml:2: not valid YAML",
]


def write(root: Path, files: dict[str, str]) -> Path:
    d = root / "recipes"
    for name, text in files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
    return d


def test_validate_reports_every_mistake_of_every_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = write(tmp_path, MISTAKES)
    rc, out, err = run(capsys, "--recipes", str(d), "validate")
    assert rc == 2 and out == "", (out, err)
    assert len(err) == len(EXPECTED) + 1, err
    for line, start in zip(err, EXPECTED):
        assert line.startswith(start), (line, start)
    assert err[-1] == f"trainimg validate: {len(EXPECTED)} mistakes in 3 files"


def test_validate_takes_folders_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = write(tmp_path, MISTAKES)
    rc, _, err = run(capsys, "--recipes", str(d), "validate", str(d / "team"))
    assert rc == 2 and [e.split(":")[0] for e in err[:-1]] == ["recipes/team/b.yaml"] * 2 + ["recipes/team/c.yaml"]
    assert err[-1] == "trainimg validate: 3 mistakes in 2 files"
    rc, out, err = run(capsys, "--recipes", str(d), "validate", str(d / "good.yaml"))
    assert (rc, out, err) == (0, "1 variant valid in 1 file\n", [])


def test_validate_counts_what_was_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = write(tmp_path, {"base.yaml": CPU, "team/a.yaml": f"extends: {PARENT}\nname: team-a\n",
                         "team/b.yaml": "extends: team-a\nname: team-b\n"})
    rc, out, err = run(capsys, "--recipes", str(d), "validate", str(d / "team"))
    assert (rc, err) == (0, []) and out == "2 variants valid in 2 files (and 1 parent they extend, from other files)\n"
    rc, out, err = run(capsys, "--recipes", str(d), "validate")
    assert (rc, err, out) == (0, [], "3 variants valid in 3 files\n")


def test_one_mistake_is_still_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = write(tmp_path, {"a.yaml": CPU.replace("debian12", "debian11")})
    rc, _, err = run(capsys, "--recipes", str(d), "list")
    known = ", ".join(load_compat().operating_systems)  # the OSes compat.yaml knows, in its order
    assert rc == 2 and err == [f"recipes/a.yaml:3:os: 'debian11' is not one of {known}"]


# --- one error-line scheme -------------------------------------------------------------------------------------------

def test_an_error_without_a_place_names_the_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = write(tmp_path, {"a.yaml": CPU})
    rc, _, err = run(capsys, "--recipes", str(d), "lock", "nope")
    assert rc == 2 and err == ["trainimg lock: no variant named 'nope'; run `trainimg list` to see them"], err


def _where_literals() -> Iterator[tuple[str, int, str]]:
    for path in sorted((ROOT / "builder").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for kw in getattr(node, "keywords", []):
                if kw.arg == "where" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    yield str(path.relative_to(ROOT)), node.lineno, kw.value.value


def test_where_is_a_place_never_a_verb() -> None:
    """`where` is what the user fixes (a flag, a file, a variable); the verb is the handler's to add."""
    verbs = {word for path, _ in ALL for word in path.split()[1:]}
    wrong = [(f, line, w) for f, line, w in _where_literals() if w in verbs]
    assert wrong == [], wrong


# --- diff: CUDA first ------------------------------------------------------------------------------------------------

def _entry(variant: str, cuda: str | None, nccl: str | None) -> LockEntry:
    return LockEntry(variant=variant, recipe="recipes/pytorch.yaml", tag=f"trainimg/pytorch:{variant}",
                     image_id="sha256:" + ("0" if cuda else "1") * 64, base_image="local/debian:bookworm",
                     base_digest="sha256:" + "2" * 64,
                     versions={"framework": "2.14.1" if cuda else "2.13.0", "cuda": cuda, "nccl": nccl, "cudnn": None,
                               "python": "3.11.2"}, pushed={}, conformance={}, size=None, released=None)


def test_diff_of_a_cpu_and_a_gpu_lock_lists_cuda_first(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        docker_engine: str) -> None:
    """diff looks each lock entry's image up on the engine (it may be local): tier 3."""
    lock = tmp_path / "images.lock"
    write_lock(lock, [_entry("cpu", None, None), _entry("gpu", "13.0.96", "2.28.9")])
    rc, out, err = run(capsys, "diff", f"{lock}:cpu", f"{lock}:gpu")
    assert rc == 0, err
    versions = out.split("versions:\n", 1)[1].split("\npackages:", 1)[0].splitlines()
    assert versions == ["  cuda: none -> 13.0.96", "  framework: 2.13.0 -> 2.14.1", "  nccl: none -> 2.28.9"], out
    assert err == ["trainimg: diff: read each image's SBOM in a short-lived container"]
    rc, out, err = run(capsys, "diff", "--json", f"{lock}:cpu", f"{lock}:gpu", "--progress", "quiet")
    assert rc == 0 and err == [], err  # --json before A B still reads A and B; quiet says nothing
    assert list(json.loads(out)["versions"]) == ["cuda", "framework", "nccl"], out


@pytest.mark.parametrize("verb", ["run", "tune"])
def test_json_alone_before_the_program_separator(verb: str) -> None:
    """A verb that takes a program after `--`: `--json` right before it is the switch, not a FILE named `--`."""
    command = dict(ALL)[f"trainimg {verb}"]
    extra = ["--param", "lr=1,2"] if verb == "tune" else ["--platform", "vertex"]
    for args, path in ((["--json"], "-"), (["--json", "r.json"], "r.json"), ([], None)):
        ctx = command.make_context(verb, ["img:1", *extra, *args, "--", "python", "x.py", "--json", "y"])
        assert ctx.params["json_path"] == path and ctx.params["command"] == ("python", "x.py", "--json", "y")
