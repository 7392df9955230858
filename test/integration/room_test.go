package integration

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
)

func TestPublishSubscribeAndData(t *testing.T) {
	e := start(t)
	alice := e.join("r1", "alice")
	bob := e.join("r1", "bob")
	ctx := ctxT(t, 15*time.Second)

	if ev, err := alice.WaitEvent(ctx, "participantJoined"); err != nil {
		t.Fatal(err)
	} else if p := ev["participant"].(map[string]any); p["identity"] != "bob" {
		t.Fatalf("joined event for %v", p["identity"])
	}

	v := newVideo("cam")
	sid, _, err := alice.Publish(ctx, v.track, "camera")
	if err != nil {
		t.Fatal(err)
	}
	checkICELite(t, alice)
	v.run(t)
	a := newAudio("mic")
	asid, _, err := alice.Publish(ctx, a.track, "microphone")
	if err != nil {
		t.Fatal(err)
	}
	a.run(t)

	seen := map[string]bool{}
	for i := 0; i < 2; i++ {
		tr := waitTrack(t, bob, 10*time.Second)
		if tr.ParticipantSid != alice.Joined["participant"].(map[string]any)["sid"] {
			t.Fatalf("track from %q, want alice's sid", tr.ParticipantSid)
		}
		seen[tr.TrackSid] = true
		pkts := readPackets(t, tr.Remote, 20, 5*time.Second)
		if tr.TrackSid == sid {
			// A subscriber's stream starts at a keyframe.
			if pkts[0].Payload[1]&0x01 != 0 && pkts[0].Payload[0]&0x10 != 0 {
				t.Fatalf("first packet is not a keyframe start: % x", pkts[0].Payload[:4])
			}
			for i := 1; i < len(pkts); i++ {
				if d := pkts[i].SequenceNumber - pkts[i-1].SequenceNumber; d != 1 {
					t.Fatalf("sequence jump of %d on loopback", d)
				}
			}
		}
	}
	if !seen[sid] || !seen[asid] {
		t.Fatalf("got tracks %v, want %s and %s", seen, sid, asid)
	}

	// Data: text to everyone, binary to bob by name, both reliable and lossy.
	if err := alice.SendData([]byte("hello room"), true, true); err != nil {
		t.Fatal(err)
	}
	if err := alice.SendData([]byte{0, 1, 2, 255}, false, false, "bob"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		select {
		case d := <-bob.DataIn:
			if d.Header.From != "alice" {
				t.Fatalf("data from %q", d.Header.From)
			}
			if d.Reliable && (string(d.Payload) != "hello room" || !d.Header.Text) {
				t.Fatalf("reliable message %q text=%v", d.Payload, d.Header.Text)
			}
			if !d.Reliable && !bytes.Equal(d.Payload, []byte{0, 1, 2, 255}) {
				t.Fatalf("lossy message % x", d.Payload)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("data message not received")
		}
	}

	// A forged sender is overwritten by the server.
	if err := bob.SendData([]byte("x"), true, true, "nobody-here"); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-alice.DataIn:
		t.Fatalf("message to a named absent participant reached alice: %+v", d.Header)
	case <-time.After(300 * time.Millisecond):
	}

	// Leaving is announced.
	bob.Close()
	if ev, err := alice.WaitEvent(ctx, "participantLeft"); err != nil {
		t.Fatal(err)
	} else if ev["identity"] != "bob" {
		t.Fatalf("left event for %v", ev["identity"])
	}
}

func TestNACKAnsweredFromCacheAndPLIAggregated(t *testing.T) {
	e := start(t)
	alice := e.join("r2", "alice")
	// Bob re-requests packets he already has, which SRTP replay protection would
	// otherwise discard as replays.
	bob, err := client.Join(ctxT(t, 10*time.Second), e.ws, e.token("r2", "bob", all, time.Hour), client.Options{
		API: client.LoopbackAPI(func(se *webrtc.SettingEngine) { se.DisableSRTPReplayProtection(true) }),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	carol := e.join("r2", "carol")
	ctx := ctxT(t, 15*time.Second)
	v := newVideo("cam")
	_, _, err = alice.Publish(ctx, v.track, "camera")
	if err != nil {
		t.Fatal(err)
	}
	v.run(t)
	tb := waitTrack(t, bob, 10*time.Second)
	tc := waitTrack(t, carol, 10*time.Second)
	pkts := readPackets(t, tb.Remote, 30, 5*time.Second)
	readPackets(t, tc.Remote, 5, 5*time.Second)

	// NACK an already received packet: the server resends it from its cache.
	want := pkts[len(pkts)-5]
	nack := &rtcp.TransportLayerNack{MediaSSRC: uint32(tb.Remote.SSRC()), Nacks: rtcp.NackPairsFromSequenceNumbers([]uint16{want.SequenceNumber})}
	if err := bob.Sub.WriteRTCP([]rtcp.Packet{nack}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(3 * time.Second)
	for found := false; !found; {
		select {
		case <-deadline:
			t.Fatalf("NACKed packet %d was not retransmitted", want.SequenceNumber)
		default:
		}
		p, _, err := tb.Remote.ReadRTP()
		if err != nil {
			t.Fatal(err)
		}
		if p.SequenceNumber == want.SequenceNumber {
			if !bytes.Equal(p.Payload, want.Payload) {
				t.Fatal("retransmission differs from the original")
			}
			found = true
		}
	}

	// Twenty PLIs from two subscribers within 100 ms become at most two upstream.
	before := e.metric("petrel_plis_total", "out")
	for i := 0; i < 10; i++ {
		_ = bob.Sub.WriteRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: uint32(tb.Remote.SSRC())}})
		_ = carol.Sub.WriteRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: uint32(tc.Remote.SSRC())}})
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	in := e.metric("petrel_plis_total", "in")
	out := e.metric("petrel_plis_total", "out") - before
	if in < 20 {
		t.Fatalf("server saw %v PLIs, want ≥ 20", in)
	}
	if out > 2 {
		t.Fatalf("%v keyframe requests sent upstream for 20 PLIs in 100 ms", out)
	}
}

