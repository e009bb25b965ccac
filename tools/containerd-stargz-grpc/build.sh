#!/usr/bin/env bash
# Build containerd-stargz-grpc (main.go beside this script) from Debian's stargz-snapshotter library, once per
# source: the binary lands in $TRAINIMG_TOOLS_DIR/bin (default /opt/trainimg-tools/bin) with a stamp of what it was
# built from (this folder's files and the library's package version); an up-to-date binary is left alone. Prints
# the binary's path. Called by .ci/setup-host and by the lazy node's fixture (tests/lazynode.py), so a changed
# main.go is rebuilt before a test uses it. Needs golang-go and golang-github-containerd-stargz-snapshotter-dev.
#
# The one gap in bookworm's packages (shared/reference/nodes.md, "Lazy pulling"): service/resolver/cri.go imports
# k8s.io/cri-api's v1alpha2, which bookworm does not package. A GOPATH placed first holds a copy of service/*.go and
# of service/resolver/registry.go alone, so the service package builds without the CRI resolver nobody here uses.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
tools=${TRAINIMG_TOOLS_DIR:-/opt/trainimg-tools}
bin=$tools/bin/containerd-stargz-grpc
gocode=/usr/share/gocode
lib=$gocode/src/github.com/containerd/stargz-snapshotter

library=$(dpkg-query -W -f='${Version}' golang-github-containerd-stargz-snapshotter-dev 2>/dev/null) || {
  echo "build.sh: golang-github-containerd-stargz-snapshotter-dev is not installed (.ci/setup-host installs it)" >&2
  exit 1
}
command -v go >/dev/null 2>&1 || { echo "build.sh: no go here (.ci/setup-host installs golang-go)" >&2; exit 1; }
stamp="$(cat "$here/main.go" "$here/build.sh" | sha256sum | cut -d' ' -f1) $library"
built() { [ -x "$bin" ] && [ "$(cat "$bin.source" 2>/dev/null)" = "$stamp" ]; }
if built; then echo "$bin"; exit 0; fi

mkdir -p "$tools/bin"
exec 9>"$tools/bin/.containerd-stargz-grpc.lock"
flock 9  # two test workers may ask at once: one builds, the other finds it built
if built; then echo "$bin"; exit 0; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
service=$work/gopath/src/github.com/containerd/stargz-snapshotter/service
mkdir -p "$service/resolver" "$work/cmd"
cp "$lib"/service/*.go "$service/"
cp "$lib/service/resolver/registry.go" "$service/resolver/"
cp "$here/main.go" "$work/cmd/"
echo "build.sh: building $bin (GOPATH mode, Debian's library $library)" >&2
(cd "$work/cmd" && GO111MODULE=off GOFLAGS= GOPATH="$work/gopath:$gocode" GOCACHE="$tools/go-cache" \
  go build -o "$bin.new" main.go)
mv "$bin.new" "$bin"
echo "$stamp" >"$bin.source"
echo "$bin"
