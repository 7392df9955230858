#!/usr/bin/env bash
# bench/camera/run.sh [RUNS] — time-to-stream of a camera on loopback, measured
# by `petrel probe` (a headless WHEP viewer), RUNS sessions (default 30) each:
#   warm  — the RTSP session is open; the viewer starts from the cached GOP
#   cold  — no session until the viewer comes (idle_after 300ms, sessions 1.5 s apart)
#   each direct and relayed (iceTransportPolicy relay through the embedded TURN),
#   and the HTTP live fallback (fragmented MP4) against the warm camera;
#   a WebRTC camera (`petrel camera webrtc`) through the SFU (WHEP), in a direct
#   session, and in a direct session relayed by the TURN server, each of the two
#   direct ones with trickle ICE (the default) and without (--no-trickle):
#   interleaved, one session of each in turn, so that the machine's load hits
#   all five alike.
# The camera is `petrel camera emulate` (RTSP, H.264 640x360 25 fps GOP 1 s).
# Writes bench/camera/results.json and the "Camera time-to-stream" section of
# docs/benchmarks.md (between its markers).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-30}
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
rtsp_port=$(free_port); http_port=$(free_port); turn_port=$(free_port); udp_port=$(free_port)

"$bin" camera emulate --addr "127.0.0.1:$rtsp_port" --clip "$work/clip" >"$work/emulate.out" 2>"$work/emulate.log" &
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
  - id: warm
    rtsp: rtsp://127.0.0.1:$rtsp_port/warm
    warm: true
  - id: cold
    rtsp: rtsp://127.0.0.1:$rtsp_port/cold
    idle_after: 300ms
  - id: lobby
    webrtc: true
