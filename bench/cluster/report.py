#!/usr/bin/env python3
"""Renders bench/cluster results as the "Cluster: cascaded rooms" section of docs/benchmarks.md."""
import json
import statistics
import sys

runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
meta = dict(l.strip().split("=", 1) for l in open(sys.argv[2]) if "=" in l)


def med(mode, key):
    vals = [r[key] for r in runs if r["mode"] == mode]
    return statistics.median(vals) if vals else float("nan")


modes = []
for r in runs:
    if r["mode"] not in modes:
        modes.append(r["mode"])
room = int(meta.get("PUBLISHERS", 0)) + int(meta.get("VIEWERS", 0))
out = []
out.append("## Cluster: cascaded rooms\n")
out.append(
    f"`bench/cluster/run.sh` ({meta.get('STARTED')}, commit {meta.get('COMMIT')}, {meta.get('CORES')} cores, "
    f"load average {meta.get('LOAD')} at the start: other engineers' work shares the machine). "
    f"One room of {room}: {meta.get('PUBLISHERS')} publishers of a three-layer simulcast VP8 track "
    "(about 150, 500 and 1500 kbit/s) and "
    f"{meta.get('VIEWERS')} viewers, every participant in a speaker view (the top layer of one "
    "participant, the low layer of the others), spread evenly over three `petrel serve` processes "
    "sharing a Redis, against the same room on one node. Pion clients in one process; "
    f"{meta.get('DURATION')} windows, median of {len(runs) // max(len(modes), 1)} run(s).\n"
)
out.append(
    "Scaled down from the issue's room of 60 because two shared cores cannot run 60 Pion clients, "
    "three servers and Redis at once; `PUBLISHERS=6 VIEWERS=54 bench/cluster/run.sh` runs the full size.\n"
)
out.append("| setup | bytes over node links (kbit/s) | CPU per node (cores) | CPU, all nodes (cores) | packets/s received by participants |")
out.append("|---|---:|---|---:|---:|")
for m in modes:
    cpus = [r["nodeCpu"] for r in runs if r["mode"] == m]
    per = " / ".join(f"{statistics.median(c[i] for c in cpus):.2f}" for i in range(len(cpus[0])))
    out.append(
        f"| {m} | {med(m, 'linkKbps'):.0f} | {per} | {med(m, 'cpuTotal'):.2f} | {med(m, 'viewerKpps') * 1000:.0f} |"
    )
sel = med("3 nodes, selective", "linkKbps")
allk = med("3 nodes, every layer crosses", "linkKbps")
out.append("")
if sel == sel and allk == allk and allk > 0:
    out.append(
        f"Selective forwarding sends {sel / allk * 100:.0f}% of the bytes that forwarding every layer "
        "sends between nodes: a node receives the top layer only of the tracks some participant there "
        "shows large, and nothing of tracks nobody there receives (Last-N, hidden tiles). "
        f"Participants received {med('3 nodes, selective', 'viewerKpps') * 1000:.0f} and "
        f"{med('3 nodes, every layer crosses', 'viewerKpps') * 1000:.0f} packets/s: selection cost them no media."
    )
one = med("one node", "cpuTotal")
three = med("3 nodes, selective", "cpuTotal")
if one == one and three == three and one > 0:
    out.append(
        f"Three nodes use {three:.2f} cores together against {one:.2f} for one node holding everyone "
        f"({three / one:.1f}x): each node still receives every track it forwards, once per link, and "
        "links add DTLS and SCTP work; in return no node carries the whole room, and each node's share "
        "is what a deployment scales by."
    )

# Placement by measured RTT against the nearest node (bench/cluster/regions.sh).
import os

