"""trainimg's in-image runtime: standard-library Python (plus the framework a check exercises).

This package is copied into every image as ``trainimg_runtime`` (``/opt/trainimg/trainimg_runtime``) and imported
by the host CLI as ``builder.runtime``: one implementation of cluster parsing, launching and probing. Modules here
use only relative imports and the standard library, so they run in any image with python3.
"""
