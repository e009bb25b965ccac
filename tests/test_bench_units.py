"""The pure helpers of benchmarks/bench.py (benchmarks/figures.py, records.py): formatting, goals, a run's results file and its
tables, push output, recipe pin change.
No engine needed; the bench itself (`make bench`) is never run from here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # as when bench.py runs: its own folder is on the path
import core  # noqa: E402
import figures  # noqa: E402
import harness  # noqa: E402
import records  # noqa: E402

_spec = importlib.util.spec_from_file_location("trainimg_bench", ROOT / "benchmarks" / "bench.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["trainimg_bench"] = bench
_spec.loader.exec_module(bench)


def test_every_figure_is_in_one_family_whose_measure_resolves() -> None:
    """harness.FAMILIES is where families register: each figure is measured by exactly one, and each family's
    "module:function" names a function bench.py can call (imported the way a run imports it)."""
    names = [name for family in harness.FAMILIES for name in family.figures]
    assert sorted(names) == sorted(figures.FIGURE_NAMES) and len(names) == len(set(names))
    for family in harness.FAMILIES:
        module, _, function = family.measure.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), family
    assert bench.main.__module__ == "trainimg_bench"


def test_figure_names_are_the_contract() -> None:
    assert figures.FIGURE_NAMES == (
        "matrix_build_ratio", "noop_rebuild_ratio", "pin_change_rebuild_ratio", "size_vs_naive", "size_overhead",
        "allreduce_4_vs_1", "repush_bytes", "render_ms_per_variant", "ci_rebuild_ratio", "uv_vs_pip",
        "uv_vs_pip_warm", "reproducible_package_diffs", "ci_noop_release", "ci_noop_layer_bytes", "ci_one_change",
        "cold_import_ratio", "node_start_zstd_vs_gzip", "lazy_import_vs_whole", "lazy_import_gpu_vs_whole",
        "lazy_allreduce_vs_whole", "lazy_order_vs_none", "lazy_bytes_before_import", "audit_s_per_variant", "sign_s_per_variant",
        "arm64_build_ratio", "arm64_gate_ratio",
        "arm64_layer_diffs", "registry_refusal_ms", "reference_near_miss_ms")


@pytest.mark.parametrize("num, den, expected", [
    (1.0, 4.0, 0.25), (3, 3, 1.0), (None, 2.0, None), (2.0, None, None), (1.0, 0.0, None), (1.0, -1.0, None)])
def test_ratio(num, den, expected) -> None:
    assert figures.ratio(num, den) == expected


@pytest.mark.parametrize("value, unit, status, text", [
    (0.123456, "ratio", "ok", "0.123"),
    (2.0, "ratio", "ok", "2.000"),
    (0.0004, "ratio", "ok", "0.000"),
    (0, "bytes", "ok", "0"),
    (1234567.0, "bytes", "ok", "1234567"),
    (3.14159, "ms", "ok", "3.14"),
    (0.4567, "s", "ok", "0.46"),
    (2, "count", "ok", "2"),
    (None, "ratio", "skipped", "skipped"),
    (None, "ratio", "ok", "skipped"),
    (None, "bytes", "failed", "failed"),
])
def test_format_value(value, unit, status, text) -> None:
    assert figures.format_value(value, unit, status) == text


def test_goal_met_is_an_upper_bound_and_unmeasured_is_none() -> None:
    assert figures.goal_met("matrix_build_ratio", 0.5) is True
    assert figures.goal_met("matrix_build_ratio", 0.5001) is False
    assert figures.goal_met("repush_bytes", 0) is True
    assert figures.goal_met("repush_bytes", 1) is False
    assert figures.goal_met("size_overhead", 1.1) is True
    assert figures.goal_met("render_ms_per_variant", None) is None
    assert figures.format_goal("repush_bytes") == "0"
    assert figures.format_goal("size_overhead") == "≤ 1.1"


def test_parse_pushed_bytes_reads_the_cli_line() -> None:
    out = ("PASSED   x: y\n"
           "pushed localhost:5123/trainimg-bench/pytorch:2.13.0-cpu-py3.11@sha256:"
           + "ab" * 32 + " (0 bytes uploaded)\n")
    assert figures.parse_pushed_bytes(out) == 0
    first = "pushed localhost:5123/trainimg-bench/pytorch:2.13.0-cpu-py3.11@sha256:" + "cd" * 32 + \
        " (1073741824 bytes uploaded)\n"
    assert figures.parse_pushed_bytes(first) == 1073741824
    assert figures.parse_pushed_bytes(first + first) == 2 * 1073741824


@pytest.mark.parametrize("out", ["", "trainimg: no image x on this engine\n", "pushed x (12 bytes)\n",
                                 "pushed x (twelve bytes uploaded)\n"])
def test_parse_pushed_bytes_refuses_output_without_the_line(out) -> None:
    with pytest.raises(ValueError):
        figures.parse_pushed_bytes(out)


def test_change_pin_changes_exactly_one_pin() -> None:
    text = 'extras: ["six==1.16.0"]\nmatrix: []\n'
    assert figures.change_pin(text, "six==1.16.0", "six==1.17.0") == 'extras: ["six==1.17.0"]\nmatrix: []\n'
    with pytest.raises(ValueError):
        figures.change_pin("extras: []\n", "six==1.16.0", "six==1.17.0")
    with pytest.raises(ValueError):
        figures.change_pin("six==1.16.0 six==1.16.0", "six==1.16.0", "six==1.17.0")


def test_the_bench_recipe_holds_the_pin_once() -> None:
    text = (ROOT / "benchmarks" / "recipes" / "pytorch.yaml").read_text()
    assert figures.change_pin(text, harness.PIN_FROM, harness.PIN_TO).count(harness.PIN_TO) == 1


def test_parse_meminfo_and_du() -> None:
    assert figures.parse_meminfo("MemTotal:       24684084 kB\nMemFree: 1 kB\n") == 24684084 * 1024
    with pytest.raises(ValueError):
        figures.parse_meminfo("MemFree: 1 kB\n")
    assert figures.parse_du_total("123\t/opt/venv\n") == 123
    assert figures.parse_du_total("1\t/a\n2\t/b\n456\ttotal\n") == 456
    with pytest.raises(ValueError):
        figures.parse_du_total("")
    with pytest.raises(ValueError):
        figures.parse_du_total("du: cannot access\n")


def test_bench_refs_only_removes_bench_images() -> None:
    listing = "\n".join([
        "trainimg-bench/pytorch:2.13.0-cpu-py3.11", "trainimg-bench/alone:jax-0.10.2-cpu-py3.11",
        "trainimg/pytorch:2.13.0-cpu-py3.11", "local/debian:bookworm", "<none>:<none>",
        "localhost:5000/trainimg-bench/pytorch:2.13.0-cpu-py3.11", "trainimg-benchmark/x:1", "trainimg-test/x:1",
    ])
    assert figures.bench_refs(listing) == ["trainimg-bench/pytorch:2.13.0-cpu-py3.11",
                                         "trainimg-bench/alone:jax-0.10.2-cpu-py3.11"]


MACHINE = {"nproc": 2, "memory_bytes": 25 * 2**30, "docker_server": "20.10.24", "docker_client": "20.10.24",
           "kernel": "6.1.0"}


def _figures() -> dict:
    figs = {name: {"value": None, "status": "skipped", "met": None, "how": ""} for name in figures.FIGURE_NAMES}
    figs["matrix_build_ratio"] = {"value": 0.42, "status": "ok", "met": True, "how": "cold, median of 3"}
    figs["size_overhead"] = {"value": 1.25, "status": "ok", "met": False, "how": "du"}
    figs["repush_bytes"] = {"value": 0, "status": "ok", "met": True, "how": "push twice"}
    figs["allreduce_4_vs_1"] = {"value": None, "status": "failed", "met": None, "how": "engine gone"}
    return figs


def test_a_run_record_holds_every_figure_with_its_goal_and_the_machine(tmp_path: Path) -> None:
    record = records.run_record(_figures(), "2026-01-02 03:04 UTC", MACHINE, 1234.56)
    assert record["date"] == "2026-01-02 03:04 UTC" and record["machine"] == MACHINE
    assert record["total_seconds"] == 1234.6 and record["command"] == "make bench"
    assert list(record["figures"]) == list(figures.FIGURE_NAMES)
    assert record["figures"]["size_overhead"] == {"value": 1.25, "status": "ok", "met": False, "how": "du",
                                                   "goal": 1.1, "unit": "ratio",
                                                   "what": figures.GOALS["size_overhead"].what}
    path = records.write_run(record, tmp_path)
    assert path.name == "2026-01-02T0304Z.json" and records.read_runs(tmp_path) == [json.loads(path.read_text())]
    with pytest.raises(FileExistsError):  # a run's results are kept as written
        records.write_run(record, tmp_path)


def test_run_table_has_every_figure_the_date_and_the_machine() -> None:
    table = records.run_table(records.run_record(_figures(), "2026-01-02 03:04 UTC", MACHINE))
    assert "2026-01-02 03:04 UTC" in table
    assert "2 CPUs (nproc)" in table and "25.0 GiB" in table and "20.10.24" in table
    for name in figures.FIGURE_NAMES:
        assert f"| `{name}` |" in table
    assert "| `matrix_build_ratio` | 0.420 | ≤ 0.5 | yes |" in table
    assert "| `size_overhead` | 1.250 | ≤ 1.1 | **no** |" in table
    assert "| `repush_bytes` | 0 | 0 | yes |" in table
    assert "| `allreduce_4_vs_1` | failed |" in table
    assert "| `size_vs_naive` | skipped |" in table


def test_history_puts_the_newest_run_first_and_a_missed_goal_in_bold() -> None:
    old = records.run_record(_figures(), "2026-01-01 00:00 UTC", MACHINE)
    new = records.run_record({**_figures(), "size_overhead": {"value": 1.05, "status": "ok", "met": True, "how": ""}},
                             "2026-02-01 00:00 UTC", MACHINE)
    del old["figures"]["repush_bytes"]  # an older run measured fewer figures
    table = records.history_table([old, new])
    assert table.splitlines()[0] == "| figure | 2026-02-01 00:00 | 2026-01-01 00:00 |"
    assert "| `size_overhead` | 1.050 | **1.250** |" in table
    assert "| `repush_bytes` | 0 | – |" in table


def test_the_repository_results_are_runs_the_page_can_render() -> None:
    """benchmarks/results/bench/: each file is named by its run's date and has what the page reads."""
    runs = records.read_runs()
    assert runs and [r["date"] for r in runs] == sorted(r["date"] for r in runs)
    for run in runs:
        assert run["figures"] and records.run_table(run)
        for row in run["figures"].values():
            assert {"value", "goal", "unit", "met", "what"} <= set(row)


