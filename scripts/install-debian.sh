#!/bin/sh
# Install Debian packages for a binary the project needs, if that binary is missing.
#
#   sh scripts/install-debian.sh BINARY PACKAGE [PACKAGE ...]
#
# Cheap when BINARY is already there: it checks and exits. Otherwise it runs
# apt-get non-interactively (as root, or through sudo when available),
# refreshing the package lists only when the first package has no install
# candidate, or once more when the install fails on stale lists.
set -eu

BINARY="$1"
shift
NAME=$(basename "$BINARY")

if [ -x "$BINARY" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-debian: $BINARY is missing and apt-get is not available; install $* by hand" >&2
    exit 0
fi

SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo -n"
    else
        echo "install-debian: not root and no sudo; install $* by hand" >&2
        exit 0
    fi
fi

export DEBIAN_FRONTEND=noninteractive
candidate() {
    apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'
}
install() {
    $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
updated=0
if [ -z "$(candidate "$1")" ] || [ "$(candidate "$1")" = "(none)" ]; then
    echo "install-debian: apt-get update"
    $SUDO apt-get update -qq
    updated=1
fi
echo "install-debian: apt-get install $* (for $NAME)"
if ! install "$@"; then
    [ "$updated" = "1" ] && exit 1
    echo "install-debian: apt-get update (retry)"
    $SUDO apt-get update -qq
    install "$@"
fi