rdir = os.path.dirname(sys.argv[1])
rfile, rmeta = os.path.join(rdir, "regions.jsonl"), os.path.join(rdir, "regions-meta.env")
if os.path.exists(rfile) and os.path.exists(rmeta):
    rr = [json.loads(l) for l in open(rfile) if l.strip()]
    rm = dict(l.strip().split("=", 1) for l in open(rmeta) if "=" in l)

    def rmed(shape, mode, key):
        vals = [r[key] for r in rr if r["shape"] == shape and r["mode"] == mode]
        return statistics.median(vals) if vals else float("nan")

    def places(shape, mode):
        seen = []
        for r in rr:
            if r["shape"] == shape and r["mode"] == mode:
                p = " ".join(r["placement"])
                if p not in seen:
                    seen.append(p)
        return "; ".join(f"`{p}`" for p in seen)

    out.append("\n### Placement by measured RTT against the nearest node\n")
    out.append(
        f"`bench/cluster/regions.sh` ({rm.get('STARTED')}, commit {rm.get('COMMIT')}, {rm.get('CORES')} cores, "
        f"load average {rm.get('LOAD')} at the start, {rm.get('LOAD_END')} at the end). Three `petrel serve` nodes "
        "in three emulated regions (`netem.Mesh`: one network namespace per node and per region's clients, "
        "the userspace emulator on every link): round trips of 30 ms between nodes a and b, 80 ms b–c and "
        "150 ms a–c; a region's clients are 10 ms from their node and reach the other nodes directly "
        "(a→b 35, b→c 85, a→c 110 ms: shorter than the 150 ms between nodes a and c, the poor backbone "
        "Jitsi's Octo trial met). Every participant publishes a synthetic 300 kbit/s VP8 stream carrying "
        "its send time (`loadtest.Synthetic`) and receives everyone; the delay is taken at the receiver "
        "per frame, all processes sharing one clock. *Nearest*: each client joins its region's node. "
        "*RTT*: each client measures its round trip to every node's `/healthz` (best of three), asks its "
        "region's node `POST /v1/cluster/place` and joins the node named (load plays no part: the nodes run "
        "with `max_cpu: 0`, as the shared machine's load is not theirs). Participants join one after "
        f"another in the order listed. {rm.get('WINDOW')} windows, medians of {rm.get('RUNS')} runs.\n"
    )
    out.append("| room (joining order) | placement | one-way delay p50 (ms) | p90 (ms) | where the participants went |")
    out.append("|---|---|---:|---:|---|")
    for shape, desc in [("call", "1:1 call, a then c"), ("room6", "6: a b c a b c")]:
        for mode in ("nearest", "rtt"):
            out.append(
                f"| {desc} | {'nearest node' if mode == 'nearest' else 'by measured RTT'} | "
                f"{rmed(shape, mode, 'p50'):.1f} | {rmed(shape, mode, 'p90'):.1f} | {places(shape, mode)} |"
            )
    def per_run(shape, mode):
        return ", ".join(f"{r['p50']:.0f}" for r in rr if r["shape"] == shape and r["mode"] == mode)

    out.append("")
    out.append(
        "p50 per run (ms): call nearest " + per_run("call", "nearest") + "; call RTT " + per_run("call", "rtt")
        + "; room nearest " + per_run("room6", "nearest") + "; room RTT " + per_run("room6", "rtt") + ". "
        "A run where RTT placement left the call split (`c@c`) is one where the second participant asked "
        "before the first one's node had published its membership (joins 1.5 s apart). With every "
        "participant of the room on node a, that one node forwards all 30 streams while the others idle: "
        "on this loaded machine one such run saturated it (seconds of delay), which inflates the room's "
        "RTT figures beyond the routing cost alone (the calmest run: "
        f"{min((r['p50'] for r in rr if r['shape'] == 'room6' and r['mode'] == 'rtt'), default=float('nan')):.0f} ms "
        f"against {min((r['p50'] for r in rr if r['shape'] == 'room6' and r['mode'] == 'nearest'), default=float('nan')):.0f} ms)."
    )
    cn, cr = rmed("call", "nearest", "p50"), rmed("call", "rtt", "p50")
    rn, rt = rmed("room6", "nearest", "p50"), rmed("room6", "rtt", "p50")
    out.append("")
    out.append(
        f"For the call, placement by RTT puts the second participant on the first one's node and saves "
        f"{cn - cr:.0f} ms at the median ({cr / cn:.2f}x): the client's own path to node a (110 ms) beats "
        "its region's node plus the 150 ms backbone, which is what placement by region label cannot see. "
        f"For the room of six it costs {rt - rn:.0f} ms at the median ({rt / rn:.2f}x): placement is decided "
        "once, when each participant joins, against the participants already there, so the first "
        "participants pull the room onto node a and the later ones from region c then talk to each other "
        "through node a (110 ms apart instead of 10). On the emulated delays, the placement "
        "that minimizes this room's mean delay (found by enumerating all 729) keeps region c on node c and moves region a to node b; reaching it "
        "needs re-placement as a room grows (moving participants with the drain's make-before-break), "
        "which is not built."
    )
    out.append("\n![one-way delay by placement](img/cluster-placement-delay.png)\n")
    out.append("The plot: every frame's delay in the last run, as a cumulative distribution.\n")
else:
    out.append(
        "\nNot measured here: end-to-end delay with RTT-based against nearest-node placement "
        "(`bench/cluster/regions.sh`).\n"
    )
print("\n".join(out))