def test_the_bench_matrix_shares_the_shipped_parents() -> None:
    """The bench copies render to the same stages as the shipped CPU variants of their OS and Python below the lock
    install (python, uv's stage, comms); the install holds the bench's own pinned extra."""
    from trainimg.recipe.loading import load_recipes
    from trainimg.plan.stages import plans

    shipped = {(p.variant.os, p.variant.python): p for p in plans(load_recipes(ROOT / "recipes"), arches=("amd64",))
               if not p.variant.gpu}
    mine = plans(load_recipes(ROOT / "benchmarks" / "recipes"))
    assert len(mine) >= 3
    assert all(p.variant.tag.startswith(figures.BENCH_PREFIX) for p in mine)
    assert len({p.parents[0].key for p in mine}) == 1  # one shared python stage
    for p in mine:
        twin = shipped[p.variant.os, p.variant.python]
        assert figures.below_the_install(p.parents) == figures.below_the_install(twin.parents)
        assert len(figures.below_the_install(p.parents)) >= 2
    assert core.PIN_VARIANT in {p.variant.name for p in mine}


_gspec = importlib.util.spec_from_file_location("trainimg_bench_gpu", ROOT / "benchmarks" / "gpu.py")
gpu = importlib.util.module_from_spec(_gspec)
_gspec.loader.exec_module(gpu)


