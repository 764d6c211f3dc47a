#!/usr/bin/env bash
# Builds the local real node's own binaries from Go modules and caches them in a folder keyed on
# the pinned versions: CoreDNS (a build with only the plugins the cluster's DNS needs, see
# coredns/main.go). kubelet and kube-proxy come from ../controlplane/build.sh, which builds them
# with the rest of the pinned k8s.io/kubernetes module.
#
# Usage: dev/torchgate_dev/data/node/build.sh
#   Prints progress to stderr and, last, the binary folder on stdout.
#   TORCHGATE_CACHE_DIR overrides the cache root (default: ${XDG_CACHE_HOME:-~/.cache}/torchgate).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
coredns_version=$(awk '$1 == "github.com/coredns/coredns" {print $2} $2 == "github.com/coredns/coredns" {print $3}' "$here/coredns/go.mod")

cache_root=${TORCHGATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/torchgate}
key="node_coredns-${coredns_version}_$(sha256sum "$here/coredns/main.go" "$here/coredns/go.sum" | sha256sum | cut -c1-12)"
bin="$cache_root/bin/$key"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=readonly -trimpath -buildvcs=false"

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v go >/dev/null; then
    log "error: 'go' is not on PATH; Go >= 1.26 is needed to build CoreDNS"
    exit 1
fi

mkdir -p "$bin"
if [[ -x "$bin/coredns" ]]; then
    log "coredns ${coredns_version}: cached"
else
    log "building coredns ${coredns_version} (cold: ~3 min on 2 cores)"
    t=$(date +%s)
    (cd "$here/coredns" && go build -ldflags "-s -w" -o "$bin/coredns.tmp" .)
    mv "$bin/coredns.tmp" "$bin/coredns"
    log "built coredns in $(( $(date +%s) - t ))s"
fi
echo "$bin"
