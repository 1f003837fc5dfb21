#!/usr/bin/env bash
# Installs (or finds) iproute2's ip and bridge, with which the agent's tests build network
# namespaces, veth pairs and a bridge (test/site/netsite). Idempotent: with both already there it
# changes nothing. Prints the binary's path on stdout; apt's progress
# goes to stderr. Needs root (or sudo) only when it has to install.
set -euo pipefail

bin=/usr/sbin/ip
say() { printf 'iproute2: %s\n' "$*" >&2; }

if [ ! -x "$bin" ] || [ ! -x /usr/sbin/bridge ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      say "$bin is missing and installing it needs root: run 'apt-get install -y iproute2' as root"
      exit 1
    fi
    sudo=sudo
  fi
  say "installing Debian's iproute2 with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2
  $sudo apt-get install -y -qq --no-install-recommends iproute2 >&2
fi
if [ ! -x "$bin" ]; then
  say "apt-get finished but $bin is still missing"
  exit 1
fi
echo "$bin"
