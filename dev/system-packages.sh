#!/usr/bin/env bash
# Installs the Debian packages the local real node runs on, when any is missing: containerd and
# runc (the container runtime), the CNI plugins (the pod bridge), docker-registry (the loopback
# image registry), debootstrap (the images' root filesystem), buildah (torchgate's own image,
# built from the Dockerfile), iproute2 and iptables (kube-proxy). Needs root (apt-get); a machine
# that has them all needs nothing.
set -euo pipefail
packages=(
    containerd runc containernetworking-plugins docker-registry debootstrap buildah iproute2 iptables
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
