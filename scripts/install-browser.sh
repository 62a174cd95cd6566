#!/bin/sh
# Install Debian's chromium for the browser tests (tests/web), if it is missing.
#
# The web tests drive /usr/bin/chromium with the Python `playwright` package;
# `playwright install` (a browser download) is never used. This script is cheap
# when chromium is already there: it checks the binary and exits. Otherwise it
# runs apt-get non-interactively (as root, or through sudo when available),
# refreshing the package lists only when chromium has no install candidate.
# Set TRIAGE_SKIP_BROWSER=1 to skip it; the browser tests then skip too (otherwise a
# missing browser fails them).
set -eu

CHROMIUM="${TRIAGE_CHROMIUM:-/usr/bin/chromium}"

if [ "${TRIAGE_SKIP_BROWSER:-0}" = "1" ]; then
    echo "install-browser: TRIAGE_SKIP_BROWSER=1, not installing chromium"
    exit 0
fi
if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-browser: $CHROMIUM is missing and apt-get is not available;" \
         "install chromium by hand (the browser tests fail without it)" >&2
    exit 0
fi

SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo -n"
    else
        echo "install-browser: not root and no sudo; install chromium by hand" >&2
        exit 0
    fi
fi

export DEBIAN_FRONTEND=noninteractive
candidate() {
    apt-cache policy chromium 2>/dev/null | awk '/Candidate:/ {print $2}'
}
install() {
    $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
}
updated=0
if [ -z "$(candidate)" ] || [ "$(candidate)" = "(none)" ]; then
    echo "install-browser: apt-get update"
    $SUDO apt-get update -qq
    updated=1
fi
echo "install-browser: apt-get install chromium"
if ! install; then
    # stale package lists (404s): refresh once and retry
    [ "$updated" = "1" ] && exit 1
    echo "install-browser: apt-get update (retry)"
    $SUDO apt-get update -qq
    install
fi
"$CHROMIUM" --version 2>/dev/null || true
