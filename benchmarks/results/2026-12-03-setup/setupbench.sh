#!/usr/bin/env bash
# Time one setup-host (SCRIPT) from a state where its downloads and builds are all to do again, into side targets
# (the results of benchmarks/results/2026-12-03-setup/README.md). Removes packages and gitlab-ci-local: the run
# installs them again.
set -uo pipefail
script=$1
cd "$(dirname "$script")/.." || exit 1
npm uninstall -g --silent gitlab-ci-local >/dev/null 2>&1
DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq chromium chromium-common shellcheck qemu-user-static >/dev/null 2>&1
apt-get clean
/usr/bin/docker rmi -f local/debian:bookworm-st local/debian:trixie-st local/debian:bookworm-arm64-st >/dev/null 2>&1
rm -rf /tmp/st-tools
command -v chromium gitlab-ci-local shellcheck qemu-aarch64-static && { echo "not removed"; exit 1; }
start=$(date +%s.%N)
env TRAINIMG_TOOLS_DIR=/tmp/st-tools TRAINIMG_LOCAL_BASE=local/debian:bookworm-st \
  TRAINIMG_LOCAL_BASE_TRIXIE=local/debian:trixie-st TRAINIMG_LOCAL_BASE_ARM64=local/debian:bookworm-arm64-st \
  bash "$script" > "/tmp/setupbench-$(basename "$script")-$(date +%H%M%S).log" 2>&1
rc=$?
end=$(date +%s.%N)
echo "$(basename "$script") rc=$rc seconds=$(echo "$end - $start" | bc)"
