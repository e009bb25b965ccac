"""The one image-reference grammar: hostile `--registry` values are refused, each with one line naming the flag, and
good references still parse. How fast they are refused is a benchmark figure (benchmarks/grammar.py:
`registry_refusal_ms`, `reference_near_miss_ms`), not a timed test: a loaded machine is not a failed grammar. A
grammar that backtracks again never ends on the long near misses: those run in a child with a timeout, so such a
regression fails here instead of hanging the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainimg.errors import UserInputError
from trainimg.registry.references import split_tag
from trainimg.recipe.grammar import is_reference

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from grammar import LONG_NEAR_MISSES, hostile_values  # noqa: E402  (the figure's input: one generator)

_HANG = 300  # s: a linear grammar answers these in milliseconds, a backtracking one in years
# Each hostile value parsed in a child: (exit code of the refusal, whether its one line names --registry), or
# "accepted"; the child prints one JSON list.
_REFUSALS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from grammar import hostile_values
from trainimg.errors import UserInputError
from trainimg.registry.references import RegistryTarget
out = []
for text in hostile_values():
    try:
        RegistryTarget.parse(text)
        out.append("accepted")
    except UserInputError as err:
        out.append([err.exit_code, "--registry" in str(err) and len(str(err).splitlines()) == 1])
print(json.dumps(out))
"""


def test_each_of_1000_hostile_registries_is_refused_with_one_line_naming_the_flag() -> None:
    values = hostile_values()
    assert len(values) == 1000 and len(set(values)) > 950
    r = subprocess.run([sys.executable, "-c", _REFUSALS, str(BENCHMARKS)], capture_output=True, text=True,
                       timeout=_HANG)
    assert r.returncode == 0, r.stderr[-2000:]
    wrong = [(text[:60], got) for text, got in zip(values, json.loads(r.stdout)) if got != [2, True]]
    assert wrong == [], wrong[:5]


def test_the_near_miss_that_took_seconds_is_refused() -> None:
    code = ("import sys\nfrom trainimg.errors import UserInputError\nfrom trainimg.registry.references import "
            "RegistryTarget\nfor n in map(int, sys.argv[1:]):\n    try:\n        RegistryTarget.parse('localhost:5000/' "
            "+ 'a' * n + '!')\n    except UserInputError as err:\n        print(n, err.exit_code)\n")
    r = subprocess.run([sys.executable, "-c", code, "26", "30", "10000"], capture_output=True, text=True,
                       timeout=_HANG)
    assert r.returncode == 0 and r.stdout.split("\n")[:3] == ["26 2", "30 2", "10000 2"], r.stdout + r.stderr


@pytest.mark.parametrize("text", ["localhost:5000/" + "a" * 26 + "!", "localhost:５０００", "a" * 3000 + "é",
                                  "localhost:5000/x\n/y"])
def test_hostile_registry_through_the_cli_is_exit_2_with_one_line(text: str) -> None:
    proc = subprocess.run(["trainimg", "release", "any-variant", "--registry", text],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "--registry" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("ref", [
    "trainimg/pytorch:2.13.0-cpu-py3.11",
    "europe-docker.pkg.dev/acme/ml/trainimg/tensorflow:2.21.0-cu125-py3.11",
    "localhost:5000/a.b/c__d/e-f--g:latest",
    "local/debian:bookworm",
    "nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04@sha256:" + "0" * 64,
])
def test_good_references_still_match(ref: str) -> None:
    assert is_reference(ref)


@pytest.mark.parametrize("ref", ["a/b\n", "a/B", "a__-b", "a/b:.x", "a/b:" + "x" * 129, "ａ/b", "a//b", "a/b@sha256:x",
                                 "a/b:tag with space"])
def test_bad_references_do_not_match(ref: str) -> None:
    assert not is_reference(ref)


def test_reference_grammar_refuses_long_near_misses() -> None:
    code = ("import sys\nfrom trainimg.recipe.grammar import REFERENCE_RE, REPOSITORY_RE\n"
            "sys.path.insert(0, sys.argv[1])\nfrom grammar import LONG_NEAR_MISSES\n"
            "print([bool(REFERENCE_RE.match(t) or REPOSITORY_RE.match(t)) for t in LONG_NEAR_MISSES])\n")
    r = subprocess.run([sys.executable, "-c", code, str(BENCHMARKS)], capture_output=True, text=True, timeout=_HANG)
    assert r.returncode == 0 and r.stdout.strip() == str([False] * len(LONG_NEAR_MISSES)), r.stdout + r.stderr


def test_tag_rules_come_from_the_grammar() -> None:
    assert split_tag("trainimg/pytorch") == ("trainimg/pytorch", "latest")
    with pytest.raises(UserInputError, match="tag 'x٣'"):
        split_tag("trainimg/pytorch:x٣")
