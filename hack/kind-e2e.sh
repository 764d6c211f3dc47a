#!/usr/bin/env bash
# Runs torchgate's e2e tests against a kind cluster, for machines with Docker and internet access
# (CI uses the local control plane built from Go modules instead; see
# dev/torchgate_dev/data/controlplane/).
#
# Creates the cluster, builds and loads the torchgate image, installs kwok in the cluster (fake
# GPU nodes) with torchgate's pod stages, then runs `pytest -m e2e` with TORCHGATE_E2E_KUBECONFIG
# pointing at the cluster. Extra arguments go to pytest.
#
# Environment: KIND_CLUSTER_NAME (default torchgate-e2e), KIND_NODE_IMAGE (default: kind's),
# KEEP_CLUSTER=1 to keep the cluster afterwards, PYTHON (default .venv/bin/python).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=../dev/torchgate_dev/data/controlplane/versions.env
source dev/torchgate_dev/data/controlplane/versions.env

cluster=${KIND_CLUSTER_NAME:-torchgate-e2e}
python=${PYTHON:-.venv/bin/python}
kubeconfig=$(mktemp -t "kind-${cluster}.XXXXXX")
kwok_release="https://github.com/kubernetes-sigs/kwok/releases/download/${KWOK_VERSION}"

cleanup() {
    if [[ ${KEEP_CLUSTER:-0} != 1 ]]; then
        kind delete cluster --name "$cluster" || true
        rm -f "$kubeconfig"
    else
        echo "kept cluster $cluster; kubeconfig: $kubeconfig" >&2
    fi
}
trap cleanup EXIT

kind create cluster --name "$cluster" --kubeconfig "$kubeconfig" --wait 120s \
    ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
docker build -t torchgate:dev .
kind load docker-image torchgate:dev --name "$cluster"

export KUBECONFIG=$kubeconfig
# kwok's in-cluster controller manages only nodes annotated kwok.x-k8s.io/node=fake; its fast
# stages make them Ready and pods Running, torchgate's stages end pods on request.
kubectl apply -f "$kwok_release/kwok.yaml"
kubectl wait --for=condition=Established --timeout=60s crd/stages.kwok.x-k8s.io
kubectl apply -f "$kwok_release/stage-fast.yaml"
"$python" -m torchgate_dev.controlplane.kwok | kubectl apply -f -
kubectl --namespace kube-system rollout status deployment/kwok-controller --timeout=180s

TORCHGATE_E2E_KUBECONFIG=$kubeconfig "$python" -m pytest -m e2e "$@"
