#!/usr/bin/env bash
# Install the Debian/Ubuntu packages a part of the testbed needs; idempotent (no apt-get
# at all when everything is present). Run as root.
#
#   install-system.sh [GROUP...]   GROUP: core (default), vms, ycsb, tests, dev, all
#
# core: a sweep on namespaces (Cassandra, both shapers); vms: QEMU and libvirt (the VM
# backend, the netem gateway VM); ycsb: javac for the project's YCSB binding (core has it
# too: quiet nodes' class); tests: what the tests' own instruments need beyond those;
# dev: what building every Python extra needs (make install, make lint).
set -euo pipefail

core=(
  iproute2            # ip netns, veth, bridge, ss
  util-linux          # setpriv (start Cassandra without CAP_IPC_LOCK)
  procps
  openjdk-17-jre-headless
  maven               # assembles Cassandra from Maven Central
  openjdk-17-jdk-headless  # javac: quiet nodes' one rebuilt class, the YCSB binding
  python3 python3-venv python3-pip
  ca-certificates
  # the host shaper (kernels without sch_netem): netfilter queues in the testbed's
  # namespaces, a delayer compiled at set-up, offloads off on the testbed's links
  iptables libnetfilter-queue-dev libmnl-dev ethtool gcc
  tcpdump iputils-ping  # what a researcher checks the shaping with (and the tests do)
)
dev=(
  # to build libvirt-python (the vms extra; PyPI has only its source) against libvirt and
  # Python's headers (a system python3 has none without python3-dev)
  libvirt-dev pkg-config gcc python3-dev
)
vms=(
  libvirt-dev pkg-config python3-dev  # to build libvirt-python (the vms extra)
  qemu-system-x86     # the netem gateway VM (--shaper gateway), the VM backend
  # the libvirt backend: libvirtd, its network helper, the image build, SSH to the VMs
  libvirt-daemon-system libvirt-daemon-driver-qemu dnsmasq-base
  debootstrap qemu-utils e2fsprogs openssh-client
)
ycsb=(
  openjdk-17-jdk-headless  # javac: the project's YCSB binding is built at set-up
)
tests=(
  # the tests' leak check lists the machine's netfilter state with nft as well as with
  # iptables-save (a rule made through either shows in nft), and its VMs with virsh; a
  # missing tool fails it (`make unit` alone, without the VM packages, needs virsh too)
  nftables libvirt-clients
)

groups=("$@")
((${#groups[@]})) || groups=(core)
packages=()
want_vms=0
for g in "${groups[@]}"; do
  case "$g" in
    core) packages+=("${core[@]}") ;;
    vms) packages+=("${vms[@]}"); want_vms=1 ;;
    ycsb) packages+=("${ycsb[@]}") ;;
    tests) packages+=("${tests[@]}") ;;
    dev) packages+=("${dev[@]}") ;;
    all) packages+=("${core[@]}" "${vms[@]}" "${ycsb[@]}" "${tests[@]}" "${dev[@]}"); want_vms=1 ;;
    *) echo "error: unknown group '$g' (core, vms, ycsb, tests, dev, all)" >&2; exit 2 ;;
  esac
done

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
  echo "system packages (${groups[*]}): all present"
  if ((want_vms)) && ! have_lists; then
    [[ $(id -u) -eq 0 ]] || { echo "error: no apt package lists and not root" >&2; exit 1; }
    apt-get update -q
  fi
else
  if [[ $(id -u) -ne 0 ]]; then
    echo "error: missing packages (${missing[*]}) and not root: run as root" >&2
    exit 1
  fi
  echo "system packages (${groups[*]}): installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

((want_vms)) || exit 0

# State directories the daemons need. On a systemd machine systemd-tmpfiles creates them
# at boot; where systemd is not PID 1 nothing does, and libvirt's network driver fails
# with "Failed to create file '/var/lib/libvirt/dnsmasq/...'". Apply the packages' own
# tmpfiles.d entries where they ship any, and create the directories libvirt uses.
shopt -s nullglob
tmpfiles=(/usr/lib/tmpfiles.d/libvirt*.conf /usr/lib/tmpfiles.d/qemu*.conf)
shopt -u nullglob
if ((${#tmpfiles[@]})) && command -v systemd-tmpfiles >/dev/null; then
  systemd-tmpfiles --create "${tmpfiles[@]}"
fi
install -d -m 0755 /var/lib/libvirt/dnsmasq /var/lib/libvirt/network /var/log/libvirt/qemu
install -d -m 0755 /run/libvirt

# /dev/kvm as udev's default rule leaves it (group kvm, group read-write), where no udev
# runs (containers, sandboxes: there it is root's alone). libvirt probes QEMU's
# capabilities as root, where KVM answers, but checks /dev/kvm as its QEMU user: when
# that user cannot open it, libvirt throws its capability cache away at every lookup and
# probes QEMU again, which made each VM start take ~55 s instead of under one. Which
# accelerator the VMs use is decided apart (testbed.accel: the gateway VM's trial).
if [[ -c /dev/kvm && ! -d /run/udev ]] && getent group kvm >/dev/null \
    && [[ "$(stat -c %G /dev/kvm)" != kvm ]]; then
  chgrp kvm /dev/kvm && chmod g+rw /dev/kvm
  echo "/dev/kvm: group kvm, as udev sets it"
fi

# libvirtd (and virtlogd, which keeps the VMs' logs) must be running for the libvirt
# backend: started through systemd where it is PID 1, else as daemons of their own.
if ! virsh -q -c qemu:///system version >/dev/null 2>&1; then
  if [[ -d /run/systemd/system ]]; then
    systemctl start virtlogd.socket libvirtd.socket libvirtd.service
  else
    pgrep -x virtlogd >/dev/null || virtlogd -d
    pgrep -x libvirtd >/dev/null || libvirtd -d
  fi
  for _ in $(seq 50); do
    virsh -q -c qemu:///system version >/dev/null 2>&1 && break
    sleep 0.2
  done
  virsh -q -c qemu:///system version >/dev/null || { echo "error: libvirtd did not start" >&2; exit 1; }
  echo "libvirtd: started"
fi
