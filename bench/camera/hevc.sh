#!/usr/bin/env bash
# bench/camera/hevc.sh [RUNS] — an H.265 camera's transcoder (camera/hevc.go):
# first frame through it (idle: each session starts ffmpeg; running: another
# viewer holds it), against the same picture from an H.264 camera, and ffmpeg's
# CPU for one 640x360 25 fps camera. Prints the probe's summaries and the CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-9}
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
bin=$work/petrel
go build -o "$bin" ./cmd/petrel
bash scripts/make-test-clip.sh "$work/clip" 10
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
p265=$(free_port); p264=$(free_port); http_port=$(free_port); turn_port=$(free_port); udp_port=$(free_port)
"$bin" camera emulate --addr "127.0.0.1:$p265" --clip "$work/clip" --video h265 --no-audio >/dev/null 2>"$work/e265.log" &
pids+=($!)
"$bin" camera emulate --addr "127.0.0.1:$p264" --clip "$work/clip" --no-audio >/dev/null 2>"$work/e264.log" &
pids+=($!)
export PETREL_API_KEY=bench PETREL_API_SECRET=bench-secret-bench-secret-bench-secret-0
cat >"$work/petrel.yaml" <<YAML
http: 127.0.0.1:$http_port
loopback: true
log_level: warn
rtc:
  udp_port: $udp_port
  tcp_port: -1
turn:
  port: $turn_port
cameras:
  - id: hevc
    rtsp: rtsp://127.0.0.1:$p265/hevc
    warm: true
  - id: avc
    rtsp: rtsp://127.0.0.1:$p264/avc
    warm: true
YAML
"$bin" serve --config "$work/petrel.yaml" >"$work/serve.out" 2>"$work/serve.log" &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null && break; sleep 0.1; done
sleep 3
probe() { # name, args...
	local name=$1; shift
	echo "== $name" >&2
	"$bin" probe --server "http://127.0.0.1:$http_port" --loopback --browser-codecs --json --runs "$runs" "$@" | tail -1 |
		python3 -c 'import json,sys; d=json.load(sys.stdin); d["name"]=sys.argv[1]; print(json.dumps(d))' "$name"
}
probe "H.264 camera, warm" avc
# 4 s apart: the transcoder stops 3 s after its last viewer, so each session starts it.
probe "H.265 camera, transcoder idle" --interval 4s hevc
# One viewer holds the transcoder (live.mp4 read to nowhere) while the probe measures and the CPU is sampled.
tok=$("$bin" token --room camera/hevc --identity holder --subscribe | tail -1)
curl -sN -H "Authorization: Bearer $tok" "http://127.0.0.1:$http_port/v1/cameras/hevc/live.mp4" >/dev/null &
pids+=($!)
sleep 4
probe "H.265 camera, transcoder running" hevc
status() {
	curl -sf -H "Authorization: Bearer $("$bin" token --room camera/hevc --identity st | tail -1)" "http://127.0.0.1:$http_port/v1/cameras/hevc/status" |
		python3 -c 'import json,sys; print(json.load(sys.stdin).get("videoNote"))'
}
note=$(status)
echo "$note"
pid=$(sed -n 's/.*(pid \([0-9]*\).*/\1/p' <<<"$note")
hz=$(getconf CLK_TCK)
t0=$(awk '{print $14+$15}' "/proc/$pid/stat"); sleep 10; t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
echo "ffmpeg pid $pid: $(( (t1 - t0) * 100 / hz / 10 ))% of one core over 10 s (load average $(cut -d' ' -f1 /proc/loadavg))"
