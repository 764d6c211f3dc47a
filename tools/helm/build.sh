#!/usr/bin/env bash
# Builds helm (v3) from its Go module and caches the binary in a folder keyed on the pinned version.
#
# Why from the Go module: the build machines reach the Go module proxy but no release download
# site (get.helm.sh), so the tests that lint and render the chart build helm the same way as the
# control-plane binaries (dev/torchgate_dev/data/controlplane/build.sh). The version is pinned once, by the require
# line in go.mod next to this script (go.sum pins every dependency); the cache key is derived from
# it, so bumping go.mod rebuilds. helm v3.21.x declares `go 1.26.0` and k8s.io/* v0.36.x, which
# matches Go 1.26 here; its client talks to both supported control planes (1.36 and 1.37).
#
# Usage: tools/helm/build.sh
#   Prints progress to stderr and, last, the path of the helm binary on stdout.
#   TORCHGATE_CACHE_DIR overrides the cache root (default: ${XDG_CACHE_HOME:-~/.cache}/torchgate).
#   Cold (empty Go caches, 2 cores): downloads + compiles, several minutes; warm: ~1 s.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf '[helm-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v go >/dev/null; then
    log "error: 'go' is not on PATH; Go >= 1.26 is needed to build helm"
    exit 1
fi

# The one pin: `require helm.sh/helm/v3 vX.Y.Z` in go.mod. client-go's minor tells helm which
# Kubernetes version to assume for `helm template` (.Capabilities.KubeVersion) and for lint's
# deprecation checks; without it helm assumes v1.20.
helm_version=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" { print $3 }' "$here/go.mod")
k8s_minor=$(awk '$1 == "k8s.io/client-go" { split($2, v, "."); print v[2] }' "$here/go.mod")
if [[ -z $helm_version || -z $k8s_minor ]]; then
    log "error: cannot read the helm or client-go version from $here/go.mod"
    exit 1
fi

cache_root=${TORCHGATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/torchgate}
bin="$cache_root/bin/helm-${helm_version}"
helm="$bin/helm"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=readonly -trimpath -buildvcs=false"

start=$(date +%s)
if [[ -x $helm ]] && [[ $("$helm" version --template '{{.Version}}' 2>/dev/null) == "$helm_version" ]]; then
    log "helm ${helm_version}: cached ($helm)"
else
    log "building helm ${helm_version} (cold: several minutes on 2 cores; warm Go cache: seconds)"
    mkdir -p "$bin"
    pkg=helm.sh/helm/v3
    ldflags="-s -w -X $pkg/internal/version.version=${helm_version}"
    ldflags+=" -X $pkg/internal/version.gitTreeState=clean"
    for p in $pkg/pkg/chartutil $pkg/pkg/lint/rules; do
        ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=${k8s_minor}"
    done
    t=$(date +%s)
    # Resolving the package graph downloads exactly the modules the build needs (go.sum-checked).
    log "downloading modules (none when the module cache has them)"
    (cd "$here" && go list -deps helm.sh/helm/v3/cmd/helm >/dev/null)
    log "modules ready in $(( $(date +%s) - t ))s; compiling"
    t=$(date +%s)
    # Build into a temporary name and rename, so an interrupted build never leaves a broken binary
    # that a later run would take for a cached one.
    (cd "$here" && go build -ldflags "$ldflags" -o "$helm.partial" helm.sh/helm/v3/cmd/helm)
    mv -f "$helm.partial" "$helm"
    log "compiled helm in $(( $(date +%s) - t ))s"
    actual=$("$helm" version --template '{{.Version}}')
    if [[ $actual != "$helm_version" ]]; then
        log "error: built helm reports version '$actual', expected '$helm_version'"
        exit 1
    fi
fi

log "helm ${helm_version} ready in $(( $(date +%s) - start ))s: $helm"
echo "$helm"
