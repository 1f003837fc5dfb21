#!/usr/bin/env bash
# Installs (or finds) the drbdadm the DRBD command tests run in its dry-run mode (internal/drbd):
# Debian's drbd-utils, at /usr/sbin/drbdadm. No kernel module is needed. Idempotent: with
# drbdadm already there it changes nothing. Prints the binary's path on stdout; apt's progress
# goes to stderr. Needs root (or sudo) only when it has to install.
set -euo pipefail

bin=/usr/sbin/drbdadm
say() { printf 'drbd-utils: %s\n' "$*" >&2; }

if [ ! -x "$bin" ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      say "$bin is missing and installing it needs root: run 'apt-get install -y drbd-utils' as root"
      exit 1
    fi
    sudo=sudo
  fi
  say "installing Debian's drbd-utils with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2
  $sudo apt-get install -y -qq --no-install-recommends drbd-utils >&2
fi
if [ ! -x "$bin" ]; then
  say "apt-get finished but $bin is still missing"
  exit 1
fi
echo "$bin"
