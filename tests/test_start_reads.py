"""What a gate process reads (issue 58, item 2), in process: runtime/reads.py in a real Python process records the
files it opened for reading and the libraries mapped into it, first read first, resolved and kept to the files of its
own filesystem; the gate's parts merge first-seen (conformance/startreads.py). The gate run on the CPU image and its
eStargz push are tests/test_estargz_gate.py."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

from trainimg.conformance.startreads import READS_MOUNT, StartReads
from trainimg.runtime import reads as recorder
from trainimg.runtime.reads import READS_ENV, merge


def test_a_process_records_what_it_read_in_order(tmp_path: Path) -> None:
    folder = tmp_path / "reads"
    folder.mkdir()
    source = os.path.realpath("/etc/os-release")  # Debian's is a link to /usr/lib/os-release
    link = tmp_path / "os-release"  # under /tmp, a link to a file elsewhere: the file counts, where it is
    link.symlink_to("/etc/os-release")
    # The module loaded from its file by a Python started without `site` (-S): as bare as an image's start, where
    # no .pth of this machine's site-packages maps a library (bz2, lzma) before the recorder starts.
    module = Path(recorder.__file__).resolve()
    code = ("import importlib.util as u\n"
            f"spec = u.spec_from_file_location('reads', {str(module)!r}); reads = u.module_from_spec(spec)\n"
            "spec.loader.exec_module(reads); reads.start()\n"
            "import _decimal\n"  # an extension module: the linker maps its file, seen at the next import
            "import email.parser\n"
            f"open({str(link)!r}).read(); open('/proc/self/status').read()\n"
            f"open({str(tmp_path / 'written.txt')!r}, 'w').write('x')\n"
            f"import ctypes; ctypes.CDLL({ctypes.util.find_library('bz2')!r})\n"
            "import tomllib\n")  # the import after a dlopen: the library is seen before the module's file
    run = subprocess.run([sys.executable, "-S", "-c", code], env={**os.environ, READS_ENV: str(folder)},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    (record,) = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    reads = record["reads"]
    assert len(reads) == len(set(reads)) and all(os.path.isabs(p) and os.path.isfile(p) for p in reads)
    python = os.path.realpath(sys.executable)
    parser = [i for i, p in enumerate(reads) if "/email/" in p and "parser" in p]  # its bytecode (or source)
    decimal = [i for i, p in enumerate(reads) if os.path.basename(p).startswith("_decimal.")]  # mapped, not opened
    bz2 = [i for i, p in enumerate(reads) if os.path.basename(p).startswith("libbz2.so")]  # mapped by the loader
    toml = [i for i, p in enumerate(reads) if "/tomllib/" in p]
    assert reads.index(python) < decimal[0] < parser[0] < reads.index(source) < bz2[0] < toml[0], reads
    assert not [p for p in reads if p.startswith(("/proc", "/tmp"))]  # the kernel's; what the run writes
    assert float(record["started"]) > 0 and record["node"] == os.uname().nodename


def test_the_parts_merge_first_seen() -> None:
    """Each process's files in its start order; a later process's files add only what is new."""
    assert merge([{"started": 2.0, "reads": ["/b", "/c"]}, {"started": 1.0, "reads": ["/a", "/b"]},
                  {"started": 3.0, "reads": ["/a", "/d"]}]) == ["/a", "/b", "/c", "/d"]
    # Node by node (a replica's host name: its role and index), whichever replica's process started first.
    worker, chief = {"node": "job-worker-0", "started": 1.0, "reads": ["/w"]}, {"node": "job-chief-0", "started": 2.0,
                                                                                  "reads": ["/c"]}
    assert merge([worker, chief]) == merge([chief, {**worker, "started": 3.0}]) == ["/c", "/w"]
    with StartReads() as reads:
        assert reads.env == {READS_ENV: READS_MOUNT}
        for part, started, paths in (("probe", 0.5, ["/probe", "/shared"]), ("allreduce", 1.0, ["/torch", "/shared"]),
                                     ("allreduce", 2.0, ["/torch", "/dist"])):
            (folder,) = reads.mount(part)
            (Path(folder) / f"{part}-{started}.json").write_text(json.dumps({"started": started, "reads": paths}))
        (Path(folder) / "half.json").write_text('{"started": 3.0, "rea')  # one being written: left out
        assert reads.order() == ["/torch", "/shared", "/dist", "/probe"]  # the training start first, then the probe
        root = reads.root
    assert not root.exists()