def test_gpu_figures_one_per_framework_and_shipped() -> None:
    """--gpu covers one GPU variant of each framework, each a variant of the shipped recipes."""
    from trainimg.recipe.loading import load_recipes

    shipped = load_recipes(ROOT / "recipes").by_name
    assert sorted(shipped[n].framework for n in gpu.GPU_VARIANTS) == ["jax", "pytorch", "tensorflow"]
    assert all(shipped[n].gpu and shipped[n].python == "3.11" for n in gpu.GPU_VARIANTS)


def test_gpu_figure_lines_and_table() -> None:
    name = gpu.GPU_VARIANTS[0]
    rows = {name: {"size_bytes": 6_500_000_000, "pushed_bytes": 3_100_000_000, "size_overhead": 1.0123,
                   "versions": {"nccl": "2.30.7", "cudnn": "9.24.0", "cuda": "13.0.96"}},
            gpu.GPU_VARIANTS[1]: {"error": "build failed"}}
    lines = gpu.figure_lines(rows)
    assert lines[:3] == [f"gpu.{name}.size_bytes: 6500000000", f"gpu.{name}.pushed_bytes: 3100000000",
                         f"gpu.{name}.size_overhead: 1.012"]
    assert f"gpu.{gpu.GPU_VARIANTS[1]}.size_bytes: failed" in lines and len(lines) == 3 * len(gpu.GPU_VARIANTS)
    table = gpu.render_gpu_table(rows)
    assert f"| `{name}` | 6,500 MB | 3,100 MB | 1.012 | 2.30.7 | 9.24.0 | 13.0.96 |" in table
    assert f"| `{gpu.GPU_VARIANTS[1]}` | failed: build failed |" in table


