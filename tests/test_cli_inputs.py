"""The CLI's own inputs: `--version`, bare `trainimg`, usage errors pointing at the verb's help, and the program of
`spec`, `run` and `tune` after `--` only (a typo before it is exit 2 naming it; the program's flags stay its own).

Most cases run `trainimg.cli.app.main` in process; the `run`/`tune` cases start real containers of the CPU image.
"""

from __future__ import annotations

import json
import os
from importlib.metadata import version
from pathlib import Path

import pytest
from conftest import trainimg

from trainimg.cli.app import cli, main
from trainimg.runtime.report import ReportPathError, write_json, write_junit

# A remote reference: its framework comes from --framework (its labels cannot be read).
SPEC = ("spec", "--platform", "vertex", "--image", "example.com/team/train:1", "--framework", "pytorch",
        "--replicas", "2", "--machine-type", "n1-standard-8")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err.splitlines()


def test_version(capsys):
    rc, out, err = run_cli(capsys, "--version")
    assert rc == 0 and err == []
    assert out == f"trainimg {version('trainimg')}\n"


def test_bare_trainimg_prints_help_and_exits_0():
    r = trainimg()
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    # Click >= 8.2 brackets COMMAND for a group that runs without one (check-jsonschema needs click >= 8.5).
    assert r.stdout.split("\n", 1)[0] in ("Usage: trainimg [OPTIONS] COMMAND [ARGS]...",
                                          "Usage: trainimg [OPTIONS] [COMMAND] [ARGS]...")
    for verb in ("validate", "render", "build", "test", "push", "spec", "run", "tune"):
        assert f"\n  {verb} " in r.stdout, verb


def test_usage_error_points_at_the_verbs_help(capsys):
    rc, _, err = run_cli(capsys, "validate", "--strict")
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("trainimg validate: ") and "'--strict'" in err[0]
    assert err[0].endswith("(see `trainimg validate --help`)")


def test_unknown_verb_suggests_and_points_at_top_help(capsys):
    rc, _, err = run_cli(capsys, "vaildate")
    assert rc == 2 and len(err) == 1, err
    assert "Did you mean 'validate'?" in err[0] and err[0].endswith("(see `trainimg --help`)")


def test_spec_typo_before_the_separator_is_exit_2_with_suggestion(capsys):
    rc, out, err = run_cli(capsys, *SPEC, "--acclerator", "NVIDIA_TESLA_T4:1", "--", "python", "x.py")
    assert rc == 2 and out == "" and len(err) == 1, (out, err)
    assert err[0].startswith("trainimg spec: ") and "'--acclerator'" in err[0]
    assert "Did you mean" in err[0] and "'--accelerator'" in err[0]
    assert err[0].endswith("(see `trainimg spec --help`)")


def test_spec_program_after_separator_keeps_its_flags(capsys):
    rc, out, err = run_cli(capsys, *SPEC, "--", "python", "x.py", "--replicas", "3", "--accelerator", "x")
    assert rc == 0, err
    pools = json.loads(out)["jobSpec"]["workerPoolSpecs"]
    assert sum(p["replicaCount"] for p in pools) == 2  # trainimg's --replicas, not the program's
    command = pools[0]["containerSpec"]["command"]
    assert command[-6:] == ["python", "x.py", "--replicas", "3", "--accelerator", "x"]
    assert "acceleratorType" not in pools[0]["machineSpec"]


def test_spec_without_a_program_is_fine(capsys):
    rc, out, err = run_cli(capsys, *SPEC)
    assert rc == 0, err
    assert json.loads(out)["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == 1


@pytest.mark.parametrize("verb", ["spec", "run", "tune"])
def test_program_words_without_separator_are_refused(capsys, verb):
    head = {"spec": SPEC, "run": ("run", "img:1", "--platform", "vertex"),
            "tune": ("tune", "img:1", "--param", "lr=0.1")}[verb]
    rc, _, err = run_cli(capsys, *head, "python", "x.py")
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"trainimg {verb}: unexpected 'python x.py': the program goes after `--`"), err[0]


