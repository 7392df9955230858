#!/usr/bin/env bash
# MoQ interop: moq-clock-ietf 0.6.25 (crates.io, MoQT draft-18) publishes through
# Petrel's WebTransport endpoint and a Petrel Go client receives its objects;
# then a Petrel client publishes and moq-clock-ietf subscribes through Petrel;
# moq-clock publishes OBJECT_DATAGRAMs that Petrel relays to another moq-clock;
# moq-clock joins late with a joining FETCH answered from Petrel's relay cache.
# Installs the tool first (test/interop/moq-install.sh, once per machine).
#
#   test/interop/moq-run.sh [go test flags…]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bash "$here/moq-install.sh"
export PATH="$HOME/.cargo/bin:$PATH"
cd "$root"
exec go test ./webtransport/ -run 'TestInteropMoqClock' -count=1 -v "$@"