def test_manifest_bytes_adds_config_and_layers() -> None:
    manifest = {"schemaVersion": 2, "config": {"size": 7023, "digest": "sha256:c"},
                "layers": [{"size": 32654, "digest": "sha256:a"}, {"size": 16724, "digest": "sha256:b"}]}
    assert figures.manifest_bytes(manifest) == 7023 + 32654 + 16724
    with pytest.raises(ValueError, match="sized blobs"):
        figures.manifest_bytes({"manifests": []})  # an index, not an image manifest


@pytest.mark.parametrize("values, expected", [
    ([3.0], (3.0, 3.0, 3.0)), ([5.0, 1.0, 3.0], (3.0, 1.0, 5.0)), ([4.0, 1.0, 2.0, 3.0], (2.5, 1.0, 4.0)),
    ([0.44, 0.72, 0.53], (0.53, 0.44, 0.72))])
def test_median_spread(values, expected) -> None:
    assert figures.median_spread(values) == pytest.approx(expected)


def test_median_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        figures.median_spread([])


def test_spread_note_names_the_runs_and_the_range() -> None:
    assert figures.spread_note([100.0, 80.0, 120.0]) == "median of 3 cold runs 100.0 s (spread 80.0-120.0 s, 40% of the median)"


def test_ci_rebuild_ratio_goal() -> None:
    # A cache-fed rebuild of 30 s against a 200 s cold build meets the goal (<= 0.2); 50 s does not.
    assert figures.goal_met("ci_rebuild_ratio", figures.ratio(30.0, 200.0)) is True
    assert figures.goal_met("ci_rebuild_ratio", figures.ratio(50.0, 200.0)) is False
    assert figures.format_goal("ci_rebuild_ratio") == "≤ 0.2"


def test_the_ci_fleet_recipes_load_and_one_change_rebuilds_the_variant_and_its_child(tmp_path: Path) -> None:
    import cifleet

    for name, text in cifleet.ci_recipes("0123abcd", harness.PIN_FROM).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    must, every = cifleet.expected_rebuilds(tmp_path, cifleet.CHANGED)  # loads and validates them as trainimg does
    assert must == {"ci-a", "ci-a-child"} and every == {"ci-a", "ci-a-child", "ci-b", "ci-c"}
    recipe = (tmp_path / f"{cifleet.CHANGED}.yaml").read_text(encoding="utf-8")
    assert figures.change_pin(recipe, harness.PIN_FROM, harness.PIN_TO).count(harness.PIN_TO) == 1
    assert set(cifleet.CI_FIGURES) <= set(figures.FIGURE_NAMES)
    assert figures.format_goal("ci_noop_release") == "≤ 2" and figures.format_goal("ci_one_change") == "0"


def test_install_step_seconds_sums_the_steps_that_install_the_lock() -> None:
    """Lines as docker 20.10's plain progress printed them for the JAX GPU variant (the RUN text shortened): each
    layer group's step mounts its own slice of the lock, only the last one names requirements.lock."""
    import installs

    log = "\n".join([
        "#6 [python 1/1] RUN apt-get update  && DEBIAN_FRONTEND=noninteractive apt-get install -y python3.11",
        "#6 DONE 11.1s",
        "#7 [framework 1/5] RUN --mount=type=bind,from=locks,source=/opt/trainimg-locks/cuda.lock,target=/dev/"
        "trainimg-build/cuda.lock     uv pip install --require-hashes --no-deps -r /dev/trainimg-build/cuda.lock",
        "#7 DONE 10.0s",
        "#8 [framework 5/5] RUN --mount=type=secret,id=pip_conf,target=/etc/pip.conf     --mount=type=bind,"
        "source=images/jax-0.10.2-cu126-py3.11/requirements.lock,target=/dev/trainimg-build/requirements.lock  "
        "   python -m pip install --require-hashes --no-deps -r /dev/trainimg-build/hypertune.lock",
        "#8 0.512 Looking in links: http://127.0.0.1:40121/0/",
        "#9 [image 1/4] RUN mkdir -p /opt/trainimg && cp -R /dev/trainimg-build/runtime /opt/trainimg",
        "#9 DONE 0.1s",
        "#8 DONE 82.4s",
        "#12 exporting to image",
        "#12 DONE 20.3s",
    ])
    assert installs.install_step_seconds(log) == 92.4
    with pytest.raises(ValueError, match="times 0 steps"):
        installs.install_step_seconds(log.replace("--require-hashes", "-r"))


