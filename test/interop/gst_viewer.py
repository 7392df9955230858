#!/usr/bin/env python3
"""A WHEP viewer built on GStreamer's webrtcbin (libnice ICE, GStreamer's own
DTLS/SRTP, RTP stack and decoders): an implementation independent of Pion and
of aiortc.

Runs under the system Python (Debian's python3-gi), separately from the test
process, and prints one JSON object on stdout with what it saw:

  gst_viewer.py URL ROOM TOKEN [--seconds N] [--want-frames N] [--want-audio N]

The offer is non-trickle (WHEP without PATCH): candidates are gathered first and
sent in the offer, the server's come back in the answer.
"""

import argparse
import json
import os
import sys
import threading
import time
import zlib

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstSdp", "1.0")
gi.require_version("GstWebRTC", "1.0")
from gi.repository import GObject, Gst, GstSdp, GstWebRTC  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import petrel  # noqa: E402

VIDEO_CAPS = [
    "application/x-rtp,media=video,encoding-name=VP8,payload=96,clock-rate=90000",
    "application/x-rtp,media=video,encoding-name=H264,payload=102,clock-rate=90000,"
    "packetization-mode=(string)1,profile-level-id=(string)42e01f,level-asymmetry-allowed=(string)1",
]
AUDIO_CAPS = "application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000,encoding-params=(string)2"

DECODERS = {
    "VP8": "rtpvp8depay ! vp8dec",
    "H264": "rtph264depay ! h264parse ! avdec_h264",
    "OPUS": "rtpopusdepay ! opusdec",
}


def log(*a):
    print("gst_viewer:", *a, file=sys.stderr, flush=True)


