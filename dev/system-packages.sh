#!/usr/bin/env bash
# Installs the Debian packages the local real node runs on, when any is missing: containerd and
# runc (the container runtime), the CNI plugins (the pod bridge), docker-registry (the loopback
# image registry), debootstrap (the images' root filesystem), buildah (torchgate's own image,
# built from the Dockerfile), iproute2 and iptables (kube-proxy); and what tests run as a person
# or an operator would: tmux (`torchgate top` in a real terminal) and prometheus (with promtool:
# the dashboards' queries and the alert rules against a real Prometheus). Needs root (apt-get);
# a machine that has them all needs nothing.
set -euo pipefail
packages=(
    containerd runc containernetworking-plugins docker-registry debootstrap buildah iproute2 iptables
    tmux prometheus
)
missing=()
for package in "${packages[@]}"; do
    [[ $(dpkg-query -W -f='${Status}' "$package" 2>/dev/null) == *"ok installed"* ]] \
        || missing+=("$package")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "the real node needs these Debian packages: ${missing[*]}; install them as root:" >&2
    echo "  apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
fi
echo "installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
# The tests start their own Prometheus (loopback, a temporary directory); the package's service,
# where systemd started one, would listen on every address: stop it.
if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null \
    && systemctl is-system-running >/dev/null 2>&1; then
    systemctl disable --now prometheus >&2 || true
fi