def test_a_failed_build_is_named_by_buildkits_error_not_the_echo_of_its_run_line() -> None:
    """A failed `docker build` ends with the echo of its RUN line (the seal alone is ~700 characters); the bench's
    line must carry BuildKit's `#N ERROR:` (this is the output of the bench's alone build before it was given the
    baked context)."""
    run_line = "RUN --mount=type=bind,source=audit/x.json,target=/dev/trainimg-build/audit.json " + "find / -xdev " * 80
    output = "\n".join([
        "#14 [image 3/3] " + run_line,
        '#14 ERROR: "/audit/x.json" not found: not found',
        "------",
        " > [image 3/3] " + run_line + ":",
        "------",
        'failed to compute cache key: "/audit/x.json" not found: not found',
    ])
    tail = figures.failure_tail(output)
    assert tail.startswith('#14 ERROR: "/audit/x.json" not found') and tail.endswith("not found: not found")
    assert "find / -xdev" not in tail
    assert figures.failure_tail("one\ntwo") == "one\ntwo" and figures.failure_tail("") == ""


def test_the_naive_baseline_mounts_the_ca_bundle_where_the_pip_conf_names_it() -> None:
    """The naive Dockerfile installs with trainimg's own pip.conf secret, which names the CA bundle by path; the
    bench failed when the two paths parted (the Dockerfile mounted it at BuildKit's default)."""
    from trainimg.imagebuild.wheelhouse import pip_conf
    from trainimg.plan.stages import CA_SECRET

    cert = next(line.split("=", 1)[1].strip() for line in pip_conf([], Path("/ca.pem"), {}).splitlines()
                if line.startswith("cert"))
    text = core.naive_dockerfile()
    assert f"--mount=type=secret,id={CA_SECRET},target={cert} " in text and "@" not in text


def test_the_lazy_start_times_each_line_as_it_arrives_and_reads_the_log_at_the_import(tmp_path: Path) -> None:
    """benchmarks/lazystart.py times the container's marker lines on the host as they come through `ctr run`'s
    stdout (its figures are the seconds to each), and reads the registry's log at the import's line, not at the end;
    a start that fails or leaves out a line is a failed step naming its exit and its error output, not a figure."""
    import time

    import lazystart

    marks = [lazystart.STARTED, lazystart.IMPORTED, lazystart.REDUCED]
    script = f"echo '{marks[0]}'; sleep 1; echo other; echo '{marks[1]}'; sleep 1; echo '{marks[2]}'"
    read_at: list[float] = []
    start = time.monotonic()
    stamps, served = lazystart.stream_stamps(["sh", "-c", script], lambda: read_at.append(time.monotonic()) or 42,
                                             start, tmp_path / "err")
    assert served == 42 and len(read_at) == 1 and sorted(stamps) == sorted(marks)
    # each line stamped as it came (a second apart: output kept back until the end would stamp them together), and
    # the log read after the import's line, before the next one was read: order only, no bound on how soon
    assert stamps[marks[0]] + 0.9 <= stamps[marks[1]] <= read_at[0] - start + 0.01
    assert read_at[0] - start < stamps[marks[2]] and stamps[marks[1]] + 0.9 <= stamps[marks[2]]
    with pytest.raises(harness.StepFailed, match=r"exited 3 after .*started.*: no torch here"):
        lazystart.stream_stamps(["sh", "-c", f"echo '{marks[0]}'; echo no torch here >&2; exit 3"], lambda: 0,
                                start, tmp_path / "err")
    with pytest.raises(harness.StepFailed, match="exited 0"):
        lazystart.stream_stamps(["sh", "-c", f"echo '{marks[0]}'"], lambda: 0, start, tmp_path / "err")