class Viewer:
    def __init__(self, tcp_only=False):
        self.lock = threading.Lock()
        self.stats = {
            "video_frames": 0,  # decoded pictures out of the video decoder
            "video_rtp": 0,  # RTP packets out of webrtcbin's video pad
            "audio_rtp": 0,  # RTP packets out of webrtcbin's audio pad
            "audio_buffers": 0,  # decoded audio buffers out of opusdec
            "video_codec": None,
            "audio_codec": None,
            "video_size": None,
            "errors": [],
            "luma_means": [],  # of sampled decoded pictures
            "fingerprints": [],  # of sampled decoded pictures: differ when the picture moves
            "tones": [],  # [Hz, RMS] of sampled decoded audio buffers
            "first_frame_s": None,  # from applying the answer to the first decoded picture
        }
        self.t_answer = time.monotonic()
        self.pipe = Gst.Pipeline.new("viewer")
        self.webrtc = Gst.ElementFactory.make("webrtcbin", "recv")
        # PyGObject makes the Python class of webrtcbin's private pad type on the
        # first pad it sees. The video and audio pads appear at once in two
        # streaming threads, and the class made in that race was sometimes not a
        # Gst.Pad ("argument 1: Must be Gst.Pad, not GstWebRTCBinSrcPad"), leaving
        # the pad unlinked. Make the class here, in one thread, first.
        GObject.new(GObject.type_from_name("GstWebRTCBinSrcPad"), direction=Gst.PadDirection.SRC, name="warmup")
        self.pad_lock = threading.Lock()
        self.webrtc.set_property("bundle-policy", GstWebRTC.WebRTCBundlePolicy.MAX_BUNDLE)
        self.pipe.add(self.webrtc)
        # libnice, like most ICE agents, leaves loopback out of its host candidates;
        # the server is on 127.0.0.1 only, and so must we be.
        # Keep the Python wrapper of the agent for the viewer's lifetime: webrtcbin
        # 1.22 hands out its agent still floating, PyGObject sinks it, and dropping
        # the wrapper would free the agent under webrtcbin (a crash in create-offer).
        self.agent = self.webrtc.get_property("ice-agent")
        self.agent.emit("add-local-ip-address", "127.0.0.1")
        if tcp_only:  # as behind a firewall that drops UDP: ICE-TCP or nothing
            self.agent.set_property("ice-udp", False)
        self.candidates = []
        self.webrtc.connect("on-ice-candidate", self._on_candidate)
        self.webrtc.connect("pad-added", self._on_pad)
        caps = Gst.Caps.from_string(";".join(VIDEO_CAPS))
        self.webrtc.emit("add-transceiver", GstWebRTC.WebRTCRTPTransceiverDirection.RECVONLY, caps)
        self.webrtc.emit(
            "add-transceiver", GstWebRTC.WebRTCRTPTransceiverDirection.RECVONLY, Gst.Caps.from_string(AUDIO_CAPS)
        )

    def _on_candidate(self, _el, mline, cand):
        with self.lock:
            self.candidates.append((mline, cand))

    def _count(self, key):
        def probe(_pad, info):
            with self.lock:
                self.stats[key] += 1
            return Gst.PadProbeReturn.OK

        return probe

    def _on_pad(self, el, pad):
        with self.pad_lock:
            try:
                self._link_pad(pad)
            except Exception as e:  # an unlinked pad stops the stream: say why
                log("pad-added failed:", repr(e))
                with self.lock:
                    self.stats["errors"].append(f"pad-added: {e!r}")

    def _link_pad(self, pad):
        if pad.direction != Gst.PadDirection.SRC:
            return
        caps = pad.get_current_caps() or pad.query_caps(None)
        s = caps.get_structure(0)
        media, enc = s.get_string("media"), s.get_string("encoding-name")
        log("pad", pad.get_name(), media, enc)
        if enc not in DECODERS:
            self.stats["errors"].append(f"unexpected codec {media}/{enc}")
            return
        sink = "fakesink name=%s_sink sync=false async=false" % media
        bin_ = Gst.parse_bin_from_description(f"queue ! {DECODERS[enc]} name={media}_dec ! {sink}", True)
        self.pipe.add(bin_)
        bin_.sync_state_with_parent()
        pad.link(bin_.get_static_pad("sink"))
        dec = bin_.get_by_name(f"{media}_dec").get_static_pad("src")
        if media == "video":
            self.stats["video_codec"] = enc
            pad.add_probe(Gst.PadProbeType.BUFFER, self._count("video_rtp"))
            dec.add_probe(Gst.PadProbeType.BUFFER, self._on_frame)
        else:
            self.stats["audio_codec"] = enc
            pad.add_probe(Gst.PadProbeType.BUFFER, self._count("audio_rtp"))
            dec.add_probe(Gst.PadProbeType.BUFFER, self._on_audio)

    def _on_frame(self, pad, info):
        with self.lock:
            self.stats["video_frames"] += 1
            n = self.stats["video_frames"]
            if n == 1:
                self.stats["first_frame_s"] = round(time.monotonic() - self.t_answer, 2)
            c = pad.get_current_caps()
            if c and self.stats["video_size"] is None:
                st = c.get_structure(0)
                self.stats["video_size"] = [st.get_int("width")[1], st.get_int("height")[1]]
            if n % 10 == 1 and self.stats["video_size"]:
                self._sample_luma(info.get_buffer())
        return Gst.PadProbeReturn.OK

    def _on_audio(self, pad, info):
        with self.lock:
            self.stats["audio_buffers"] += 1
            n = self.stats["audio_buffers"]
        if n % 10 == 5:
            c = pad.get_current_caps()
            st = c.get_structure(0) if c else None
            if st and st.get_string("format") == "S16LE":
                buf = info.get_buffer()
                ok, m = buf.map(Gst.MapFlags.READ)
                if ok:
                    try:
                        pcm = bytes(m.data)
                    finally:
                        buf.unmap(m)
                    tone = petrel.tone(pcm, st.get_int("rate")[1], st.get_int("channels")[1])
                    with self.lock:
                        self.stats["tones"].append(tone)
        return Gst.PadProbeReturn.OK

    def _sample_luma(self, buf):
        """Mean luma and a fingerprint of one decoded picture (I420: the luma
        plane comes first), to tell the publisher's moving pattern from black,
        green or frozen pictures."""
        w, h = self.stats["video_size"]
        ok, m = buf.map(Gst.MapFlags.READ)
        if not ok:
            return
        try:
            y = bytes(m.data[: w * h])
        finally:
            buf.unmap(m)
        sample = y[::7]
        self.stats["luma_means"].append(round(sum(sample) / max(1, len(sample)), 1))
        self.stats["fingerprints"].append(zlib.crc32(y[::97]))

    def offer(self, timeout=5):
        # Keep the promises (and so the reply that owns the offer) alive until the
        # offer is applied: PyGObject does not copy the boxed description.
        p1 = Gst.Promise.new()
        self.webrtc.emit("create-offer", None, p1)
        p1.wait()
        reply = p1.get_reply()
        offer = reply.get_value("offer")
        if offer is None or offer.sdp is None:
            raise RuntimeError(f"create-offer failed: {reply.to_string()}")
        p2 = Gst.Promise.new()
        self.webrtc.emit("set-local-description", offer, p2)
        p2.wait()
        deadline = time.monotonic() + timeout
        while self.webrtc.get_property("ice-gathering-state") != GstWebRTC.WebRTCICEGatheringState.COMPLETE:
            if time.monotonic() > deadline:
                raise TimeoutError("ICE gathering did not complete")
            self.poll_bus(0.05)
        sdp = add_candidates(self.webrtc.get_property("local-description").sdp.as_text(), self.candidates)
        petrel.require_loopback(sdp, "webrtcbin's offer")
        return sdp

    def bundle_candidates(self):
        """Candidates of the first m-section, which carries the bundle."""
        with self.lock:
            return [c for m, c in self.candidates if m == 0]

    def answer(self, sdp):
        res, msg = GstSdp.SDPMessage.new_from_text(sdp)
        if res != GstSdp.SDPResult.OK:
            raise ValueError("unparsable answer SDP")
        desc = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.ANSWER, msg)
        p = Gst.Promise.new()
        self.webrtc.emit("set-remote-description", desc, p)
        p.wait()

    def poll_bus(self, seconds):
        msg = self.pipe.get_bus().timed_pop_filtered(
            int(seconds * Gst.SECOND), Gst.MessageType.ERROR | Gst.MessageType.WARNING
        )
        if msg is None:
            return
        if msg.type == Gst.MessageType.ERROR:
            err, dbg = msg.parse_error()
            self.stats["errors"].append(f"{msg.src.get_name()}: {err.message}")
            log("ERROR", msg.src.get_name(), err.message, dbg)
        else:
            w, dbg = msg.parse_warning()
            log("warning", msg.src.get_name(), w.message)

    def snapshot(self):
        with self.lock:
            return {k: (list(v) if isinstance(v, list) else v) for k, v in self.stats.items()}


