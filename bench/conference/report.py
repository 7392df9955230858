#!/usr/bin/env python3
"""Turns bench/conference/results/*.jsonl (one JSON object per run, written by
bench/conference/main.go) into the Markdown section "## Conferencing: Last-N,
simulcast, layer switches" (stdout) and gnuplot data files in DIR.

    report.py RESULTS_DIR DATA_DIR > section.md

Every figure is the median over the runs; savings are computed from the
medians of the same run set.
"""
import json
import os
import statistics
import sys

res_dir, data_dir = sys.argv[1], sys.argv[2]


def load(name):
    path = os.path.join(res_dir, name)
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def med(rows, key):
    v = [r[key] for r in rows if key in r]
    return statistics.median(v) if v else float("nan")


def meta(mode):
    m = {}
    path = os.path.join(res_dir, f"meta-{mode}.env")
    if os.path.exists(path):
        for line in open(path):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                m[k] = v
    return m


def when(mode):
    m = meta(mode)
    windows = "" if mode == "switch" else f", {m.get('DURATION', '?')} windows"
    return (f"Medians of {m.get('RUNS', '?')} runs{windows}; run "
            f"{m.get('STARTED', '?')} on commit {m.get('COMMIT', '?')} (load average before: {m.get('LOAD', '?')}).")


lastn = load("lastn.jsonl")
sim = load("simulcast.jsonl")
sw = load("switch.jsonl")

p = print
p("## Conferencing: Last-N, simulcast, layer switches")
p()
p("What Petrel's selectivity saves, measured with `bench/conference/run.sh`: Pion")
p("clients of the room protocol on 127.0.0.1 (`bench/conference/main.go`) and the")
p("server in its own process (`bench/cmd/benchserver`), a fresh one per")
p("configuration. Media is synthetic VP8 (30 fps, a keyframe every second or at")
p("the next frame after a keyframe request, picture IDs), no audio: audio goes")
p("to everyone whatever Last-N or simulcast decide, and 50 packets/s per audio")
p("subscription would cost the two shared cores more than the video measured.")
p("Egress is the RTP bytes (header and payload) the receivers get over a steady")
p("window; server CPU is its utime+stime over the same window, in % of one core")
p("(2 cores, shared with other work: CPU figures are noisy, egress is not).")
p("Raw runs: `bench/conference/results/`.")
p()

if lastn:
    n_part = lastn[0].get("participants", "?")
    kb = lastn[0].get("kbps", "?")
    p(f"### Last-N in a {n_part}-person room")
    p()
    p(f"{n_part} participants, each publishing one {kb} kbit/s video and receiving")
    p("every other; the room's Last-N set with `--last-n` (0: off). Nobody speaks,")
    p("so each receiver gets the N earliest joiners (the ranking is by speech, then")
    p("join time); the saving does not depend on who is chosen.")
    p(when("lastn"))
    p()
    p("| Last-N | video streams out | egress Mbit/s | saving vs off | theory (1 − N/29) | Jitsi (published) | server CPU % |")
    p("|---:|---:|---:|---:|---:|---:|---:|")
    ns = sorted({r["lastN"] for r in lastn})
    off = [r for r in lastn if r["lastN"] == 0]
    base = med(off, "egressKbps") if off else None
    jitsi = {3: "89%", 5: "82%", 8: "72%"}
    rows = []
    for n in ns:
        rs = [r for r in lastn if r["lastN"] == n]
        eg = med(rs, "egressKbps")
        cpu = med(rs, "serverCPU")
        streams = int(med(rs, "streamsFlowing"))
        others = n_part - 1 if isinstance(n_part, int) else 29
        save = f"{(1 - eg / base) * 100:.1f}%" if base and n else "–"
        theory = f"{(1 - n / others) * 100:.1f}%" if n else "–"
        p(f"| {n if n else 'off'} | {streams} | {eg / 1000:.1f} | {save} | {theory} | {jitsi.get(n, '–')} | {cpu:.1f} |")
        rows.append((n, eg / 1000, cpu))
    with open(os.path.join(data_dir, "lastn.dat"), "w") as f:
        f.write("# lastN egress_mbps server_cpu\n")
        for n, eg, cpu in rows:
            f.write(f"{'off' if n == 0 else n} {eg:.2f} {cpu:.2f}\n")
    p()
    p("![Egress and server CPU against Last-N](img/conference-lastn.png)")
    p()

