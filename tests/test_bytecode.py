"""runtime/bytecode.py: what each install step compiles, and that the same sources give the same `.pyc` bytes.

The in-process tests run the file as the build runs it (`python bytecode.py SITE`) on a site-packages made here,
one distribution with a RECORD; the image test reads what the real install steps left in the CPU image.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from trainimg.runtime import bytecode

SCRIPT = Path(bytecode.__file__)
# `in` a set display compiles to a frozenset constant, whose iteration order PYTHONHASHSEED moves.
SOURCE = 'def known(name):\n    return name in {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}\n'


def site_with_one_distribution(root: Path) -> Path:
    """site-packages holding `demo` 1.0: a module, a file named .py that is not Python 3, and a data file."""
    site = root / "site-packages"
    (site / "demo").mkdir(parents=True)
    (site / "demo" / "__init__.py").write_text(SOURCE)
    (site / "demo" / "py2only.py").write_text("print 'a Python 2 template'\n")
    (site / "demo" / "data.txt").write_text("not code\n")
    info = site / "demo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    (info / "RECORD").write_text("demo/__init__.py,,\ndemo/py2only.py,,\ndemo/data.txt,,\n"
                                 "demo-1.0.dist-info/METADATA,,\ndemo-1.0.dist-info/RECORD,,\n")
    return site


def compile_site(site: Path, seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    r = subprocess.run([sys.executable, str(SCRIPT), str(site)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def pyc_of(source: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(source)))


def test_compiles_what_has_no_bytecode_once_with_a_checked_hash_header(tmp_path: Path) -> None:
    site = site_with_one_distribution(tmp_path)
    assert compile_site(site, "random") == "bytecode: compiled 1 source(s); 1 not Python 3 source, left without"
    pyc = pyc_of(site / "demo" / "__init__.py")
    head = pyc.read_bytes()[:16]
    assert head[:4] == importlib.util.MAGIC_NUMBER and int.from_bytes(head[4:8], "little") == 0b11
    assert head[8:16] == importlib.util.source_hash(SOURCE.encode())
    assert not pyc_of(site / "demo" / "py2only.py").exists()
    before = pyc.stat().st_mtime_ns
    # The next step's run leaves it alone (an extending variant's step installs its parent's pins again).
    assert compile_site(site, "random").startswith("bytecode: compiled 0 source(s)")
    assert pyc.stat().st_mtime_ns == before
    # A source that changed since gets its bytecode again.
    (site / "demo" / "__init__.py").write_text(SOURCE + "EXTRA = 1\n")
    assert compile_site(site, "random").startswith("bytecode: compiled 1 source(s)")


def test_the_same_sources_give_the_same_bytes_whatever_the_hash_seed(tmp_path: Path) -> None:
    """A cold and a warm build compile in processes of their own, under any PYTHONHASHSEED: one layer either way."""
    outputs = []
    for seed in ("1", "2"):  # the same path each time: the code object holds its file's name
        shutil.rmtree(tmp_path / "build", ignore_errors=True)
        site = site_with_one_distribution(tmp_path / "build")
        compile_site(site, seed)
        outputs.append(pyc_of(site / "demo" / "__init__.py").read_bytes())
    assert outputs[0] == outputs[1]


def test_the_bytes_do_not_depend_on_how_many_compile_at_once(tmp_path: Path) -> None:
    """The sorted sources go to slices fixed by their number (each in a process of its own): one worker or four,
    the same slices, the same bytes, and every source compiled once."""
    count = 3 * bytecode.SLICE_MIN + 17
    outputs = []
    for workers in (1, 4):
        shutil.rmtree(tmp_path / "build", ignore_errors=True)
        site = site_with_one_distribution(tmp_path / "build")
        record = site / "demo-1.0.dist-info" / "RECORD"
        for i in range(count):
            (site / "demo" / f"m{i:04}.py").write_text(SOURCE + f"VALUE = {i}\n")
        record.write_text(record.read_text() + "".join(f"demo/m{i:04}.py,,\n" for i in range(count)))
        assert bytecode.compile_missing([str(site)], workers=workers) == (count + 1, 1)
        outputs.append({p.name: p.read_bytes() for p in (site / "demo" / "__pycache__").iterdir()})
    assert len(outputs[0]) == count + 1 and outputs[0] == outputs[1]
    todo = [Path(f"{i:05}.py") for i in range(count)]
    parts = bytecode.slices(todo)
    assert len(parts) == 3 and [p for part in parts for p in part] == todo


def test_a_flag_is_refused_with_one_line(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(SCRIPT), "--all"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "usage:" in r.stderr




# Run in the image: (sources the installed distributions list, those without current bytecode that its own Python
# compiles after all). An exception's name is what compile() raised, "" when it compiled.
IN_IMAGE = """
import json, sys
from trainimg_runtime import bytecode
def error(path):
    try:
        compile(path.read_bytes(), str(path), "exec")
    except (SyntaxError, ValueError) as exc:
        return type(exc).__name__
    return ""
found = bytecode.sources([p for p in sys.path if p.endswith("site-packages")])
print(json.dumps([len(found), {str(s): error(s) for s in found if not bytecode.current(s)}]))
"""


def test_every_installed_source_of_the_image_has_its_bytecode(cpu_image: str) -> None:
    """In the CPU image, the install steps left current bytecode for every source the installed distributions
    list that the image's Python compiles: a replica's first import reads it instead of compiling
    (benchmarks/coldstart.py). The few without are files that are not its Python's source (torch ships a
    3.12-only file)."""
    r = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "python", cpu_image,
                        "-c", IN_IMAGE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    total, missing = json.loads(r.stdout)
    assert total > 1000 and len(missing) < 5, missing
    assert all(missing.values()), f"sources that compile but have no current bytecode: {missing}"
