#!/usr/bin/env python3
"""A WHIP publisher built on GStreamer's webrtcbin: a live test picture (SMPTE
bars scrolling 4 px a frame; VP8 with a keyframe every 2 s, as a typical
encoder sends) and a sine tone (Opus), published until --seconds have passed (or,
with --stop-on-stdin, a line arrives on stdin), then DELETEd.

Runs under the system Python (python3-gi) and prints JSON lines on stdout:
{"event": "connected", ...} once the peer connection is up, and
{"event": "done", ...} at the end (with "error" when something failed).

  gst_publisher.py URL ROOM TOKEN [--seconds N] [--tone HZ] [--stop-on-stdin]
"""

import argparse
import json
import os
import select
import sys
import time

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstSdp", "1.0")
gi.require_version("GstWebRTC", "1.0")
from gi.repository import Gst, GstSdp, GstWebRTC  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import petrel  # noqa: E402
from gst_viewer import add_candidates  # noqa: E402

PIPELINE = """
webrtcbin name=send bundle-policy=max-bundle
videotestsrc is-live=true pattern=smpte horizontal-speed=4
  ! video/x-raw,width=320,height=240,framerate=30/1
  ! vp8enc deadline=1 keyframe-max-dist=60 target-bitrate=400000
  ! rtpvp8pay picture-id-mode=15-bit
  ! application/x-rtp,media=video,encoding-name=VP8,payload=96,clock-rate=90000
  ! send.
audiotestsrc is-live=true wave=sine freq={tone} volume=0.25
  ! audioconvert ! audioresample ! opusenc
  ! rtpopuspay
  ! application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000
  ! send.
"""


def emit(obj):
    print(json.dumps(obj), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("room")
    ap.add_argument("token")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--tone", type=int, default=500)
    ap.add_argument("--stop-on-stdin", action="store_true", help="end early on a line or EOF on stdin")
    a = ap.parse_args()
    os.environ["PETREL_INTEROP_URL"] = a.url

    Gst.init(None)
    pipe = Gst.parse_launch(PIPELINE.format(tone=a.tone))
    webrtc = pipe.get_by_name("send")
    # See gst_viewer.py: keep the agent's wrapper, and gather on loopback only.
    agent = webrtc.get_property("ice-agent")
    agent.emit("add-local-ip-address", "127.0.0.1")
    cands = []
    webrtc.connect("on-ice-candidate", lambda _e, m, c: cands.append((m, c)))
    bus = pipe.get_bus()
    result = {"event": "done", "ok": False}
    location = None
    pipe.set_state(Gst.State.PLAYING)
    try:
        p1 = Gst.Promise.new()
        webrtc.emit("create-offer", None, p1)
        p1.wait()
        reply = p1.get_reply()
        offer = reply.get_value("offer")
        if offer is None or offer.sdp is None:
            raise RuntimeError(f"create-offer failed: {reply.to_string()}")
        p2 = Gst.Promise.new()
        webrtc.emit("set-local-description", offer, p2)
        p2.wait()
        deadline = time.monotonic() + 5
        while webrtc.get_property("ice-gathering-state") != GstWebRTC.WebRTCICEGatheringState.COMPLETE:
            if time.monotonic() > deadline:
                raise TimeoutError("ICE gathering did not complete")
            time.sleep(0.05)
        sdp = add_candidates(webrtc.get_property("local-description").sdp.as_text(), cands)
        petrel.require_loopback(sdp, "webrtcbin's WHIP offer")
        r = petrel.post_sdp("whip", a.room, a.token, sdp)
        result["whip_status"] = r.status
        if r.status != 201:
            result["whip_body"] = r.body
            raise RuntimeError(f"WHIP POST answered {r.status}: {r.body}")
        location = r.headers.get("Location")
        result["location"] = location
        res, msg = GstSdp.SDPMessage.new_from_text(r.body)
        if res != GstSdp.SDPResult.OK:
            raise ValueError("unparsable answer SDP")
        p3 = Gst.Promise.new()
        webrtc.emit(
            "set-remote-description", GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.ANSWER, msg), p3
        )
        p3.wait()
        t0 = time.monotonic()
        connected = False
        end = t0 + a.seconds
        while time.monotonic() < end:
            # A line (or EOF) on stdin ends the publication early.
            if a.stop_on_stdin and select.select([sys.stdin], [], [], 0)[0]:
                result["stopped_by"] = "stdin"
                break
            m = bus.timed_pop_filtered(100 * Gst.MSECOND, Gst.MessageType.ERROR)
            if m is not None:
                err, dbg = m.parse_error()
                raise RuntimeError(f"{m.src.get_name()}: {err.message} ({dbg})")
            state = webrtc.get_property("connection-state")
            if not connected and state == GstWebRTC.WebRTCPeerConnectionState.CONNECTED:
                connected = True
                emit({"event": "connected", "after_s": round(time.monotonic() - t0, 2), "location": location})
            if state == GstWebRTC.WebRTCPeerConnectionState.FAILED:
                raise RuntimeError("peer connection failed")
        result["connected"] = connected
        d = petrel.delete(location, a.token)
        result["delete_status"] = d.status
        result["ok"] = connected
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
    finally:
        pipe.set_state(Gst.State.NULL)
    emit(result)


if __name__ == "__main__":
    main()
    # Skip finalizers: dropping webrtcbin's ice-agent wrapper at exit only
    # prints GObject warnings (see gst_viewer.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
