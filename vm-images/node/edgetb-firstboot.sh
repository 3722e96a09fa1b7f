#!/bin/sh
# Runs at every boot before the network and sshd: configures this VM from the kernel
# command line the testbed wrote into its domain definition (the base image is shared;
# nothing host-specific is baked into it).
#   edgetb.name=e0  edgetb.addr=10.77.0.11/24  edgetb.key=<base64 of an OpenSSH public key>
set -eu
name="" addr="" key=""
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    edgetb.name=*) name="${arg#edgetb.name=}" ;;
    edgetb.addr=*) addr="${arg#edgetb.addr=}" ;;
    edgetb.key=*) key="${arg#edgetb.key=}" ;;
  esac
done
if [ -n "$name" ]; then
  echo "$name" > /etc/hostname
  hostname "$name"
  printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$name" > /etc/hosts
fi
ip link set lo up
if [ -n "$addr" ]; then
  ip link set eth0 up
  ip addr flush dev eth0
  ip addr add "$addr" dev eth0
fi
mkdir -p -m 700 /root/.ssh
if [ -n "$key" ]; then
  echo "$key" | base64 -d > /root/.ssh/authorized_keys
  chmod 600 /root/.ssh/authorized_keys
fi
# The host key is made per VM on its first boot (the image ships none): Ed25519 only,
# the one sshd offers (sshd_config.conf); RSA's 3072-bit key took seconds of a TCG boot.
[ -f /etc/ssh/ssh_host_ed25519_key ] ||
  ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key
