"""aiortc as an independent WebRTC stack: a WHIP publisher with a synthetic
camera and microphone, and a WHEP viewer that decodes what it receives."""

import asyncio
import fractions
import math
import struct
import time
import zlib

import aioice.ice
import av
from aiortc import (
    RTCConfiguration,
    RTCIceServer,  # noqa: F401 (tests build relay-only publishers with it)
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
    VideoStreamTrack,
)
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

import petrel

# aioice leaves 127.0.0.1 out of its host candidates, and the server under test
# only listens there (--loopback). Offer loopback only: the test must not send
# anything to the machine's other addresses.
# HOST_ADDRESSES is emptied while a relay-only peer gathers (aiortc has no
# iceTransportPolicy): with no host address, aioice gathers only its TURN
# allocation.
HOST_ADDRESSES = ["127.0.0.1"]
aioice.ice.get_host_addresses = lambda use_ipv4=True, use_ipv6=True: list(HOST_ADDRESSES)

# No iceServers at all: aiortc's default is a public STUN server.
NO_ICE_SERVERS = RTCConfiguration(iceServers=[])

WIDTH, HEIGHT = 320, 240


class PatternVideoTrack(VideoStreamTrack):
    """A moving gradient at 30 fps, so the encoder produces real inter frames
    (a still image compresses to nearly nothing and hides depacketizing bugs)."""

    def __init__(self):
        super().__init__()
        self._y = bytes(((x * 2 + y) & 0xFF) for y in range(HEIGHT) for x in range(WIDTH))
        self._u = bytes(((x * 3) & 0xFF) for y in range(HEIGHT // 2) for x in range(WIDTH // 2))
        self._v = bytes(((y * 3) & 0xFF) for y in range(HEIGHT // 2) for x in range(WIDTH // 2))
        self.frames = 0

    async def recv(self):
        pts, time_base = await self.next_timestamp()
        k = (self.frames * 4) % len(self._y)
        frame = av.VideoFrame(WIDTH, HEIGHT, "yuv420p")
        frame.planes[0].update(self._y[k:] + self._y[:k])
        frame.planes[1].update(self._u)
        frame.planes[2].update(self._v)
        frame.pts, frame.time_base = pts, time_base
        self.frames += 1
        return frame


class ToneAudioTrack(MediaStreamTrack):
    """A pure tone in 20 ms frames at 48 kHz. The frequency is a multiple of
    50 Hz, so a frame holds whole periods and one precomputed frame repeats
    seamlessly; a listener can tell two publishers apart by their tones."""

    kind = "audio"
    RATE = 48000
    SAMPLES = 960

    def __init__(self, hz=400):
        super().__init__()
        assert hz % 50 == 0
        self.hz = hz
        self._pcm = b"".join(
            struct.pack("<h", int(8000 * math.sin(2 * math.pi * hz * i / self.RATE))) for i in range(self.SAMPLES)
        )
        self._start = None
        self._pts = 0

    async def recv(self):
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.time()
        else:
            self._pts += self.SAMPLES
            await asyncio.sleep(self._start + self._pts / self.RATE - time.time())
        frame = av.AudioFrame(format="s16", layout="mono", samples=self.SAMPLES)
        frame.planes[0].update(self._pcm)
        frame.pts, frame.sample_rate = self._pts, self.RATE
        frame.time_base = fractions.Fraction(1, self.RATE)
        return frame


def prefer(transceiver, kind, mime):
    """Offer only one codec (plus its RTX), as a client pinned to a codec does."""
    codecs = [c for c in RTCRtpSender.getCapabilities(kind).codecs if c.mimeType.lower() in (mime.lower(), f"{kind}/rtx")]
    transceiver.setCodecPreferences(codecs)


async def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


class WhipPublisher:
    def __init__(
        self, room, identity="aiortc-publisher", video_codec="video/VP8", tone_hz=400, video=True, turn=None
    ):
        """turn: an RTCIceServer to use relay-only (no host candidate)."""
        self.room = room
        self.identity = identity
        self.token = petrel.token(room, identity, publish=True)
        self.video_codec = video_codec
        self.turn = turn
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[turn]) if turn else NO_ICE_SERVERS)
        self.send_video = video
        self.video = PatternVideoTrack()
        self.audio = ToneAudioTrack(tone_hz)
        self.location = None
        self.offer = self.answer = None

    async def start(self, timeout=10):
        if self.send_video:
            vt = self.pc.addTransceiver(self.video, direction="sendonly")
            prefer(vt, "video", self.video_codec)
        at = self.pc.addTransceiver(self.audio, direction="sendonly")
        prefer(at, "audio", "audio/opus")
        # aiortc gathers all candidates in setLocalDescription: the offer is complete.
        saved = list(HOST_ADDRESSES)
        if self.turn:
            HOST_ADDRESSES.clear()
        try:
            await self.pc.setLocalDescription(await self.pc.createOffer())
        finally:
            HOST_ADDRESSES[:] = saved
        self.offer = self.pc.localDescription.sdp
        petrel.require_loopback(self.offer, "aiortc publisher's offer")
        r = await asyncio.to_thread(petrel.post_sdp, "whip", self.room, self.token, self.offer)
        if r.status != 201:
            raise AssertionError(f"WHIP POST: {r.status} {r.body}")
        self.location = r.headers.get("Location")
        self.answer = r.body
        self.response = r
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=r.body, type="answer"))
        await wait_for(lambda: self.pc.connectionState in ("connected", "failed"), timeout, "WHIP connection")
        if self.pc.connectionState != "connected":
            raise AssertionError(f"WHIP peer connection {self.pc.connectionState}")
        return r

    def selected_pair(self):
        """(local, remote) candidate types of the pair ICE nominated (aioice's
        internals: aiortc does not expose it)."""
        for t in self.pc.getTransceivers():
            conn = t.sender.transport.transport._connection
            for pair in conn._nominated.values():
                return pair.local_candidate.type, pair.remote_candidate.type
        return None

    async def stop(self):
        r = None
        if self.location:
            r = await asyncio.to_thread(petrel.delete, self.location, self.token)
            self.stopped_location, self.location = self.location, None
        await self.pc.close()
        return r