def test_tune_needs_a_program(capsys):
    for tail in ((), ("--",)):
        rc, _, err = run_cli(capsys, "tune", "img:1", "--param", "lr=0.1", *tail)
        assert rc == 2 and len(err) == 1, err
        assert err[0].startswith("trainimg tune: missing the program: end the line with `-- CMD"), err[0]


def test_run_without_a_program_takes_the_images_own():
    """`run IMAGE` parses with no program: the image's ENTRYPOINT and CMD run (tests/test_jobs.py runs one)."""
    for tail in ((), ("--",)):
        ctx = cli.commands["run"].make_context("run", ["img:1", "--platform", "vertex", "--replicas", "2", *tail])
        assert ctx.params["command"] == ()


@pytest.mark.parametrize("verb", ["run", "tune"])
def test_run_and_tune_typo_is_exit_2_before_the_engine(capsys, verb):
    head = ("run", "img:1", "--platform", "vertex") if verb == "run" else ("tune", "img:1", "--param", "lr=0.1")
    rc, _, err = run_cli(capsys, *head, "--replica", "3", "--", "python", "x.py")
    assert rc == 2 and len(err) == 1, err
    assert f"trainimg {verb}: No such option '--replica'" in err[0] and "'--replicas'" in err[0]


def test_help_shows_the_separator():
    r = trainimg("tune", "--help")
    assert r.returncode == 0 and "Usage: trainimg tune [OPTIONS] IMAGE -- CMD [ARGS]..." in r.stdout
    r = trainimg("run", "--help")
    assert r.returncode == 0 and "Usage: trainimg run [OPTIONS] IMAGE [-- CMD [ARGS]...]" in r.stdout
    r = trainimg("spec", "--help")
    assert r.returncode == 0 and "[-- CMD [ARGS]...]" in r.stdout


ARGV_CHECK = "import sys; sys.exit(0 if sys.argv[1:3] == ['--replicas', '3'] else 7)"


def test_run_gives_the_programs_flags_to_the_program(cpu_image, state_env, tmp_path: Path):
    report = tmp_path / "run.json"
    r = trainimg("run", cpu_image, "--platform", "vertex", "--replicas", "1", "--progress", "quiet",
                 "--json", str(report), "--", "python", "-c", ARGV_CHECK, "--replicas", "3", env=state_env,
                 timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(report.read_text(encoding="utf-8"))
    assert [x["exit_code"] for x in data["replicas"]] == [0]  # one replica: trainimg's --replicas 1


TUNE_CHECK = ("import sys, hypertune; assert sys.argv[1:3] == ['--parallel', '5'], sys.argv; "
              "hypertune.HyperTune().report_hyperparameter_tuning_metric('acc', 1.0)")


def test_tune_gives_the_programs_flags_to_the_program(cpu_image, state_env, tmp_path: Path):
    report = tmp_path / "tune.json"
    r = trainimg("tune", cpu_image, "--param", "lr=0.1,0.2", "--progress", "quiet", "--json", str(report), "--",
                 "python", "-c", TUNE_CHECK, "--parallel", "5", env=state_env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(report.read_text(encoding="utf-8"))
    assert [t["status"] for t in data["trials"]] == ["succeeded", "succeeded"]
    assert data["best_value"] == 1.0


@pytest.mark.parametrize("writer", [write_json, write_junit])
def test_report_path_that_cannot_be_written_is_user_input(tmp_path: Path, writer):
    """The runtime's writer (stdlib, used in images too) raises ReportPathError; the CLI maps it to exit 2."""
    (tmp_path / "blocker").write_text("a file\n")
    target = tmp_path / "blocker" / "report.out"
    with pytest.raises(ReportPathError, match=f"cannot write {target}: "):
        writer([], str(target))
    writer([], str(tmp_path / "reports" / "report.out"))  # a folder that does not exist yet is made
    assert (tmp_path / "reports" / "report.out").stat().st_size > 0


def test_unreachable_engine_names_commands_a_pip_user_has(tmp_path: Path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    r = trainimg("run", "img:1", "--platform", "vertex", "--", "true", env=env, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith("trainimg run: cannot reach the Docker engine: start it (`sudo systemctl start docker`")
    assert "make" not in line and "DOCKER_HOST" in line
