#!/usr/bin/env bash
# Installs (or finds) the Chromium the web UI's browser tests drive (internal/ui): Debian's own
# package, at /usr/bin/chromium. Tests never download a browser of their own. Idempotent: with
# Chromium already there it changes nothing. Prints the binary's path on stdout; apt's progress
# goes to stderr. Needs root (or sudo) only when it has to install.
set -euo pipefail

bin=/usr/bin/chromium
say() { printf 'chromium: %s\n' "$*" >&2; }

if [ ! -x "$bin" ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      say "$bin is missing and installing it needs root: run 'apt-get install -y chromium' as root"
      exit 1
    fi
    sudo=sudo
  fi
  say "installing Debian's chromium with apt-get (a minute or two)"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2
  $sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
fi
if [ ! -x "$bin" ]; then
  say "apt-get finished but $bin is still missing"
  exit 1
fi
echo "$bin"
