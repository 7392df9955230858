package session

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/rtc"
)

// ingestEvents is an IngestHandler that hands over each new stream.
type ingestEvents struct {
	*dataEvents
	tracks chan *InTrack
}

func (e *ingestEvents) OnTrack(t *InTrack) { e.tracks <- t }

func newIngestEvents() *ingestEvents {
	return &ingestEvents{dataEvents: &dataEvents{events: newEvents(), got: make(chan string, 16)}, tracks: make(chan *InTrack, 8)}
}

// testIngest receives what Petrel forwards, with its publisher interceptors.
func testIngest() Ingest {
	return Ingest{
		Codecs: []Track{
			{Kind: "audio", MimeType: "audio/opus", ClockRate: 48000, Channels: 2},
			{Kind: "video", MimeType: "video/VP8", ClockRate: 90000},
		},
		Interceptors: rtc.NewPublisherInterceptor,
		Feedback:     []string{"nack", "nack pli", "ccm fir", "transport-cc"},
		Extensions:   []string{sdp.SDESMidURI, sdp.SDESRTPStreamIDURI, rtc.ExtTransportCC, rtc.ExtAudioLevel},
	}
}

// TestIngestWithPion: a Pion PeerConnection publishes video and audio and
// opens a data channel, as a room client's publisher connection does; the
// publisher session answers without a PeerConnection, hands each stream
// over as its first packet arrives, asks for a lost packet and for a
// keyframe, drops junk from a checked address and goes on, and ends the
// streams when the client stops sending one and when it closes.
func TestIngestWithPion(t *testing.T) {
	s := startServer(t)
	ev := newIngestEvents()
	pc, _ := pionClient(t)
	video, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, "cam", "PA_me")
	if err != nil {
		t.Fatal(err)
	}
	audio, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "mic", "PA_me")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pc.AddTrack(video)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.AddTrack(audio); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.CreateDataChannel("_reliable", nil); err != nil {
		t.Fatal(err)
	}
	feedback := make(chan rtcp.Packet, 64)
	go func() {
		for {
			pkts, _, err := vs.ReadRTCP()
			if err != nil {
				return
			}
			for _, p := range pkts {
				select {
				case feedback <- p:
				default:
				}
			}
		}
	}()

	offer := offerWith(t, pc, nil)
	cfg := testIngest()
	var built atomic.Int32
	cfg.Interceptors = func() (interceptor.Interceptor, error) { built.Add(1); return rtc.NewPublisherInterceptor() }
	v, answer, err := s.NewPublisher(offer, cfg, 65536, ev)
	if err != nil {
		t.Fatal(err)
	}
	if built.Load() != 0 {
		t.Fatal("the interceptors (and their timers) were built before any stream came")
	}
	for _, want := range []string{"a=ice-lite", "a=setup:passive", "a=recvonly", "VP8/90000", "opus/48000/2",
		"m=application 9 UDP/DTLS/SCTP webrtc-datachannel", "a=extmap:", "nack pli"} {
		if !strings.Contains(answer, want) {
			t.Errorf("the answer has no %q:\n%s", want, answer)
		}
	}
	if strings.Contains(answer, "goog-remb") {
		t.Error("the answer offers REMB, which the server never sends")
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		t.Fatalf("the client refused the answer: %v\n%s", err, answer)
	}
	wait(t, ev.dtls, "DTLS")
	waitFor(t, "the client to connect", func() bool { return pc.ConnectionState() == webrtc.PeerConnectionStateConnected })

	// Video with packet 1005 lost: the stream arrives in order without it,
	// and the NACK generator asks for it.
	send := func(seq uint16, key bool) {
		p := []byte{0x10, 0x01, 0, 0}
		if key {
			p[1] = 0x00
		}
		_ = video.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq, Timestamp: uint32(seq) * 3000, Marker: true}, Payload: p})
	}
	go func() {
		for seq := uint16(1000); seq < 1040; seq++ {
			if seq != 1005 {
				send(seq, seq == 1000)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	vt := wait(t, ev.tracks, "the video stream")
	if n := built.Load(); n != 1 {
		t.Fatalf("interceptor chains built: %d", n)
	}
	if vt.Kind != "video" || vt.ID != "cam" || vt.StreamID != "PA_me" || vt.MimeType != "video/VP8" || vt.RID() != "" || vt.SSRC() == 0 {
		t.Fatalf("video stream %+v", vt)
	}
	buf := make([]byte, 1500)
	var seqs []uint16
	for len(seqs) < 10 {
		n, err := vt.ReadRTP(buf)
		if err != nil {
			t.Fatal(err)
		}
		var p rtp.Packet
		if err := p.Unmarshal(buf[:n]); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, p.SequenceNumber)
	}
	for i := 1; i < len(seqs); i++ {
		if want := seqs[i-1] + 1 + b2u(seqs[i-1] == 1004); seqs[i] != want {
			t.Fatalf("sequence numbers %v", seqs)
		}
	}
	nacked := func(p rtcp.Packet) bool {
		n, ok := p.(*rtcp.TransportLayerNack)
		return ok && len(n.Nacks) > 0 && n.Nacks[0].PacketID <= 1005 && 1005 <= n.Nacks[0].PacketID+16
	}
	waitRTCP(t, feedback, "a NACK for the lost packet", nacked)
	vt.RequestKeyframe()
	waitRTCP(t, feedback, "a PLI", func(p rtcp.Packet) bool {
		pli, ok := p.(*rtcp.PictureLossIndication)
		return ok && pli.MediaSSRC == vt.SSRC()
	})

	// Junk from a second address that passed an ICE check: dropped and
	// counted, the stream goes on.
	sendJunk(t, s, v.DataSession, offer, answer, [][]byte{
		append([]byte{0x80, 0x60, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4}, bytes.Repeat([]byte{7}, 40)...), // RTP that is not SRTP
		{0x80, 0x60, 0}, // a truncated header
		append([]byte{0x80, 0xc8}, bytes.Repeat([]byte{7}, 40)...), // SRTCP that does not authenticate
	})
	go func() {
		for seq := uint16(1040); seq < 1050; seq++ {
			send(seq, false)
		}
	}()
	for {
		n, err := vt.ReadRTP(buf)
		if err != nil {
			t.Fatal(err)
		}
		var p rtp.Packet
		if err := p.Unmarshal(buf[:n]); err == nil && p.SequenceNumber >= 1040 {
			break
		}
	}

	// The forwarding goroutine takes over (PushTo): once it has read the
	// queue, the socket's reader hands it each packet itself, in order.
	pushed := make(chan uint16, 64)
	push := func(b []byte) {
		var p rtp.Packet
		if p.Unmarshal(b) == nil {
			pushed <- p.SequenceNumber
		}
	}
	last := uint16(1040)
	for !vt.PushTo(push) {
		n, err := vt.ReadRTP(buf)
		if err != nil {
			t.Fatal(err)
		}
		var p rtp.Packet
		if p.Unmarshal(buf[:n]) == nil {
			last = p.SequenceNumber
		}
	}
	go func() {
		for seq := uint16(1050); seq < 1060; seq++ {
			send(seq, false)
		}
	}()
	for last != 1059 {
		select {
		case seq := <-pushed:
			// In order; those sent after the hand-over all come.
			if int16(seq-last) <= 0 || seq > 1050 && seq != last+1 {
				t.Fatalf("pushed %d after %d", seq, last)
			}
			last = seq
		case <-time.After(5 * time.Second):
			t.Fatalf("no packet pushed after %d", last)
		}
	}

	// The client stops sending video (the transceiver goes inactive): the
	// stream ends, as a PeerConnection's track does.
	if err := pc.RemoveTrack(vs); err != nil {
		t.Fatal(err)
	}
	answer2, err := v.Reoffer(offerWith(t, pc, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer2}); err != nil {
		t.Fatal(err)
	}
	readsEnd(t, vt)

	// Audio arrives on its own stream; closing the client ends it and the session.
	_ = audio.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: 1, Timestamp: 960}, Payload: []byte{1, 2, 3}})
	at := wait(t, ev.tracks, "the audio stream")
	if at.Kind != "audio" || at.ID != "mic" || at.Channels != 2 || at.MimeType != "audio/opus" {
		t.Fatalf("audio stream %+v", at)
	}
	_ = pc.Close()
	wait(t, ev.closed, "close")
	readsEnd(t, at)
	if s.Viewers() != 0 {
		t.Errorf("%d sessions left", s.Viewers())
	}
}