func TestRenegotiationMuteAndSelectiveSubscribe(t *testing.T) {
	e := start(t)
	alice := e.join("r3", "alice")
	ctx := ctxT(t, 20*time.Second)
	no := false
	bob, err := joinWith(e, "r3", "bob", &no)
	if err != nil {
		t.Fatal(err)
	}
	v := newVideo("cam")
	sid, _, err := alice.Publish(ctx, v.track, "camera")
	if err != nil {
		t.Fatal(err)
	}
	v.run(t)
	ev, err := bob.WaitEvent(ctx, "trackPublished")
	if err != nil {
		t.Fatal(err)
	}
	if ev["track"].(map[string]any)["sid"] != sid {
		t.Fatalf("trackPublished for %v", ev["track"])
	}
	select {
	case tr := <-bob.Tracks:
		t.Fatalf("got track %s without subscribing", tr.TrackSid)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := bob.Request(ctx, protocol.Msg{"type": "subscribe", "trackSids": []string{sid}, "subscribe": true}); err != nil {
		t.Fatal(err)
	}
	tr := waitTrack(t, bob, 10*time.Second)
	readPackets(t, tr.Remote, 10, 5*time.Second)

	// A second track published later arrives through renegotiation, after
	// subscribing to it.
	v2 := newVideo("screen")
	sid2, _, err := alice.Publish(ctx, v2.track, "screen")
	if err != nil {
		t.Fatal(err)
	}
	v2.run(t)
	if _, err := bob.WaitEvent(ctx, "trackPublished"); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Request(ctx, protocol.Msg{"type": "subscribe", "trackSids": []string{sid2}, "subscribe": true}); err != nil {
		t.Fatal(err)
	}
	tr2 := waitTrack(t, bob, 10*time.Second)
	if tr2.TrackSid != sid2 {
		t.Fatalf("second track %s, want %s", tr2.TrackSid, sid2)
	}
	readPackets(t, tr2.Remote, 10, 5*time.Second)

	// Muting is broadcast and stops forwarding.
	if _, err := alice.Request(ctx, protocol.Msg{"type": "muteTrack", "trackSid": sid, "muted": true}); err != nil {
		t.Fatal(err)
	}
	if ev, err := bob.WaitEvent(ctx, "trackMuted"); err != nil || ev["muted"] != true {
		t.Fatalf("trackMuted %v %v", ev, err)
	}
	// Unknown tracks are a clear error.
	_, err = bob.Request(ctx, protocol.Msg{"type": "subscribe", "trackSids": []string{"TR_nope"}, "subscribe": true})
	if protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("subscribe to unknown track: %v", err)
	}
}

