#!/usr/bin/env bash
# Interop tests: builds and starts a real petrel on loopback, then runs the
# pytest suite in this folder (aiortc publisher, GStreamer webrtcbin and aiortc
# viewers). Everything listens and sends on 127.0.0.1 only.
#
#   test/interop/run.sh [pytest args…]
#
# PETREL_SERVE_ARGS adds flags to petrel serve.
# Needs what install.sh installs. PETREL_BIN=/path/to/petrel skips the build. PYTHON (default python3) must import aiortc
# and pytest; GST_PYTHON (default /usr/bin/python3) must import gi (python3-gi).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PYTHON=${PYTHON:-python3}
export GST_PYTHON=${GST_PYTHON:-/usr/bin/python3}

if ! "$PYTHON" -c 'import aiortc, pytest' 2>/dev/null; then
  echo "run.sh: $PYTHON cannot import aiortc and pytest: run test/interop/install.sh" >&2
  exit 2
fi
if ! "$GST_PYTHON" -c 'import gi; gi.require_version("GstWebRTC", "1.0"); from gi.repository import GstWebRTC' 2>/dev/null; then
  echo "run.sh: $GST_PYTHON cannot load GstWebRTC through gi: run test/interop/install.sh" >&2
  exit 2
fi

work=$(mktemp -d /tmp/petrel-interop.XXXXXX)
server_pid=
cleanup() {
  status=$?
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$server_pid" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ] && [ -f "$work/server.log" ]; then
    echo "--- last lines of the server log ($work/server.log) ---" >&2
    tail -n 40 "$work/server.log" >&2
  fi
  [ "$status" -eq 0 ] && rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# PETREL_BIN=/path/to/petrel tests a binary built elsewhere (no build).
if [ -z "${PETREL_BIN:-}" ]; then
  (cd "$root" && go build -o bin/petrel ./cmd/petrel)
  PETREL_BIN="$root/bin/petrel"
fi
export PETREL_BIN

export PETREL_API_KEY=testkey
PETREL_API_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export PETREL_API_SECRET
export PETREL_INTEROP_LOG="$work/server.log"

# Four ports free on 127.0.0.1 for both TCP and UDP (TURN uses one number for
# both), drawn below the kernel's ephemeral range so that programs binding port 0
# meanwhile rarely take them; a start that still loses a port is retried.
free_ports() {
  "$PYTHON" -c '
import random, socket
ports = []
while len(ports) < 4:
    p = random.randint(20000, 32000)
    if p in ports:
        continue
    try:
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            with socket.socket(socket.AF_INET, kind) as s:
                s.bind(("127.0.0.1", p))
    except OSError:
        continue
    ports.append(p)
print(*ports)'
}

healthy() {
  "$PYTHON" -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('$PETREL_INTEROP_URL/healthz', timeout=1).status == 200 else 1)" 2>/dev/null
}

for attempt in 1 2 3; do
  read -r http_port udp_port tcp_port turn_port < <(free_ports)
  export PETREL_INTEROP_URL="http://127.0.0.1:$http_port"
  "$PETREL_BIN" serve --loopback --http "127.0.0.1:$http_port" \
    --rtc-udp-port "$udp_port" --rtc-tcp-port "$tcp_port" --turn-port "$turn_port" \
    ${PETREL_SERVE_ARGS:-} >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    if healthy || ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  if healthy; then break; fi
  echo "run.sh: petrel did not start (attempt $attempt):" >&2
  tail -n 5 "$work/server.log" >&2
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
  if [ "$attempt" -eq 3 ]; then exit 1; fi
done
echo "run.sh: petrel on $PETREL_INTEROP_URL (udp $udp_port, tcp $tcp_port, turn $turn_port), log $work/server.log"

set +e
(cd "$here" && "$PYTHON" -m pytest -p no:cacheprovider -v -rxXs --durations=5 "$@" .)
rc=$?
set -e

# Bad input or a test's abrupt end must never crash the server.
if ! kill -0 "$server_pid" 2>/dev/null; then
  echo "run.sh: petrel is no longer running after the tests" >&2
  rc=1
fi
if grep -E -q '^(panic:|fatal error:)|"level":"ERROR"' "$work/server.log"; then
  echo "run.sh: the server logged a panic or an error:" >&2
  grep -E '^(panic:|fatal error:)|"level":"ERROR"' "$work/server.log" | head -n 20 >&2
  rc=1
fi
exit "$rc"
