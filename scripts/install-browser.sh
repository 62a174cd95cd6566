#!/bin/sh
# Install Debian's chromium for the browser tests (tests/service/web), if it is missing.
#
# The web tests drive /usr/bin/chromium with the Python `playwright` package;
# `playwright install` (a browser download) is never used. Set
# TRIAGE_SKIP_BROWSER=1 to skip it; the browser tests then skip too (otherwise a
# missing browser fails them).
set -eu

CHROMIUM="${TRIAGE_CHROMIUM:-/usr/bin/chromium}"

if [ "${TRIAGE_SKIP_BROWSER:-0}" = "1" ]; then
    echo "install-browser: TRIAGE_SKIP_BROWSER=1, not installing chromium"
    exit 0
fi
sh "$(dirname "$0")/install-debian.sh" "$CHROMIUM" chromium fonts-liberation
"$CHROMIUM" --version 2>/dev/null || true