func TestICERestartAndResume(t *testing.T) {
	e := start(t)
	alice := e.join("r4", "alice")
	bob := e.join("r4", "bob")
	ctx := ctxT(t, 30*time.Second)
	v := newVideo("cam")
	if _, _, err := alice.Publish(ctx, v.track, "camera"); err != nil {
		t.Fatal(err)
	}
	v.run(t)
	tr := waitTrack(t, bob, 10*time.Second)
	readPackets(t, tr.Remote, 10, 5*time.Second)

	// ICE restart of both connections while signaling stays up.
	oldUfrag := bob.Sub.RemoteDescription().SDP
	if err := bob.NegotiatePublisher(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Request(ctx, protocol.Msg{"type": "restartIce"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "subscriber ICE restart", func() bool {
		d := bob.Sub.RemoteDescription()
		return d != nil && d.SDP != oldUfrag && bob.Sub.SignalingState() == webrtc.SignalingStateStable
	})
	readPackets(t, tr.Remote, 20, 5*time.Second)

	// Signaling lost: the participant is kept and resumes with its subscriptions.
	sid := bob.Joined["participant"].(map[string]any)["sid"].(string)
	resume := bob.Joined["resumeToken"].(string)
	bob.CloseWS()
	time.Sleep(200 * time.Millisecond)
	c, err := resumeJoin(e, "r4", "bob", sid, resume)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Joined["resumed"] != true {
		t.Fatalf("joined without resumed: %v", c.Joined)
	}
	if p := c.Joined["participant"].(map[string]any); p["sid"] != sid {
		t.Fatalf("resumed as %v, want %s", p["sid"], sid)
	}
	// Media kept flowing on the old connections throughout.
	readPackets(t, tr.Remote, 20, 5*time.Second)
	// Alice never saw bob leave.
	select {
	case ev := <-alice.Events:
		if ev["type"] == "participantLeft" {
			t.Fatal("resume was seen as leaving")
		}
	default:
	}
	// A wrong resume token is refused.
	if _, err := resumeJoin(e, "r4", "bob", sid, "wrong"); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("resume with a wrong token: %v", err)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if f() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestLateSubscriberGetsKeyframeOnRequestAndShutdownTellsClients(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 20*time.Second)
	alice := e.join("k", "alice")
	v := newVideo("cam")
	v.keyEvery = 1 << 30 // only the first frame and requested ones
	alice.OnPublisherRTCP = func(_ string, pkts []rtcp.Packet) {
		for _, p := range pkts {
			if _, ok := p.(*rtcp.PictureLossIndication); ok {
				v.forceKey.Store(true)
			}
		}
	}
	if _, _, err := alice.Publish(ctx, v.track, "camera"); err != nil {
		t.Fatal(err)
	}
	v.run(t)
	time.Sleep(500 * time.Millisecond) // the first keyframe is long gone
	bob := e.join("k", "bob")
	tr := waitTrack(t, bob, 10*time.Second)
	// Without the server's keyframe request bob would never start decoding.
	pkts := readPackets(t, tr.Remote, 5, 3*time.Second)
	if pkts[0].Payload[1]&0x01 != 0 {
		t.Fatal("first packet is not a keyframe")
	}

	// Shutdown: every client is told why it is being disconnected.
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = e.srv.Shutdown(sctx)
	}()
	for _, c := range []*client.Client{alice, bob} {
		if ev, err := c.WaitEvent(ctx, "leave"); err != nil || ev["reason"] != "server_shutdown" {
			t.Fatalf("shutdown: %v %v", ev, err)
		}
	}
}

func TestServerNACKsPublisherForLostPackets(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 15*time.Second)
	alice := e.join("n", "alice")
	tr, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, "cam", "s")
	if err != nil {
		t.Fatal(err)
	}
	nacked := make(chan uint16, 64)
	alice.OnPublisherRTCP = func(_ string, pkts []rtcp.Packet) {
		for _, p := range pkts {
			if n, ok := p.(*rtcp.TransportLayerNack); ok {
				for _, pair := range n.Nacks {
					for _, s := range pair.PacketList() {
						nacked <- s
					}
				}
			}
		}
	}
	if _, _, err := alice.Publish(ctx, tr, "camera"); err != nil {
		t.Fatal(err)
	}
	checkICELite(t, alice)
	const lost = 1050
	go func() {
		for seq := uint16(1000); seq < 1200; seq++ {
			if seq != lost {
				payload := []byte{0x10, 0x01, 0, 0}
				_ = tr.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq, Timestamp: uint32(seq) * 3000, Marker: true}, Payload: payload})
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for {
		select {
		case s := <-nacked:
			if s == lost {
				return
			}
			t.Fatalf("NACK for %d, which was sent", s)
		case <-ctx.Done():
			t.Fatal("the server never asked for the lost packet")
		}
	}
}

func TestRelayForDirectConnections(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 10*time.Second)
	alice := e.join("p2p", "alice")
	bob := e.join("p2p", "bob")
	if _, err := alice.Request(ctx, protocol.Msg{"type": "relay", "to": sidOf(bob), "data": map[string]any{"sdp": "v=0", "kind": "offer"}}); err != nil {
		t.Fatal(err)
	}
	ev, err := bob.WaitEvent(ctx, "relay")
	if err != nil {
		t.Fatal(err)
	}
	if ev["from"] != sidOf(alice) || ev["data"].(map[string]any)["kind"] != "offer" {
		t.Fatalf("relayed %v", ev)
	}
	if _, err := alice.Request(ctx, protocol.Msg{"type": "relay", "to": "PA_nobody", "data": 1}); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("relay to nobody: %v", err)
	}
}
