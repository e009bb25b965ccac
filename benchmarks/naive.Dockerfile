# The naive baseline for `size_vs_naive` (benchmarks/bench.py): the same payload as the bench PyTorch image
# (Python 3.11 in a venv, torch 2.13.0+cpu, cloudml-hypertune 0.1.0.dev6, six 1.16.0) in one stage, written the
# way a first Dockerfile usually is: apt lists left in, build-essential left in, pip's cache left in (no
# --no-cache-dir). --no-install-recommends is kept, so the baseline is not inflated by recommended packages.
# The pip.conf secret (the served wheelhouses) is the one trainimg generates, so the same wheels are installed; it
# names the CA bundle where trainimg's steps mount it: benchmarks/core.py fills in that path.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates python3.11 python3.11-venv build-essential
RUN python3.11 -m venv /opt/venv
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
RUN --mount=type=secret,id=pip_conf,target=/etc/pip.conf \
    --mount=type=secret,id=@CA_SECRET@,target=@CA_TARGET@ \
    python -m pip install \
      --extra-index-url https://download.pytorch.org/whl/cpu \
      torch==2.13.0+cpu cloudml-hypertune==0.1.0.dev6 six==1.16.0
