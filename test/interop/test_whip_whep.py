"""WHIP/WHEP interop with independent WebRTC stacks: aiortc publishes a camera
and microphone, GStreamer webrtcbin (and aiortc) play them. The assertions are
what a user would see: pictures decoded, of the right size and moving, sound
arriving, and the error a misconfigured client gets."""

import asyncio
import json
import os
import re
import sys
import time

import pytest

import aiortc_peer
import petrel

HERE = os.path.dirname(os.path.abspath(__file__))
# webrtcbin is driven through Debian's python3-gi, which belongs to the system Python.
GST_PYTHON = os.environ.get("GST_PYTHON", "/usr/bin/python3")

VIEW_SECONDS = 20  # bound on the time to decode the wanted frames
WANT_FRAMES = 60  # about two seconds of 30 fps video
MIN_FRAMES = 30  # what the test demands within VIEW_SECONDS
MIN_AUDIO_PACKETS = 50  # one second of 20 ms Opus packets


def all_loopback(addresses):
    return addresses and all(a.startswith("127.") for a in addresses)


async def wait_media_sent(pub, timeout=5):
    """Until the server has published each of the publisher's tracks, which it
    does on their first packets: a WHEP viewer gets what is published when it
    asks, and cannot be given a track later (no renegotiation in WHEP)."""
    want = {"video", "audio"} if pub.send_video else {"audio"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await asyncio.to_thread(petrel.published, pub.room, pub.identity)
        if want <= set(got):
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(f"the server did not publish {want} within {timeout}s (has {got})")


async def gst_view(
    room, seconds=VIEW_SECONDS, identity="gst-viewer", query="", whep_retry_seconds=5, extra=(), want_frames=WANT_FRAMES
):
    tok = petrel.token(room, identity, subscribe=True)
    proc = await asyncio.create_subprocess_exec(
        GST_PYTHON,
        os.path.join(HERE, "gst_viewer.py"),
        petrel.base_url(),
        room,
        tok,
        "--seconds",
        str(seconds),
        "--want-frames",
        str(want_frames),
        "--want-audio",
        str(MIN_AUDIO_PACKETS),
        "--query",
        query,
        "--whep-retry-seconds",
        str(whep_retry_seconds),
        *extra,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), seconds + 20)
    except asyncio.TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(f"the GStreamer viewer hung; stderr:\n{err.decode()[-3000:]}")
    sys.stderr.write(err.decode()[-3000:])
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    assert lines, f"the GStreamer viewer printed no result (exit {proc.returncode}); stderr:\n{err.decode()[-3000:]}"
    return json.loads(lines[-1])


def check_publish_response(pub, room):
    r = pub.response
    assert r.status == 201
    assert re.fullmatch(rf"/whip/{re.escape(room)}/[A-Za-z0-9_]+", r.headers["Location"]), r.headers["Location"]
    assert r.headers["Content-Type"].startswith("application/sdp")
    assert r.headers.get("ETag")
    assert "a=candidate:" in r.body, "the answer carries the server's candidates (WHIP without trickle)"
    # Everything stays on loopback: ours and the server's candidates.
    assert all_loopback(petrel.candidate_addresses(pub.offer)), pub.offer
    assert all_loopback(petrel.candidate_addresses(pub.answer)), pub.answer


