"""Bytecode for what an install step installed, in that step's layer, the same bytes on every build.

A container starts from the image's files: where no `.pyc` lies beside a source, every import compiles it again, in
every replica at every start. In a fresh container of the CPU images, `import tensorflow` took 8.9 s without the
bytecode and 2.6 s with it (`torch` 4.1 s and 1.4 s, `jax` 1.9 s and 0.5 s; benchmarks/coldstart.py measures it).
uv writes none by default, and its `--compile-bytecode` compiles the whole site-packages, which would rewrite the
lower layers' files into each layer. So each install step runs this file (`python bytecode.py`, standard library
only, with the venv's Python, before trainimg's runtime is in the image), and it compiles what has no bytecode yet:
the sources of the distributions that step installed.

- Hash-checked headers (PEP 552 `CHECKED_HASH`): a timestamp header would hold the build's time; a hash header
  stays true to its source, and Python compiles again if someone edits the source later.
- Fixed slices, paths in sorted order: marshal shares an object it meets again (`FLAG_REF`) by its reference
  count, which what the process compiled before can move. So the sorted list is cut into slices fixed by its length
  alone (`slices`), each compiled in order by a fresh process of its own, as many at once as there are CPUs: the
  same files give the same slices and the same bytes, cold or warm, on 2 CPUs or 64, whatever the hash seed
  (marshal sorts a frozenset's items since Python 3.10, bpo-37596). Compiling is the longest part of an install
  step after the unpacking; in slices it takes about half as long on 2 CPUs (benchmarks/results/2026-12-02-onepass,
  "uv against pip again").
- A `.pyc` already there for the same source is left alone: an extending variant's step installs its whole lock,
  and rewriting its parent's bytecode would copy those files into its own layer.
- A file that is not Python 3 source (a template or test data named `.py`) is skipped, as pip skips it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import py_compile
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# PEP 552's header: the magic number, 4 bytes of flags (bit 0: hash-based, then the source's hash follows, else a
# timestamp and size do), 8 more bytes.
_HASH_BASED = 0b01
# At most this many slices, each at least SLICE_MIN sources: a step that installs a few files runs one process.
SLICES = 8
SLICE_MIN = 200
# What `main` is given, after the file's path, to compile the NUL-separated paths on its stdin: one slice.
_SLICE_ARG = "--slice"


def sources(paths: list[str]) -> list[Path]:
    """Every `.py` file the installed distributions' RECORDs list, under the site-packages they are in, sorted."""
    found: set[Path] = set()
    for dist in importlib.metadata.distributions(path=paths):
        root = Path(str(dist.locate_file(""))).resolve()
        for entry in dist.files or ():
            if entry.suffix != ".py":
                continue
            path = Path(str(dist.locate_file(entry))).resolve()
            if path.is_relative_to(root) and path.is_file():
                found.add(path)
    return sorted(found)


def current(source: Path) -> bool:
    """Whether `source` has bytecode already: a timestamp `.pyc` (not ours to judge), or a hash one of this source."""
    try:
        head = Path(importlib.util.cache_from_source(str(source))).read_bytes()[:16]
    except OSError:
        return False
    if head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if not int.from_bytes(head[4:8], "little") & _HASH_BASED:
        return True
    return head[8:16] == importlib.util.source_hash(source.read_bytes())


def slices(todo: list[Path]) -> list[list[Path]]:
    """`todo` cut into contiguous slices whose bounds depend on its length only (never on the machine)."""
    count = max(1, min(SLICES, len(todo) // SLICE_MIN))
    return [todo[i * len(todo) // count:(i + 1) * len(todo) // count] for i in range(count)] if todo else []


def compile_each(paths: list[Path]) -> tuple[int, int]:
    """(compiled, skipped as not Python source) of `paths`, compiled in this order by this process."""
    compiled = skipped = 0
    for source in paths:
        try:
            py_compile.compile(str(source), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
            compiled += 1
        except (py_compile.PyCompileError, ValueError):
            skipped += 1
    return compiled, skipped


def _compile_slice(paths: list[Path]) -> tuple[int, int]:
    """One slice in a fresh process (this file, `--slice`), whose stdout is its two counts."""
    r = subprocess.run([sys.executable, __file__, _SLICE_ARG], input=b"\0".join(map(os.fsencode, paths)),
                       capture_output=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"bytecode: a slice of {len(paths)} source(s) from {paths[0]} failed: "
                           f"{r.stderr.decode(errors='replace').strip()[-2000:]}")
    compiled, skipped = r.stdout.split()
    return int(compiled), int(skipped)


def compile_missing(paths: list[str], workers: int | None = None) -> tuple[int, int]:
    """(compiled, skipped as not Python source) for the sources under `paths` with no bytecode of their own, the
    slices compiled `workers` at a time (the CPUs this process may use when None)."""
    parts = slices([source for source in sources(paths) if not current(source)])
    workers = workers or len(os.sched_getaffinity(0))
    with ThreadPoolExecutor(max_workers=min(workers, len(parts) or 1)) as pool:
        counts = list(pool.map(_compile_slice, parts))
    return sum(c for c, _ in counts), sum(s for _, s in counts)


def main(argv: list[str]) -> int:
    """`python bytecode.py [SITE_PACKAGES ...]`: the interpreter's own site-packages when none is named."""
    if argv == [_SLICE_ARG]:
        compiled, skipped = compile_each([Path(os.fsdecode(p)) for p in sys.stdin.buffer.read().split(b"\0") if p])
        print(compiled, skipped)
        return 0
    if any(arg.startswith("-") for arg in argv):
        print("usage: python bytecode.py [SITE_PACKAGES ...]  (compiles the installed sources with no bytecode)",
              file=sys.stderr)
        return 2
    compiled, skipped = compile_missing(argv or [p for p in sys.path if p.endswith("site-packages")])
    print(f"bytecode: compiled {compiled} source(s); {skipped} not Python 3 source, left without")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
