"""One registry per axis (issue 35): each platform's code lives in its homes, and nowhere else in builder/.

A platform's homes are its runtime module (``runtime/platforms/<name>.py``, and the ``READER`` that module names
where a family of platforms shares one parser), its jobs module (``jobs/<name>.py``, where ``spec`` writes its
job) and the contract's name list (``runtime/contract.py``). Generated from `contract.PLATFORMS`: a new platform
gets its case for free, and passes when adding it touched only its homes and its tests.

The scan reads code, not prose: an identifier, an attribute, an import name or a string constant that names the
platform (the spelling is matched case-insensitively at the start of a word: ``SAGEMAKER``, ``sagemaker_role``,
``SageMaker``). Docstrings and help texts (``help=`` and a `flagdecl.Flag`'s text) are documentation, not code.
In-process: no Docker, no network.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
from trainimg.runtime import contract
from trainimg.runtime.platforms import BY_NAME

BUILDER = Path(contract.__file__).resolve().parents[1]

#: (platform, module under builder/) -> why that module names a platform that is not its own. Keep it short: each
#: row is a fact two platforms share, not a dispatch a registry should do.
SHARED: dict[tuple[str, str], str] = {
    # Azure ML's own distribution type is called "mpi"; its ranks are mpirun's, read by platforms/mpi.py.
    ("mpi", "runtime/platforms/azureml.py"): "Azure ML's mpi distribution is read by mpirun's module",
    ("mpi", "jobs/azureml.py"): "Azure ML's --distribution mpi",
    # Kubeflow Trainer runs a TrainJob (and its MPI runtime's nodes) as a JobSet: their pods are named as one's.
    ("jobset", "runtime/platforms/trainjob.py"): "a TrainJob's pods are a JobSet's",
    ("jobset", "runtime/platforms/mpi.py"): "the Trainer MPI runtime's node pods are a JobSet's",
    # The Reduction Server is a Vertex AI service: its image lives in Vertex's registry, its sizing is Vertex's.
    ("vertex", "jobs/reducers.py"): "Vertex AI's Reduction Server",
    # NCCL's troubleshooting page on shared memory, the floor runtime/shm.py quotes, is named runtime_and_mpi_issues.
    ("mpi", "runtime/shm.py"): "the URL of NCCL's shared-memory advice",
    # Vertex's SDK repository is googleapis/python-aiplatform: Vertex's /dev/shm row cites an issue there.
    ("aiplatform", "runtime/platforms/vertex.py"): "the URL of the Vertex SDK's issue on shared memory",
    # AI Platform Training was shut down: its note points to its successor.
    ("vertex", "jobs/aiplatform.py"): "AI Platform's shutdown note names its successor",
}


def _prose(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are documentation: docstrings, ``help=`` values, a Flag's text."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            found.add(id(node.body[0].value))
        if isinstance(node, ast.Call):
            texts = [k.value for k in node.keywords if k.arg == "help"]
            if isinstance(node.func, ast.Name) and node.func.id == "Flag" and len(node.args) > 1:
                texts.append(node.args[1])
            found.update(id(sub) for text in texts for sub in ast.walk(text))
    return found


@functools.cache
def _parsed(path: Path) -> tuple[ast.Module, frozenset[int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return tree, frozenset(_prose(tree))


def names_in_code(path: Path, name: str) -> list[tuple[int, str]]:
    """(line, text) of every place `path`'s code names `name` (the module docstring says what counts)."""
    tree, prose = _parsed(path)
    pattern = re.compile(rf"(?i)(?<![a-z]){re.escape(name)}")
    hits = []
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            text = node.value
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            text = node.name
        elif isinstance(node, ast.alias):
            text = node.name
        if text is not None and pattern.search(text):
            hits.append((getattr(node, "lineno", 0), text[:60]))
    return hits


def homes(name: str) -> set[str]:
    """The modules (relative to builder/) where platform `name`'s code may live."""
    module = BY_NAME[name]
    runtime = {Path(m.__file__).resolve().relative_to(BUILDER).as_posix()
               for m in (module, getattr(module, "READER", module)) if m.__file__}
    jobs = BUILDER / "jobs" / f"{name}.py"
    return {*runtime, "runtime/contract.py", *([f"jobs/{name}.py"] if jobs.exists() else [])}


@pytest.mark.parametrize("name", contract.PLATFORMS)
def test_a_platform_is_named_only_in_its_homes(name: str) -> None:
    module = BY_NAME[name]
    assert module.NAME == name and Path(module.__file__).stem == name  # the registry's module is the name's own
    allowed = homes(name) | {where for (platform, where) in SHARED if platform == name}
    outside = {}
    for path in sorted(BUILDER.rglob("*.py")):
        where = path.relative_to(BUILDER).as_posix()
        if where not in allowed and (hits := names_in_code(path, name)):
            outside[where] = hits
    assert outside == {}, f"{name} is named outside its homes {sorted(allowed)}: {outside}"


def test_every_shared_row_is_still_needed() -> None:
    """A row of `SHARED` whose module no longer names the platform goes: the table only shrinks."""
    stale = [key for key in SHARED if not names_in_code(BUILDER / key[1], key[0])]
    assert stale == []


def test_the_scan_sees_code_and_skips_prose(tmp_path: Path) -> None:
    """The scanner itself: a name, an attribute, an import and a string count; a docstring and help text do not."""
    source = tmp_path / "sample.py"
    source.write_text('"""About SageMaker."""\nfrom x import sagemaker_role\nA = "sagemaker"\nB = y.SAGEMAKER\n'
                      'C = Flag("--c", "SageMaker help")\nD = f(help="for SageMaker")\nE = "messagemaker"\n',
                      encoding="utf-8")
    assert [line for line, _ in names_in_code(source, "sagemaker")] == [2, 3, 4]