func waitRTCP(t *testing.T, ch <-chan rtcp.Packet, what string, match func(rtcp.Packet) bool) {
	t.Helper()
	for end := time.After(10 * time.Second); ; {
		select {
		case p := <-ch:
			if match(p) {
				return
			}
		case <-end:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// readsEnd fails unless tr's reads end (its queue was closed) within 5 s.
func readsEnd(t *testing.T, tr *InTrack) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, err := tr.ReadRTP(buf); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the %s stream did not end", tr.Kind)
	}
}

// simulcastOffer is a browser's publisher offer of one video track in three
// encodings (rids q, h, f), without a=ssrc lines: the encodings are told
// apart by the mid and rid header extensions alone.
const simulcastOffer = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n" +
	"m=video 9 UDP/TLS/RTP/SAVPF 96 97\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\n" +
	"a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n" +
	"a=fingerprint:sha-256 AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99\r\n" +
	"a=setup:actpass\r\na=sendonly\r\na=msid:stream cam\r\na=rtcp-mux\r\n" +
	"a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\na=extmap:10 urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id\r\n" +
	"a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n" +
	"a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\n" +
	"a=rtpmap:96 VP8/90000\r\na=rtcp-fb:96 goog-remb\r\na=rtcp-fb:96 transport-cc\r\na=rtcp-fb:96 nack\r\na=rtcp-fb:96 nack pli\r\n" +
	"a=rtpmap:97 H265/90000\r\n" +
	"a=rid:q send\r\na=rid:h send\r\na=rid:f send\r\na=simulcast:send q;h;f\r\n"

// TestIngestSimulcastRouting: the answer takes the three encodings; an SSRC
// is bound to its encoding by the extensions of its first packet, and what
// names no section, no offered rid, or an encoding already bound, or comes
// once the session has its most streams, is not bound.
func TestIngestSimulcastRouting(t *testing.T) {
	s := startServer(t)
	ev := newIngestEvents()
	v, answer, err := s.NewPublisher(simulcastOffer, testIngest(), 65536, ev)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close("test")
	for _, want := range []string{"a=recvonly", "a=rid:q recv", "a=rid:f recv", "a=simulcast:recv q;h;f", "a=rtcp-fb:96 transport-cc",
		"a=extmap:10 urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id", "m=video 9 UDP/TLS/RTP/SAVPF 96\r\n"} {
		if !strings.Contains(answer, want) {
			t.Errorf("the answer has no %q:\n%s", want, answer)
		}
	}
	for _, not := range []string{"goog-remb", "abs-send-time", "H265", "m=application"} {
		if strings.Contains(answer, not) {
			t.Errorf("the answer has %q:\n%s", not, answer)
		}
	}
	in := v.in
	hdr := func(ssrc uint32, mid, rid string) *rtp.Header {
		h := &rtp.Header{Version: 2, SSRC: ssrc, PayloadType: 96}
		if mid != "" {
			_ = h.SetExtension(4, []byte(mid))
		}
		if rid != "" {
			_ = h.SetExtension(10, []byte(rid))
		}
		return h
	}
	for _, c := range []struct {
		name string
		h    *rtp.Header
		ok   bool
	}{
		{"no extensions", hdr(1, "", ""), false},
		{"an unknown mid", hdr(2, "7", "q"), false},
		{"no rid in a simulcast section", hdr(3, "0", ""), false},
		{"a rid not offered", hdr(4, "0", "x"), false},
		{"q", hdr(5, "0", "q"), true},
		{"q again under another SSRC", hdr(6, "0", "q"), false},
		{"f", hdr(7, "0", "f"), true},
	} {
		if got := in.bind(v.Session, c.h) != nil; got != c.ok {
			t.Errorf("%s: bound %v, want %v", c.name, got, c.ok)
		}
	}
	var first *InTrack
	for _, rid := range []string{"q", "f"} {
		tr := wait(t, ev.tracks, "stream "+rid)
		if tr.ID != "cam" || tr.StreamID != "stream" {
			t.Errorf("stream %+v", tr)
		}
		first = tr
	}
	// A track the server stopped (unpublished) is not bound again from its
	// packets: its encodings end, and their SSRCs no longer route.
	first.Stop()
	readsEnd(t, first)
	if in.bind(v.Session, hdr(5, "0", "q")) != nil || in.bind(v.Session, hdr(8, "0", "h")) != nil {
		t.Error("a stopped track's encodings were bound again")
	}
	in.mu.Lock()
	in.secs[0].stopped = false
	in.mu.Unlock()
	// A flood of new SSRCs binds no more than maxStreams streams.
	in.mu.Lock()
	in.secs[0].rids = nil // any SSRC with the mid now binds (tracks, not encodings)
	in.secs[0].tracks = nil
	in.mu.Unlock()
	bound := len(*in.streams.Load())
	for ssrc := uint32(100); ssrc < 200; ssrc++ {
		in.mu.Lock()
		in.secs[0].tracks = nil
		in.mu.Unlock()
		if in.bind(v.Session, hdr(ssrc, "0", "")) != nil {
			bound++
		}
	}
	if bound != maxStreams {
		t.Errorf("%d streams bound, want at most %d", bound, maxStreams)
	}
}

func b2u(b bool) uint16 {
	if b {
		return 1
	}
	return 0
}
