#!/usr/bin/env bash
# Installs (or finds) the grub-editenv the local site's played Kairos hosts read and write their
# boot-assessment GRUB environment block with (test/site/kairosplay): Debian's grub-common, at
# /usr/bin/grub-editenv (Kairos names the same tool grub2-editenv). No boot loader is installed
# or touched: grub-common holds GRUB's user-space tools only. Idempotent: with grub-editenv
# already there it changes nothing. Prints the binary's path on stdout; apt's progress goes to
# stderr. Needs root (or sudo) only when it has to install.
set -euo pipefail

bin=/usr/bin/grub-editenv
say() { printf 'grub-common: %s\n' "$*" >&2; }

if [ ! -x "$bin" ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      say "$bin is missing and installing it needs root: run 'apt-get install -y grub-common' as root"
      exit 1
    fi
    sudo=sudo
  fi
  say "installing Debian's grub-common with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2
  $sudo apt-get install -y -qq --no-install-recommends grub-common >&2
fi
if [ ! -x "$bin" ]; then
  say "apt-get finished but $bin is still missing"
  exit 1
fi
echo "$bin"
