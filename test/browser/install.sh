#!/bin/sh
# Installs what the browser tests need on a fresh Debian machine, as root:
# the system browsers (the tests drive /usr/bin/chromium and /usr/bin/firefox-esr;
# no browser is downloaded by npm) and the Node packages of web/ and test/browser/.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

if ! command -v chromium >/dev/null || ! command -v firefox-esr >/dev/null || ! command -v npm >/dev/null; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium firefox-esr nodejs npm fonts-dejavu-core
fi
(cd "$root/web" && npm ci --no-audit --no-fund)
(cd "$here" && npm ci --no-audit --no-fund)