class WhepViewer:
    """An aiortc viewer: recvonly offer, decoded frames counted from the tracks."""

    def __init__(self, room, identity="aiortc-viewer"):
        self.room = room
        self.token = petrel.token(room, identity, subscribe=True)
        self.pc = RTCPeerConnection(NO_ICE_SERVERS)
        self.video_frames = 0
        self.audio_frames = 0
        self.video_size = None
        self.luma_means = []
        self.fingerprints = []
        self.tones = []
        self.tasks = []
        self.location = None

        @self.pc.on("track")
        def on_track(track):
            self.tasks.append(asyncio.ensure_future(self._consume(track)))

    async def _consume(self, track):
        try:
            while True:
                f = await track.recv()
                if track.kind == "video":
                    self.video_frames += 1
                    self.video_size = (f.width, f.height)
                    if self.video_frames % 10 == 1:
                        # Rows of the luma plane without their padding (line_size > width).
                        plane, ls = bytes(f.planes[0]), f.planes[0].line_size
                        y = b"".join(plane[r * ls : r * ls + f.width : 7] for r in range(0, f.height, 3))
                        self.luma_means.append(round(sum(y) / max(1, len(y)), 1))
                        self.fingerprints.append(zlib.crc32(y))
                else:
                    self.audio_frames += 1
                    if self.audio_frames % 10 == 5 and f.format.name == "s16":
                        channels = len(f.layout.channels)
                        self.tones.append(petrel.tone(bytes(f.planes[0])[: f.samples * channels * 2], f.sample_rate, channels))
        except MediaStreamError:
            pass

    async def start(self, answer_delay=0.0, retry_404_seconds=0.0, video_codec=None, expect=201):
        """answer_delay: seconds between the server's answer and applying it, as
        a client busy with something else (or on a slow device) takes.
        retry_404_seconds: how long to retry while nothing is published yet.
        video_codec: offer only this video codec (e.g. "video/H264").
        expect: the status the caller expects; others raise."""
        vt = self.pc.addTransceiver("video", direction="recvonly")
        if video_codec:
            prefer(vt, "video", video_codec)
        self.pc.addTransceiver("audio", direction="recvonly")
        await self.pc.setLocalDescription(await self.pc.createOffer())
        petrel.require_loopback(self.pc.localDescription.sdp, "aiortc viewer's offer")
        deadline = time.monotonic() + retry_404_seconds
        while True:
            r = await asyncio.to_thread(petrel.post_sdp, "whep", self.room, self.token, self.pc.localDescription.sdp)
            if r.status != 404 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.25)
        if r.status != expect:
            raise AssertionError(f"WHEP POST: {r.status} {r.body}")
        if r.status != 201:
            return r
        self.location = r.headers.get("Location")
        if answer_delay:
            await asyncio.sleep(answer_delay)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=r.body, type="answer"))
        return r

    async def received(self):
        """RTP packets received per kind, from the peer connection's stats."""
        out = {}
        for st in (await self.pc.getStats()).values():
            if st.type == "inbound-rtp":
                out[st.kind] = out.get(st.kind, 0) + st.packetsReceived
        return out

    async def stop(self):
        r = None
        if self.location:
            r = await asyncio.to_thread(petrel.delete, self.location, self.token)
            self.stopped_location, self.location = self.location, None
        await self.pc.close()
        for t in self.tasks:
            t.cancel()
        return r