def check_tone(tones, hz):
    """The sound is the publisher's tone: the median sampled frequency within
    10 % of it, and loud (the tone's RMS is about 5700; silence is 0)."""
    assert len(tones) >= 3, tones
    freqs = sorted(t[0] for t in tones)
    median = freqs[len(freqs) // 2]
    assert abs(median - hz) <= hz * 0.1, (hz, tones)
    assert sorted(t[1] for t in tones)[len(tones) // 2] > 2000, tones


def check_gst_view(v, codec, tone_hz=400):
    assert v.get("ok"), v
    assert v["whep_status"] == 201
    assert v["errors"] == [], v["errors"]
    if "patch_status" in v:  # trickled: the offer went without candidates
        assert v["offer_candidates"] == [] and all_loopback(v["patch_candidates"]), v
    else:
        assert all_loopback(v["offer_candidates"]), v
    assert all_loopback(v["answer_candidates"]), v
    assert v["connection_state"] == "connected", v
    # The picture: decoded, of the publisher's size, at a normal brightness
    # (the moving gradient, not a black or green frame), and moving.
    assert v["video_codec"] == codec
    assert v["video_frames"] > MIN_FRAMES, v
    assert v["video_size"] == [aiortc_peer.WIDTH, aiortc_peer.HEIGHT], v
    assert v["luma_means"] and all(80 < m < 175 for m in v["luma_means"]), v["luma_means"]
    assert len(set(v["fingerprints"])) > 1, "the decoded picture does not move"
    # A viewer joining mid-stream sees a picture soon: aiortc sends a keyframe
    # only every 3000 frames unless asked, so this needs the server to request
    # one for the new viewer. (Typically 0.3 s here; the bound is generous.)
    assert v["first_frame_s"] is not None and v["first_frame_s"] < 5, v["first_frame_s"]
    # The sound: Opus packets arrive and decode.
    assert v["audio_codec"] == "OPUS"
    assert v["audio_rtp"] >= MIN_AUDIO_PACKETS, v
    assert v["audio_buffers"] > 0, v
    check_tone(v["tones"], tone_hz)
    assert v["delete_status"] == 200


async def ended(pub, room):
    """Stopping the publisher (WHIP DELETE) ends what it published."""
    location = pub.location
    # Only the token that created a session may end it, even another valid one.
    other = petrel.token(room, "someone-else", publish=True)
    stranger = await asyncio.to_thread(petrel.delete, location, other)
    check_json_error(stranger, 401, "unauthorized")
    d = await pub.stop()
    assert d is not None and d.status == 200, d
    again = await asyncio.to_thread(petrel.delete, location, pub.token)
    assert again.status == 404, again
    return d


@pytest.mark.parametrize("codec", ["VP8", "H264"])
def test_aiortc_publishes_gstreamer_plays(room, codec, server_log):
    async def scenario():
        pub = aiortc_peer.WhipPublisher(room, video_codec=f"video/{codec}")
        try:
            await pub.start()
            check_publish_response(pub, room)
            await wait_media_sent(pub)
            v = await gst_view(room)
            await ended(pub, room)
        finally:
            await pub.stop()
        return pub, v

    pub, v = asyncio.run(scenario())
    print("gstreamer viewer:", json.dumps(v))
    check_gst_view(v, codec)
    log = "\n".join(server_log())
    assert "whep session started" in log and "whip session started" in log


def test_gstreamer_viewer_trickles_candidates_with_patch(room):
    """A player that sends its offer at once and its candidates afterwards
    (PATCH, application/trickle-ice-sdpfrag, If-Match) gets 204 and plays."""

    async def scenario():
        pub = aiortc_peer.WhipPublisher(room)
        try:
            await pub.start()
            await wait_media_sent(pub)
            return await gst_view(room, extra=("--trickle",))
        finally:
            await pub.stop()

    v = asyncio.run(scenario())
    print("gstreamer viewer:", json.dumps(v))
    assert v.get("patch_status") == 204, v
    check_gst_view(v, "VP8")


def test_gstreamer_viewer_over_ice_tcp_only(room):
    """A viewer whose network drops UDP (libnice with UDP off: it offers only
    TCP candidates) plays over the server's ICE-TCP port."""

    async def scenario():
        pub = aiortc_peer.WhipPublisher(room)
        try:
            await pub.start()
            await wait_media_sent(pub)
            return await gst_view(room, extra=("--tcp",))
        finally:
            await pub.stop()

    v = asyncio.run(scenario())
    print("gstreamer viewer:", json.dumps(v))
    assert v.get("offer_transports") == ["tcp"], v
    check_gst_view(v, "VP8")


def test_gstreamer_publishes_aiortc_plays(room):
    """The other direction: webrtcbin publishes over WHIP (its own VP8
    packetizer, picture IDs and RTCP), aiortc decodes it over WHEP."""

    async def scenario():
        tok = petrel.token(room, "gst-publisher", publish=True)
        proc = await asyncio.create_subprocess_exec(
            GST_PYTHON, os.path.join(HERE, "gst_publisher.py"), petrel.base_url(), room, tok,
            "--seconds", str(VIEW_SECONDS + 10), "--tone", "500", "--stop-on-stdin",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        viewer = aiortc_peer.WhepViewer(room)
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 15)
            event = json.loads(line or b"{}")
            assert event.get("event") == "connected", event
            deadline = time.monotonic() + 5
            while set(await asyncio.to_thread(petrel.published, room, "gst-publisher")) != {"video", "audio"}:
                assert time.monotonic() < deadline, "the server did not publish webrtcbin's tracks"
                await asyncio.sleep(0.05)
            r = await viewer.start()
            assert r.status == 201, r
            deadline = time.monotonic() + VIEW_SECONDS
            while time.monotonic() < deadline and (viewer.video_frames <= WANT_FRAMES or viewer.audio_frames < 50):
                await asyncio.sleep(0.1)
            d = await viewer.stop()
            assert d.status == 200, d
            out, err = await asyncio.wait_for(proc.communicate(b"stop\n"), 30)
            done = json.loads(out.decode().strip().splitlines()[-1])
        except BaseException:
            proc.kill()
            out, err = await proc.communicate()
            sys.stderr.write(err.decode()[-3000:])
            raise
        finally:
            await viewer.stop()
        return done, viewer

    done, viewer = asyncio.run(scenario())
    print("gstreamer publisher:", json.dumps(done))
    print("aiortc viewer:", viewer.video_frames, viewer.video_size, viewer.luma_means, viewer.tones)
    assert done.get("ok") and done["whip_status"] == 201 and done["delete_status"] == 200, done
    assert viewer.video_frames > MIN_FRAMES
    assert viewer.video_size == (320, 240)
    assert viewer.luma_means and all(80 < m < 175 for m in viewer.luma_means), viewer.luma_means
    assert len(set(viewer.fingerprints)) > 1, "the decoded picture does not move"
    assert viewer.audio_frames > 0
    check_tone(viewer.tones, 500)


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_relay_only_publisher_through_the_advertised_turn_server(room, transport):
    """An encoder whose network allows only the TURN server uses the one the
    WHIP endpoint advertised in its Link headers (aioice as the TURN client,
    REST credentials), publishes through the embedded TURN server, and a
    viewer plays it."""

    async def scenario():
        # The Link headers of an earlier session of the same encoder.
        probe = aiortc_peer.WhipPublisher(room, identity="encoder")
        await probe.start()
        links = petrel.ice_servers(probe.response.link)
        await probe.stop()
        turn = next(s for s in links if s["urls"].endswith("transport=" + transport))
        pub = aiortc_peer.WhipPublisher(
            room, identity="encoder",
            turn=aiortc_peer.RTCIceServer(urls=turn["urls"], username=turn["username"], credential=turn["credential"]),
        )
        try:
            await pub.start()
            await wait_media_sent(pub)
            pair = pub.selected_pair()
            v = await gst_view(room)
            await ended(pub, room)
        finally:
            await pub.stop()
        return links, pub, pair, v

    links, pub, pair, v = asyncio.run(scenario())
    print("ice servers:", links)
    print("publisher offer candidates:", petrel.candidates(pub.offer))
    print("selected pair:", pair)
    print("gstreamer viewer:", json.dumps(v))
    # The advertised TURN server is where the client reached the endpoint, on
    # UDP and TCP, with REST credentials ("expiry:identity").
    assert all(s["urls"].startswith("turn:127.0.0.1:") for s in links), links
    assert {s["urls"].rsplit("=", 1)[-1] for s in links} == {"udp", "tcp"}, links
    assert all(re.fullmatch(r"\d+:encoder", s["username"]) and s["credential"] for s in links), links
    types = {c[7] for c in petrel.candidates(pub.offer)}
    assert types == {"relay"}, f"the relay-only offer has {types} candidates"
    assert pair == ("relay", "host"), pair
    check_gst_view(v, "VP8")


def test_audio_only_publisher_plays_as_audio(room):
    """A publisher with a microphone and no camera (a radio, a podcast): the
    viewer, which offers to receive video and audio, hears it and gets no
    video."""

    async def scenario():
        pub = aiortc_peer.WhipPublisher(room, video=False)
        try:
            await pub.start()
            assert "m=video" not in pub.offer
            await wait_media_sent(pub)
            return await gst_view(room, want_frames=0)
        finally:
            await pub.stop()

    v = asyncio.run(scenario())
    print("gstreamer viewer:", json.dumps(v))
    assert v.get("ok") and v["whep_status"] == 201, v
    assert v["errors"] == [], v["errors"]
    assert v["connection_state"] == "connected", v
    assert v["video_codec"] is None and v["video_rtp"] == 0, v
    assert v["audio_codec"] == "OPUS" and v["audio_rtp"] >= MIN_AUDIO_PACKETS, v
    check_tone(v["tones"], 400)
    assert v["delete_status"] == 200


def test_two_independent_viewers_see_one_publisher(room):
    """Fan-out to two different stacks at once: webrtcbin and aiortc both decode
    the same aiortc publisher; then DELETE of the publisher ends the stream for
    new viewers."""

    async def scenario():
        pub = aiortc_peer.WhipPublisher(room)
        viewer = aiortc_peer.WhepViewer(room)
        try:
            await pub.start()
            await wait_media_sent(pub)
            gst = asyncio.ensure_future(gst_view(room))
            r = await viewer.start()
            assert r.status == 201, r
            assert all_loopback(petrel.candidate_addresses(r.body)), r.body
            deadline = time.monotonic() + VIEW_SECONDS
            while time.monotonic() < deadline and (viewer.video_frames <= WANT_FRAMES or viewer.audio_frames < 50):
                await asyncio.sleep(0.1)
            v = await gst
            viewer.rtp = await viewer.received()
            d = await viewer.stop()
            assert d.status == 200, d
            await ended(pub, room)
            # Nothing left to play: a new viewer is told so.
            tok = petrel.token(room, "late-viewer", subscribe=True)
            late = await asyncio.to_thread(petrel.post_sdp, "whep", room, tok, viewer.pc.localDescription.sdp)
        finally:
            await viewer.stop()
            await pub.stop()
        return v, viewer, late

    v, viewer, late = asyncio.run(scenario())
    print("gstreamer viewer:", json.dumps(v))
    print("aiortc viewer:", viewer.video_frames, "frames", viewer.audio_frames, "audio frames", viewer.rtp, "RTP")
    print("aiortc viewer:", viewer.luma_means, viewer.tones)
    check_gst_view(v, "VP8")
    assert viewer.video_frames > MIN_FRAMES
    assert viewer.video_size == (aiortc_peer.WIDTH, aiortc_peer.HEIGHT)
    assert viewer.luma_means and all(80 < m < 175 for m in viewer.luma_means), viewer.luma_means
    assert viewer.audio_frames > 0, f"no audio decoded; RTP packets received: {viewer.rtp}"
    check_tone(viewer.tones, 400)
    assert late.status == 404 and late.json()["code"] == "not_found", late


def test_whep_plays_the_selected_participant(room):
    """Two cameras in one room: ?participant= picks whose video and audio a
    viewer gets, ?track= picks tracks by sid (here b's picture with a's
    sound), and without either the viewer gets the newest publisher. The
    codecs (VP8, H.264) and the tones (400, 600 Hz) tell the two apart."""

    async def scenario():
        a = aiortc_peer.WhipPublisher(room, identity="cam-a", video_codec="video/VP8", tone_hz=400)
        b = aiortc_peer.WhipPublisher(room, identity="cam-b", video_codec="video/H264", tone_hz=600)
        try:
            await a.start()
            await wait_media_sent(a)
            await b.start()
            await wait_media_sent(b)
            sa = await asyncio.to_thread(petrel.track_sids, room, "cam-a")
            sb = await asyncio.to_thread(petrel.track_sids, room, "cam-b")
            # All at once: several subscribe to the same track inside the
            # server's keyframe-aggregation window.
            return await asyncio.gather(
                gst_view(room, identity="viewer-a", query="?participant=cam-a"),
                gst_view(room, identity="viewer-b", query="?participant=cam-b"),
                gst_view(room, identity="viewer-newest"),
                gst_view(room, identity="viewer-mixed", query=f"?track={sb['video']}&track={sa['audio']}"),
            )
        finally:
            await b.stop()
            await a.stop()

    va, vb, vn, vm = asyncio.run(scenario())
    for name, v in (("a", va), ("b", vb), ("newest", vn), ("mixed", vm)):
        print(f"viewer {name}:", json.dumps(v))
    check_gst_view(va, "VP8", tone_hz=400)
    check_gst_view(vb, "H264", tone_hz=600)
    check_gst_view(vn, "H264", tone_hz=600)
    check_gst_view(vm, "H264", tone_hz=400)


def test_whep_viewer_that_applies_the_answer_late_sees_a_picture(room):
    """A player that takes half a second to apply the answer (a busy or slow
    device) still sees a picture. aiortc as the publisher sends a keyframe only
    when asked (every 3000 frames otherwise), and aiortc as the viewer never
    asks: it relies on the stream starting with a keyframe, as the server must
    ensure."""

    async def scenario():
        pub = aiortc_peer.WhipPublisher(room)
        viewer = aiortc_peer.WhepViewer(room)
        try:
            await pub.start()
            await wait_media_sent(pub)
            await viewer.start(answer_delay=0.5)
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline and viewer.video_frames <= MIN_FRAMES:
                await asyncio.sleep(0.1)
            stats = await viewer.pc.getStats()
            received = sum(s.packetsReceived for s in stats.values() if s.type == "inbound-rtp" and s.kind == "video")
            return viewer.video_frames, received
        finally:
            await viewer.stop()
            await pub.stop()

    frames, received = asyncio.run(scenario())
    print(f"aiortc viewer: {frames} frames decoded from {received} video packets")
    assert received > 0, "video packets reach the viewer"
    assert frames > MIN_FRAMES, f"no picture: {frames} frames decoded from {received} video packets"


def test_two_viewers_joining_a_tenth_of_a_second_apart_both_see_a_picture(room):
    """Keyframe requests are aggregated (one per 300 ms): a viewer bound after
    the requested keyframe went by, inside that window, must still get one.
    aiortc as the viewer never asks for a keyframe itself, and as the
    publisher sends one only when asked (or every 3000 frames)."""

    async def scenario():
        pub = aiortc_peer.WhipPublisher(room)
        first = aiortc_peer.WhepViewer(room, identity="first")
        second = aiortc_peer.WhepViewer(room, identity="second")
        try:
            await pub.start()
            await wait_media_sent(pub)
            await first.start()
            await asyncio.sleep(0.1)
            await second.start()
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline and min(first.video_frames, second.video_frames) <= MIN_FRAMES:
                await asyncio.sleep(0.1)
            received = []
            for v in (first, second):
                stats = await v.pc.getStats()
                received.append(
                    sum(s.packetsReceived for s in stats.values() if s.type == "inbound-rtp" and s.kind == "video")
                )
            return (first.video_frames, second.video_frames), received
        finally:
            await second.stop()
            await first.stop()
            await pub.stop()

    frames, received = asyncio.run(scenario())
    print(f"aiortc viewers: frames decoded {frames}, video packets received {received}")
    assert min(frames) > MIN_FRAMES, f"frames decoded {frames}, video packets received {received}"


def test_republish_with_same_identity_replaces_the_old_session(room):
    """An encoder that lost its connection publishes again with the same token
    before the server noticed: the new session replaces the old one and viewers
    can play it."""

    async def scenario():
        first = aiortc_peer.WhipPublisher(room, identity="encoder")
        second = aiortc_peer.WhipPublisher(room, identity="encoder")
        try:
            await first.start()
            await wait_media_sent(first)
            await second.start()
            await wait_media_sent(second)
            await asyncio.sleep(0.5)
            return await gst_view(room, seconds=8, whep_retry_seconds=2)
        finally:
            await second.stop()
            await first.pc.close()

    v = asyncio.run(scenario())
    print("gstreamer viewer:", json.dumps(v))
    assert v.get("whep_status") == 201, v
    check_gst_view(v, "VP8")


# What a misconfigured client sees.

OFFER_STUB = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"


def check_json_error(r, status, code):
    assert r.status == status, (r.status, r.body)
    assert r.headers["Content-Type"].startswith("application/json")
    body = r.json()
    assert set(body) >= {"code", "message"}, body
    assert body["code"] == code, body
    assert body["message"], body
    return body


def test_whip_with_a_bad_token_is_unauthorized(room):
    r = petrel.post_sdp("whip", room, "not-a-token", OFFER_STUB)
    check_json_error(r, 401, "unauthorized")
    r = petrel.post_sdp("whip", room, None, OFFER_STUB)
    body = check_json_error(r, 401, "unauthorized")
    assert "token" in body["message"]
    # A token signed with another secret.
    other = os.environ.copy()
    other["PETREL_API_SECRET"] = "x" * 40
    import subprocess

    forged = subprocess.run(
        [petrel.env("PETREL_BIN"), "token", "--room", room, "--identity", "mallory", "--publish"],
        env=other, check=True, capture_output=True, text=True,
    ).stdout.strip()
    check_json_error(petrel.post_sdp("whip", room, forged, OFFER_STUB), 401, "unauthorized")


def test_whip_with_an_expired_token_says_so(room):
    """An encoder left configured with yesterday's token is told it expired,
    not that it is forged."""
    tok = petrel.token(room, "pub", publish=True, ttl="-1h")
    body = check_json_error(petrel.post_sdp("whip", room, tok, OFFER_STUB), 401, "token_expired")
    assert "expired" in body["message"], body


def test_whip_with_a_wrong_content_type_is_415(room):
    tok = petrel.token(room, "pub", publish=True)
    r = petrel.post_sdp("whip", room, tok, OFFER_STUB, content_type="application/json")
    body = check_json_error(r, 415, "bad_request")
    assert "application/sdp" in body["message"]
    # The message is for a person: the code is in its own field, not repeated.
    assert not body["message"].startswith("bad_request"), body


def test_whip_with_a_token_that_cannot_publish_is_forbidden(room):
    tok = petrel.token(room, "viewer", subscribe=True)
    check_json_error(petrel.post_sdp("whip", room, tok, OFFER_STUB), 403, "forbidden")
    elsewhere = petrel.token(room + "-other", "pub", publish=True)
    check_json_error(petrel.post_sdp("whip", room, elsewhere, OFFER_STUB), 403, "forbidden")


def test_whip_with_garbage_sdp_is_400(room):
    tok = petrel.token(room, "pub", publish=True)
    check_json_error(petrel.post_sdp("whip", room, tok, "hello"), 400, "sdp_invalid")
    check_json_error(petrel.post_sdp("whip", room, tok, "v=0\r\nthis is not sdp\r\n"), 400, "sdp_invalid")


def test_whep_player_without_the_publishers_codec_is_told_so(room):
    """A player that can only decode H.264 asks for a VP8 stream: a 400 that
    names the problem, not a 201 and a black picture."""

    async def scenario():
        pub = aiortc_peer.WhipPublisher(room, video_codec="video/VP8")
        viewer = aiortc_peer.WhepViewer(room)
        try:
            await pub.start()
            await wait_media_sent(pub)
            return await viewer.start(video_codec="video/H264", expect=400, retry_404_seconds=5)
        finally:
            await viewer.stop()
            await pub.stop()

    r = asyncio.run(scenario())
    body = check_json_error(r, 400, "sdp_invalid")
    assert "codec" in body["message"], body


def test_whep_ice_restart_patch_leaves_the_session_playing(room):
    """An ICE restart PATCH on a WHEP session gets 200 with the server's new
    credentials (RFC 9725 4.3.2), and the session plays on: aiortc does not
    apply the new credentials, and the server still answers the previous
    ones."""

    async def scenario():
        pub = aiortc_peer.WhipPublisher(room)
        viewer = aiortc_peer.WhepViewer(room)
        try:
            await pub.start()
            await wait_media_sent(pub)
            await viewer.start()
            offer = viewer.pc.localDescription.sdp
            restart = re.sub(r"a=ice-ufrag:\S+", "a=ice-ufrag:restart1", offer)
            restart = re.sub(r"a=ice-pwd:\S+", "a=ice-pwd:restartrestartrestartrestart", restart)
            frag = petrel.sdpfrag(restart, [])
            r = await asyncio.to_thread(petrel.patch, viewer.location, viewer.token, frag, "*")
            before = viewer.video_frames
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and viewer.video_frames <= before + MIN_FRAMES:
                await asyncio.sleep(0.1)
            return r, viewer.video_frames - before
        finally:
            await viewer.stop()
            await pub.stop()

    r, frames_after = asyncio.run(scenario())
    assert r.status == 200, (r.status, r.body)
    assert r.headers.get("Content-Type") == "application/trickle-ice-sdpfrag", r.headers
    assert re.search(r"a=ice-ufrag:\S+", r.body) and re.search(r"a=ice-pwd:\S+", r.body), r.body
    assert frames_after > MIN_FRAMES, f"{frames_after} frames after the restart PATCH"


def test_whep_before_anything_is_published_is_404(room):
    tok = petrel.token(room, "viewer", subscribe=True)
    check_json_error(petrel.post_sdp("whep", room, tok, OFFER_STUB), 404, "not_found")
