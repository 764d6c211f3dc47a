#!/usr/bin/env bash
# Builds the local control plane (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy, etcd, kwok) of one supported Kubernetes version from their Go modules and caches the
# binaries in a folder keyed on the versions, so each version is built once and kept beside the
# others.
#
# Why from Go modules: the build machines reach the Go module proxy but no release download site
# and no container registry, so kind, envtest's setup-envtest and kwokctl's downloads cannot work.
# One wrapper module per supported minor (k8s-<major>.<minor>/ next to this script) pins
# k8s.io/kubernetes and its staging modules (whose published go.mod requires them at the
# non-existent v0.0.0); etcd/ and kwok/ serve every version.
#
# Usage: dev/torchgate_dev/data/controlplane/build.sh [VERSION]
#   VERSION: one of KUBERNETES_VERSIONS in versions.env, with or without the leading v
#   (default: the first, the newest). Anything else is refused, naming the supported ones.
#   Prints progress to stderr and, last, the binary folder on stdout.
#   TORCHGATE_CACHE_DIR overrides the cache root (default: ${XDG_CACHE_HOME:-~/.cache}/torchgate).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

read -r -a supported <<<"$KUBERNETES_VERSIONS"
names=$(printf '%s, ' "${supported[@]#v}")
names=${names%, }
if (( $# > 1 )); then
    log "usage: $0 [VERSION]  (VERSION: one of $names)"
    exit 2
fi
K8S_VERSION=v${1:-${supported[0]}}
K8S_VERSION=v${K8S_VERSION#v}  # "1.37.2", "v1.37.2" and the default all become "v1.37.2"
if [[ " ${supported[*]} " != *" $K8S_VERSION "* ]]; then
    log "error: Kubernetes ${K8S_VERSION#v} is not supported; supported: $names"
    exit 2
fi
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
module="$here/k8s-1.${minor}"
staging="v0.${K8S_VERSION#v1.}"
# The wrapper module must build exactly this version: the binaries are stamped with it.
pinned=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$module/go.mod" 2>/dev/null || true)
stray=$(awk -v want="$staging" '$1 == "replace" && $5 != want {print $2 " " $5; exit}' "$module/go.mod" 2>/dev/null || true)
if [[ $pinned != "$K8S_VERSION" || -n $stray ]]; then
    log "error: $module/go.mod pins k8s.io/kubernetes ${pinned:-nothing} (want $K8S_VERSION)${stray:+ and staging modules not at $staging: $stray}"
    exit 1
fi

cache_root=${TORCHGATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/torchgate}
key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
bin="$cache_root/bin/$key"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=readonly -trimpath -buildvcs=false"

have_version() {  # $1 binary, $2 expected substring of its --version output
    # The output is read whole, not piped into `grep -q`: grep exits at its first match, the
    # binary may then die of SIGPIPE, and pipefail turned that into "not cached" (a needless rebuild).
    local out
    [[ -x "$1" ]] && out=$("$1" --version 2>/dev/null) && [[ $out == *"$2"* ]]
}

if ! command -v go >/dev/null; then
    log "error: 'go' is not on PATH; Go >= 1.26 is needed to build the control plane"
    exit 1
fi

mkdir -p "$bin"
start=$(date +%s)

k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
need_k8s=0
for b in "${k8s_bins[@]}"; do
    have_version "$bin/$b" "Kubernetes ${K8S_VERSION}" || need_k8s=1
done
if [[ $need_k8s == 1 ]]; then
    log "building ${k8s_bins[*]} ${K8S_VERSION} (cold: 5-10 min on 2 cores; warm Go cache: ~1 min)"
    minor=$(echo "$K8S_VERSION" | cut -d. -f2)
    ldflags="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $p.gitVersion=${K8S_VERSION} -X $p.gitMajor=1 -X $p.gitMinor=${minor}"
        ldflags+=" -X $p.gitTreeState=clean"
    done
    (cd "$module" && go build -ldflags "$ldflags" -o "$bin/" \
        k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler \
        k8s.io/kubernetes/cmd/kubelet \
        k8s.io/kubernetes/cmd/kube-proxy)
    log "built ${k8s_bins[*]} in $(( $(date +%s) - start ))s"
else
    log "kube-apiserver, kube-controller-manager, kube-scheduler ${K8S_VERSION}: cached"
fi

if ! have_version "$bin/etcd" "etcd Version: ${ETCD_VERSION#v}"; then
    log "building etcd ${ETCD_VERSION}"
    t=$(date +%s)
    (cd "$here/etcd" && go build -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
    log "built etcd in $(( $(date +%s) - t ))s"
else
    log "etcd ${ETCD_VERSION}: cached"
fi

if ! have_version "$bin/kwok" "${KWOK_VERSION#v}"; then
    log "building kwok ${KWOK_VERSION}"
    t=$(date +%s)
    (cd "$here/kwok" && go build -ldflags "-s -w" -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok)
    log "built kwok in $(( $(date +%s) - t ))s"
else
    log "kwok ${KWOK_VERSION}: cached"
fi

# kwok's upstream Stage YAMLs live in the module cache; the harness reads them from here.
stages_src=$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
if [[ ! -d "$bin/stages" ]]; then
    mkdir -p "$bin/stages"
    cp "$stages_src/node/fast/node-initialize.yaml" \
        "$stages_src/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
        "$stages_src/pod/fast/pod-ready.yaml" \
        "$stages_src/pod/fast/pod-delete.yaml" "$bin/stages/"
    chmod u+w "$bin/stages/"*
fi

log "control plane binaries ready in $bin ($(du -sh "$bin" | cut -f1), $(( $(date +%s) - start ))s)"
echo "$bin"