YAML
"$bin" serve --config "$work/petrel.yaml" >"$work/serve.out" 2>"$work/serve.log" &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null && break; sleep 0.1; done
sleep 2 # the warm camera connects, the cold one is described
admin=$("$bin" token --admin --identity bench | tail -1)
camtok=$(curl -sf -X POST -H "Authorization: Bearer $admin" "http://127.0.0.1:$http_port/v1/cameras/lobby/token" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
"$bin" camera webrtc --loopback --url "ws://127.0.0.1:$http_port/v1/rtc" --token "$camtok" --clip "$work/clip" >"$work/webrtc.out" 2>"$work/webrtc.log" &
pids+=($!)
sleep 2

probe() { # name, args...
	local name=$1; shift
	echo "== $name" >&2
	"$bin" probe --server "http://127.0.0.1:$http_port" --loopback --json --runs "$runs" "$@" | tail -1 |
		python3 -c 'import json,sys; d=json.load(sys.stdin); d["name"]=sys.argv[1]; print(json.dumps(d))' "$name"
}
{
	probe "warm, direct" warm
	probe "warm, relay" --relay warm
	probe "cold, direct" --interval 1500ms cold
	probe "cold, relay" --relay --interval 1500ms cold
	probe "warm, HTTP fallback (live.mp4)" --http warm
} >"$work/results.jsonl"
# The WebRTC camera: SFU, direct, direct relayed, one session of each in turn.
for i in $(seq "$runs"); do
	for mode in "through the SFU (WHEP)|" "direct session|--direct" "direct session, relay|--direct --relay" \
		"direct session, no trickle|--direct --no-trickle" "direct session, relay, no trickle|--direct --relay --no-trickle"; do
		"$bin" probe --server "http://127.0.0.1:$http_port" --loopback --json --runs 1 --timeout 10s ${mode#*|} lobby 2>>"$work/direct-errors.log" | head -1 |
			python3 -c 'import json,sys; l=sys.stdin.read().strip(); print(json.dumps({"name": sys.argv[1], **(json.loads(l) if l else {})}))' "WebRTC camera, ${mode%%|*}" >>"$work/webrtc-runs.jsonl" || true
		sleep 0.3
	done
done
python3 - "$work/webrtc-runs.jsonl" "$runs" >>"$work/results.jsonl" <<'PY'
import json, sys
steps = {"pc_created": "pcCreated", "offer_created": "offerCreated", "answer_arrived": "answerArrived", "ice_connected": "iceConnected",
         "dtls_connected": "dtlsConnected", "first_rtp": "firstRtp", "first_frame": "firstFrame"}
by = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    by.setdefault(r["name"], []).append(r.get("result"))
for name, rs in by.items():
    ok = [r for r in rs if r]
    summary = {}
    for step, key in steps.items():
        ds = sorted(r[key] / 1e6 for r in ok if r.get(key))
        if ds:
            pick = lambda p: ds[max(0, min((p * len(ds) + 99) // 100 - 1, len(ds) - 1))]
            summary[step] = {"p50": pick(50), "p90": pick(90), "max": ds[-1]}
    print(json.dumps({"name": name, "runs": int(sys.argv[2]), "ok": len(ok), "summary": summary}))
PY
cp "$work/results.jsonl" bench/camera/results.json

python3 - "$work/results.jsonl" "$runs" <<'PY'
import json, sys, datetime, platform, os, re
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs = sys.argv[2]
def cell(r, step, k):
    v = r["summary"].get(step, {}).get(k)
    return "—" if v is None else f"{v:.0f}" if v >= 10 else f"{v:.1f}"
out = [
    "<!-- camera-bench:start -->",
    "## Camera time-to-stream",
    "",
    f"`bench/camera/run.sh` on {datetime.date.today()} ({os.cpu_count()} CPUs, shared with other work; load average {os.getloadavg()[0]:.1f} at the end).",
    f"`petrel probe` opens {runs} WHEP sessions per row, one after another, on loopback, to a camera served by",
    "`petrel camera emulate` (RTSP, H.264 640×360 at 25 fps, a keyframe every second). Times in ms from",
    "the start of the session (peer connection created) to each step, p50 / p90; *first frame* is the",
    "first complete H.264 access unit with SPS/PPS received (for the HTTP fallback: the first complete",
    "`moof`+`mdat` after the init segment).",
    "",
    "| session | ok | ICE connected p50 / p90 | DTLS p50 / p90 | first RTP p50 / p90 | **first frame p50 / p90** |",
    "|---|---|---|---|---|---|",
]
for r in rows:
    out.append(f"| {r['name']} | {r['ok']}/{r['runs']} | {cell(r,'ice_connected','p50')} / {cell(r,'ice_connected','p90')} | "
               f"{cell(r,'dtls_connected','p50')} / {cell(r,'dtls_connected','p90')} | {cell(r,'first_rtp','p50')} / {cell(r,'first_rtp','p90')} | "
               f"**{cell(r,'first_frame','p50')} / {cell(r,'first_frame','p90')}** |")
by = {r["name"]: r["summary"].get("first_frame", {}).get("p50") for r in rows}
def goal(ok): return "met" if ok else "**missed**"
w, c, wr, cr = by.get("warm, direct"), by.get("cold, direct"), by.get("warm, relay"), by.get("cold, relay")
out += ["", "Goals (loopback): "
        + f"warm p50 < 150 ms: {goal(w is not None and w < 150)} ({w:.1f} ms); "
        + f"cold p50 < 400 ms: {goal(c is not None and c < 400)} ({c:.1f} ms); "
        + (f"relay adds < 50 ms: {goal(wr - w < 50 and cr - c < 50)} (warm {wr - w:+.1f} ms, cold {cr - c:+.1f} ms)." if None not in (w, c, wr, cr) else "relay: no data."),
        "",
        "How to read it: a new viewer of a camera is started from the cached GOP (keyframe with parameter sets,",
        "then the frames since). The replay runs on the track's forwarding goroutine when the camera's next packet",
        "arrives after DTLS is up, so a warm start waits up to one frame interval (40 ms at 25 fps) after DTLS. A",
        "cold start is quicker here: the viewer's keyframe request opens the RTSP session (the camera was described",
        "at start, its tracks exist), PLAY overlaps ICE and DTLS, and the camera's first packets, an IDR, arrive just",
        "after. Relay through the embedded TURN server on the same host adds no measurable time (probe --relay",
        "accepts the relay pair at once; Pion otherwise waits 2 s for a better one). The HTTP fallback has no ICE or",
        "DTLS and starts from the same cache: on loopback it is the fastest start, but it is video only, over TCP,",
        "with no real-time loss recovery; it is the fallback for networks where UDP and TURN both fail.",
        ""]
d, sfu, dr = by.get("WebRTC camera, direct session"), by.get("WebRTC camera, through the SFU (WHEP)"), by.get("WebRTC camera, direct session, relay")
if None not in (d, sfu, dr):
    out += ["The WebRTC camera rows (`petrel camera webrtc`, the same clip) were measured interleaved: one session of each",
            "row in turn (through the SFU, direct, direct through the TURN server, the last two without trickle too). A direct session's clock starts after the",
            "probe has joined the camera's room (the room connection is the viewer's standing signaling channel; WHEP needs",
            "none); its offer and answer travel as relay messages through the server. The camera answers on a new peer",
            "connection and makes a keyframe once DTLS is up (no GOP cache: the media does not pass the server), so first",
            f"RTP follows DTLS by one frame interval at most. First frame p50: direct {d:.1f} ms, through the SFU {sfu:.1f} ms",
            f"({d / sfu:.2f}x); relayed direct {dr:.1f} ms ({dr - d:+.1f} ms for the relay). On a loaded shared machine",
            "differences of a few tens of ms between these rows are within the noise (compare the p90s)."]
nt, ntr = by.get("WebRTC camera, direct session, no trickle"), by.get("WebRTC camera, direct session, relay, no trickle")
if None not in (d, dr, nt, ntr):
    out += ["",
            "Trickle ICE in direct sessions (the default): the viewer sends its offer as soon as it is set and its",
            "candidates after it as relay messages, and the camera answers at once and trickles its own; `--no-trickle`",
            "gathers every candidate before the offer (and the camera, seeing no `a=ice-options:trickle`, before its",
            f"answer), as before. First frame p50, interleaved in the same run: direct {d:.1f} ms with trickle against",
            f"{nt:.1f} ms without ({d / nt:.2f}x); relayed {dr:.1f} ms against {ntr:.1f} ms ({dr / ntr:.2f}x). On loopback",
            "host candidates are gathered in about a millisecond, so trickle has nothing to save on the direct rows (the",
            "candidate messages cost about what the wait for gathering did); on the relayed rows the offer no longer waits",
            "for the TURN allocation. Networks where server-reflexive and relay candidates take a STUN or TURN round",
            "trip each, where trickle should matter more, were not measured."]
out += ["<!-- camera-bench:end -->"]
text = "\n".join(out) + "\n"
doc = "docs/benchmarks.md"
cur = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n"
if "<!-- camera-bench:start -->" in cur:
    cur = re.sub(r"<!-- camera-bench:start -->.*?<!-- camera-bench:end -->\n?", lambda m: text, cur, flags=re.S)
else:
    cur = cur.rstrip("\n") + "\n\n" + text
open(doc, "w").write(cur)
print(text)
PY