def add_candidates(sdp, cands):
    """Put gathered candidates into their m-sections when webrtcbin's local
    description does not carry them itself."""
    if "a=candidate:" in sdp:
        return sdp
    lines = sdp.replace("\r\n", "\n").rstrip("\n").split("\n")
    out, mline = [], -1

    def flush(idx):
        for m, c in cands:
            if m == idx:
                out.append(c if c.startswith("a=") else "a=" + c)

    for line in lines:
        if line.startswith("m="):
            if mline >= 0:
                flush(mline)
            mline += 1
        out.append(line)
    flush(mline)
    return "\r\n".join(out) + "\r\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("room")
    ap.add_argument("token")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--want-frames", type=int, default=60)
    ap.add_argument("--want-audio", type=int, default=50)
    ap.add_argument("--whep-retry-seconds", type=float, default=5)
    ap.add_argument("--query", default="", help="appended to the WHEP URL, e.g. ?participant=cam")
    ap.add_argument("--tcp", action="store_true", help="ICE over TCP only (libnice's ice-udp off)")
    ap.add_argument(
        "--trickle",
        action="store_true",
        help="send the offer without candidates and the candidates afterwards with PATCH",
    )
    a = ap.parse_args()
    os.environ["PETREL_INTEROP_URL"] = a.url

    Gst.init(None)
    v = Viewer(tcp_only=a.tcp)
    v.pipe.set_state(Gst.State.PLAYING)
    result = {"ok": False}
    t0 = time.monotonic()
    try:
        full_offer = offer = v.offer()
        if a.trickle:
            offer = petrel.strip_candidates(full_offer)
        result["offer_candidates"] = petrel.candidate_addresses(offer)
        result["offer_transports"] = petrel.candidate_transports(full_offer)
        # Until the publisher's first packets arrive, its track is not published
        # and WHEP answers 404: retry for a bounded time, as a player would.
        deadline = time.monotonic() + a.whep_retry_seconds
        tries = 0
        while True:
            tries += 1
            r = petrel.post_sdp("whep", a.room, a.token, offer, query=a.query)
            if r.status != 404 or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        result.update(whep_status=r.status, whep_tries=tries, location=r.headers.get("Location"))
        if r.status != 201:
            result["whep_body"] = r.body
            raise RuntimeError(f"WHEP POST answered {r.status}: {r.body}")
        result["answer_candidates"] = petrel.candidate_addresses(r.body)
        v.t_answer = t_answer = time.monotonic()
        v.answer(r.body)
        if a.trickle:
            frag = petrel.sdpfrag(full_offer, v.bundle_candidates())
            result["patch_candidates"] = petrel.candidate_addresses(frag)
            petrel.require_loopback(frag, "the trickled sdpfrag")
            pr = petrel.patch(result["location"], a.token, frag, r.headers.get("ETag"))
            result["patch_status"] = pr.status
            if pr.status >= 300:
                result["patch_body"] = pr.body
        deadline = t_answer + a.seconds
        while time.monotonic() < deadline:
            v.poll_bus(0.1)
            s = v.snapshot()
            if s["video_frames"] >= a.want_frames and s["audio_rtp"] >= a.want_audio:
                break
        s = v.snapshot()
        result.update(s)
        result["first_to_done_s"] = round(time.monotonic() - t_answer, 2)
        result["ice_connection_state"] = v.webrtc.get_property("ice-connection-state").value_nick
        result["connection_state"] = v.webrtc.get_property("connection-state").value_nick
        d = petrel.delete(result["location"], a.token)
        result["delete_status"] = d.status
        result["ok"] = True
    except Exception as e:  # reported to the test, which decides
        result["error"] = f"{type(e).__name__}: {e}"
        result.update(v.snapshot())
    finally:
        v.pipe.set_state(Gst.State.NULL)
    result["elapsed_s"] = round(time.monotonic() - t0, 2)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
    # Skip finalizers: dropping webrtcbin's ice-agent wrapper at exit only
    # prints GObject warnings.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
