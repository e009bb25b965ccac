"""trainimg: declarative recipes -> Dockerfiles -> images -> conformance report -> push."""

__version__ = "0.1.0"
