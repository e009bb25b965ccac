"""``python -m trainimg_runtime VERB ...`` inside an image: the verbs the host drives containers with."""

from __future__ import annotations

import sys

from .contract import EXIT_USAGE
from .reads import start as record_reads


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    verbs = ("cluster", "launch", "probe", "allreduce", "manifest", "selftest", "sbom", "os-fixes")
    if not args or args[0] not in verbs:
        print(f"usage: python -m trainimg_runtime {{{','.join(verbs)}}} ...", file=sys.stderr)
        return EXIT_USAGE
    verb, rest = args[0], args[1:]
    record_reads()  # the gate's runs record what they read (reads.py); elsewhere READS_ENV is unset and nothing happens
    # Imported lazily: `launch` must start fast and must not import what `probe` needs.
    if verb == "cluster":
        from .cluster import main as run
    elif verb == "launch":
        from .launch import main as run
    elif verb == "probe":
        from .probe import main as run
    elif verb == "allreduce":
        from .allreduce import main as run
    elif verb == "selftest":
        from .selftest import main as run
    elif verb == "sbom":
        from .sbom import main as run
    elif verb == "os-fixes":
        from .osfixes import main as run
    else:
        from .manifest import main as run
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