if sim:
    pubs = sim[0].get("publishers", "?")
    kb = sim[0].get("kbps", "?")
    p(f"### Simulcast: {pubs} publishers with three layers against {pubs} with one")
    p()
    p(f"{pubs} participants each publish a camera, either one {kb} kbit/s encoding or three")
    p(f"(q/h/f at {kb}/10, {kb}/3 and {kb} kbit/s, as the SDK sends them); every receiver")
    p("shows one participant on stage (`quality: high`) and the other eight as")
    p("320×180 thumbnails (`updateTrackSettings` with the tile size), and sends the")
    p("same requests in both rooms.")
    p(when("simulcast"))
    p()
    p("| publishers | egress Mbit/s | ingress Mbit/s | server CPU % |")
    p("|---|---:|---:|---:|")
    single = [r for r in sim if not r["simulcast"]]
    multi = [r for r in sim if r["simulcast"]]
    for name, rs in (("single layer", single), ("simulcast", multi)):
        if rs:
            p(f"| {name} | {med(rs, 'egressKbps') / 1000:.1f} | {med(rs, 'ingressKbps') / 1000:.1f} | {med(rs, 'serverCPU'):.1f} |")
    if single and multi:
        cut = 1 - med(multi, "egressKbps") / med(single, "egressKbps")
        theory = 1 - (1 + 8 / 10) / 9
        p()
        p(f"Egress cut: **{cut * 100:.1f}%** (published by Jitsi for 10 participants: 83%;")
        p(f"the layout's arithmetic, one full and eight tenth-rate streams instead of nine full ones: {theory * 100:.1f}%).")
        p("Ingress grows by the two lower layers. The cut is what the layout allows: the")
        p("server sends each receiver exactly the layer its tile needs.")
        with open(os.path.join(data_dir, "simulcast.dat"), "w") as f:
            f.write("# mode egress_mbps\n")
            f.write(f"single {med(single, 'egressKbps') / 1000:.2f}\n")
            f.write(f"simulcast {med(multi, 'egressKbps') / 1000:.2f}\n")
    p()

if sw:
    allv = sorted(v for r in sw for v in r.get("delaysMs", []))
    meds = [r["medianMs"] for r in sw]
    p("### Layer-switch delay")
    p()
    p(f"One simulcast publisher, {sw[0].get('receivers', '?')} receivers that alternate between")
    p("`quality: low` and `high` (out of step with each other, 0.7 s and more")
    p("apart); the delay runs from sending `updateTrackSettings` to the arrival of")
    p("the last packet of the first keyframe of the new layer, the first frame of")
    p("it a decoder can show. The server asks the publisher for that keyframe at")
    p("once (PLI), aggregated per layer over 300 ms.")
    p(when("switch"))
    p()
    p("| switches | median ms | p90 ms | min ms | max ms | median of the runs' medians ms |")
    p("|---:|---:|---:|---:|---:|---:|")
    if allv:
        def q(x):
            return allv[min(len(allv) - 1, int(x * (len(allv) - 1)))]
        p(f"| {len(allv)} | {statistics.median(allv):.1f} | {q(0.9):.1f} | {allv[0]:.1f} | {allv[-1]:.1f} | {statistics.median(meds):.1f} |")
        with open(os.path.join(data_dir, "switch.dat"), "w") as f:
            f.write("# delay_ms cumulative_fraction\n")
            for i, v in enumerate(allv):
                f.write(f"{v:.2f} {(i + 1) / len(allv):.4f}\n")
    p()
    p("Published for Jitsi on the internet: 435 ms median; the goal on loopback was")
    p("under 150 ms. On loopback the delay is one signaling message, one PLI and the")
    p("publisher's next frame (33 ms at 30 fps); the tail is the keyframe")
    p("aggregation: a receiver asking within 300 ms of another's request for the")
    p("same layer waits for that keyframe or the window's end. Browsers add their")
    p("encoder's keyframe time and their jitter buffer on top; a publisher on the")
    p("internet adds its round trip. (Before this run a switch up also waited for")
    p("the next bandwidth allocation round, up to 500 ms: the p90 was 490 ms; the")
    p("server now re-allocates when a subscriber asks for more.)")
    p()
    p("![Layer-switch delay, cumulative](img/conference-switch.png)")
    p()
