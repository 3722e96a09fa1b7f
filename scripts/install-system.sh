#!/usr/bin/env bash
# Install the Debian/Ubuntu packages the testbed needs; idempotent (no apt-get at all when
# everything is present). Run as root.
set -euo pipefail

packages=(
  iproute2            # ip netns, veth, bridge, ss
  util-linux          # setpriv (start Cassandra without CAP_IPC_LOCK)
  procps
  openjdk-17-jre-headless
  maven               # assembles Cassandra from Maven Central
  python3 python3-venv python3-pip
  ca-certificates
  qemu-system-x86     # the netem gateway VM (kernels without sch_netem)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# The gateway image is built from Debian packages fetched with apt-get download: the
# package lists must exist even when nothing is missing.
have_lists() { compgen -G "/var/lib/apt/lists/*_Packages" > /dev/null; }
if ((${#missing[@]} == 0)); then
  echo "system packages: all present"
  if ! have_lists; then
    [[ $(id -u) -eq 0 ]] || { echo "error: no apt package lists and not root" >&2; exit 1; }
    apt-get update -q
  fi
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "error: missing packages (${missing[*]}) and not root: run as root" >&2
  exit 1
fi
echo "system packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
