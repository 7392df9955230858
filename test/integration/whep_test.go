package integration

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// whepViewer plays room over WHEP with a Pion PeerConnection made by newPC
// and returns it, its session URL, the answer and its video track.
func whepViewer(t *testing.T, e *env, room, token string, newPC func() *webrtc.PeerConnection) (*webrtc.PeerConnection, string, string, *webrtc.TrackRemote) {
	t.Helper()
	pc := newPC()
	t.Cleanup(func() { _ = pc.Close() })
	tracks := make(chan *webrtc.TrackRemote, 2)
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { tracks <- tr })
	if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
		t.Fatal(err)
	}
	resp, answer := post(t, e.url+"/whep/"+room, "application/sdp", token, completeOffer(t, pc))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("WHEP: %d %s", resp.StatusCode, answer)
	}
	if !strings.Contains(answer, "a=ice-lite") {
		t.Fatalf("the WHEP answer is not the session server's:\n%s", answer)
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		t.Fatal(err)
	}
	select {
	case tr := <-tracks:
		return pc, resp.Header.Get("Location"), answer, tr
	case <-time.After(10 * time.Second):
		t.Fatal("WHEP viewer got no track")
	}
	return nil, "", "", nil
}

func fragValue(frag, key string) string {
	for _, l := range strings.Split(frag, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "a="+key+":"); ok {
			return v
		}
	}
	return ""
}

// TestWHEPICERestart: a Pion WHEP viewer of the session server restarts
// ICE (PATCH with its new credentials, the server's new ones applied to
// its answer) and keeps receiving the same stream, with no new DTLS
// handshake; a PATCH whose credentials are malformed is refused with 400.
func TestWHEPICERestart(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 30*time.Second)
	alice := e.join("restart", "alice")
	v := newVideo("cam")
	if _, _, err := alice.Publish(ctx, v.track, "camera"); err != nil {
		t.Fatal(err)
	}
	v.run(t)
	waitFor(t, 5*time.Second, "the track published", func() bool {
		r := e.srv.Manager.Room("restart")
		return r != nil && len(r.Participants()) == 1 && len(r.Participants()[0].Info().Tracks) == 1
	})
	tok := e.token("restart", "viewer", auth.Grants{Subscribe: true}, time.Hour)
	var mu sync.Mutex
	var states []webrtc.ICEConnectionState
	viewer, loc, answer, tr := whepViewer(t, e, "restart", tok, func() *webrtc.PeerConnection {
		pc, err := newLoopbackPC()
		if err != nil {
			t.Fatal(err)
		}
		pc.OnICEConnectionStateChange(func(s webrtc.ICEConnectionState) {
			mu.Lock()
			states = append(states, s)
			mu.Unlock()
		})
		return pc
	})
	before := readPackets(t, tr, 30, 5*time.Second)
	dropped := e.srv.Sessions.Dropped()

	// Pion restarts its agent when it applies the restart offer (or the
	// answer), and reports states on goroutines of their own.
	mu.Lock()
	states = nil
	mu.Unlock()
	offer, err := viewer.CreateOffer(&webrtc.OfferOptions{ICERestart: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := viewer.SetLocalDescription(offer); err != nil {
		t.Fatal(err)
	}
	ufrag, pwd := fragValue(offer.SDP, "ice-ufrag"), fragValue(offer.SDP, "ice-pwd")
	if ufrag == fragValue(answer, "ice-ufrag") || ufrag == "" {
		t.Fatal("the restart offer has no new ufrag")
	}
	resp, frag := request(t, http.MethodPatch, e.url+loc, "application/trickle-ice-sdpfrag", tok,
		"a=ice-ufrag:"+ufrag+"\r\na=ice-pwd:"+pwd+"\r\n")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/trickle-ice-sdpfrag" {
		t.Fatalf("ICE restart PATCH: %d %q", resp.StatusCode, frag)
	}
	sufrag, spwd := fragValue(frag, "ice-ufrag"), fragValue(frag, "ice-pwd")
	if sufrag == "" || spwd == "" || sufrag == fragValue(answer, "ice-ufrag") || !strings.Contains(frag, "a=candidate:") {
		t.Fatalf("the restart's fragment: %q", frag)
	}
	if resp.Header.Get("ETag") != `"`+sufrag+`"` {
		t.Fatalf("ETag %q after the restart", resp.Header.Get("ETag"))
	}
	patched := strings.ReplaceAll(answer, "a=ice-ufrag:"+fragValue(answer, "ice-ufrag"), "a=ice-ufrag:"+sufrag)
	patched = strings.ReplaceAll(patched, "a=ice-pwd:"+fragValue(answer, "ice-pwd"), "a=ice-pwd:"+spwd)
	if err := viewer.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: patched}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "ICE connected again with the new credentials", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(states, webrtc.ICEConnectionStateChecking) && viewer.ICEConnectionState() == webrtc.ICEConnectionStateConnected
	})
	// Media goes on over the same DTLS and SRTP session, past the time in
	// which Pion gives up on a pair whose checks are not answered.
	deadline := time.Now().Add(6 * time.Second)
	last := before[len(before)-1]
	for time.Now().Before(deadline) {
		p := readPackets(t, tr, 1, 3*time.Second)[0]
		if p.SSRC != last.SSRC {
			t.Fatalf("SSRC changed: %d → %d", last.SSRC, p.SSRC)
		}
		last = p
	}
	if s := viewer.ICEConnectionState(); s != webrtc.ICEConnectionStateConnected {
		t.Fatalf("ICE %s after the restart", s)
	}
	if n := e.srv.Sessions.Dropped(); n != dropped {
		t.Fatalf("%d datagrams dropped after the restart", n-dropped)
	}

	// Malformed credentials: 400 with a JSON code, and the session goes on.
	for _, bad := range []string{
		"a=ice-ufrag:abcdef\r\n",                                 // no password
		"a=ice-ufrag:abcdef\r\na=ice-pwd:short\r\n",              // too short
		"a=ice-ufrag:ab\r\na=ice-pwd:" + strings.Repeat("p", 24), // ufrag too short
		"a=ice-ufrag:ab\"cd\r\na=ice-pwd:" + strings.Repeat("p", 24) + "\r\n",
	} {
		resp, body := request(t, http.MethodPatch, e.url+loc, "application/trickle-ice-sdpfrag", tok, bad)
		if resp.StatusCode != http.StatusBadRequest || errCode(t, body) != protocol.CodeBadRequest {
			t.Fatalf("PATCH %q: %d %s", bad, resp.StatusCode, body)
		}
	}
	readPackets(t, tr, 10, 3*time.Second)
}

func newLoopbackPC() (*webrtc.PeerConnection, error) {
	return client.LoopbackAPI().NewPeerConnection(webrtc.Configuration{})
}

// simulcastLocal publishes a three-layer VP8 track from inside the server
// (as its own camera would) at 30 frames/s: layer i sends 1, 2 and 6
// packets of 1000 bytes a frame (about 0.25, 0.5 and 1.5 Mbit/s), each
// packet's last byte the layer.
func simulcastLocal(t *testing.T, e *env, room string) {
	p, err := e.srv.Manager.JoinLocal(sfu.LocalOptions{Room: room, Identity: "camera", Name: "camera",
		Grants: auth.Grants{Publish: true, Subscribe: true}, Origin: sfu.Server})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close("done") })
	base, err := p.PublishLocal(sfu.LocalTrackOptions{
		Info:  protocol.TrackInfo{Kind: "video", Source: "camera", SSRC: 1000, Width: 1280, Height: 720},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000, PayloadType: 96},
	})
	if err != nil {
		t.Fatal(err)
	}
	layers := []*sfu.LocalTrack{base}
	for i, rid := range []string{"h", "f"} {
		lt, err := base.AddLayer(rid, uint32(1001+i))
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, lt)
	}
	var key [3]atomic.Bool
	for i, lt := range layers {
		lt.OnKeyframeRequest(func() { key[i].Store(true) })
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(33 * time.Millisecond)
		defer tick.Stop()
		var seq [3]uint16
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for i, lt := range layers {
				kf := n%90 == 0 || key[i].Swap(false)
				count := []int{1, 2, 6}[i]
				for k := 0; k < count; k++ {
					payload := make([]byte, 1000)
					if k == 0 {
						payload[0] = 0x10 // VP8 descriptor: start of partition 0
						payload[1] = 0x01 // inter frame
						if kf {
							payload[1] = 0x00
						}
					}
					payload[len(payload)-1] = byte(i)
					_ = lt.WritePacket(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq[i],
						Timestamp: uint32(n * 3000), SSRC: uint32(1000 + i), Marker: k == count-1}, Payload: payload})
					seq[i]++
				}
			}
		}
	}()
}

// TestWHEPBandwidthEstimate: a WHEP viewer of the session server that
// offers transport-cc gets it in the answer, and the server chooses its
// simulcast layer by the estimate from its feedback, as for a room
// subscriber: on an unlimited path the top layer, behind a 600 kbit/s
// bottleneck a lower one, each for a whole second within a few.
func TestWHEPBandwidthEstimate(t *testing.T) {
	e := start(t)
	simulcastLocal(t, e, "bwe")
	tok := e.token("bwe", "viewer", auth.Grants{Subscribe: true}, time.Hour)
	layerOf := func(p rtp.Packet) byte { return p.Payload[len(p.Payload)-1] }
	// settled reads for at most d, a second at a time, until a second's
	// layers satisfy ok, and returns the layers of the last second read.
	settled := func(tr *webrtc.TrackRemote, d time.Duration, ok func(map[byte]int) bool) map[byte]int {
		var got map[byte]int
		for end := time.Now().Add(d); time.Now().Before(end); {
			got = map[byte]int{}
			for sec := time.Now().Add(time.Second); time.Now().Before(sec); {
				p := readPackets(t, tr, 1, 5*time.Second)[0]
				if len(p.Payload) > 0 { // not padding
					got[layerOf(p)]++
				}
			}
			if ok(got) {
				break
			}
		}
		return got
	}
	topOnly := func(got map[byte]int) bool { return got[2] > 0 && got[0]+got[1] == 0 }
	lowerOnly := func(got map[byte]int) bool { return got[2] == 0 && got[0]+got[1] > 0 }

	_, _, answer, tr := whepViewer(t, e, "bwe", tok, func() *webrtc.PeerConnection {
		pc, err := newLoopbackPC()
		if err != nil {
			t.Fatal(err)
		}
		return pc
	})
	if !strings.Contains(answer, "transport-cc") || !strings.Contains(answer, "transport-wide-cc") {
		t.Fatalf("the answer negotiates no transport-cc:\n%s", answer)
	}
	if got := settled(tr, 5*time.Second, topOnly); !topOnly(got) {
		t.Fatalf("unlimited viewer's layers in its last second: %v, want the top (2) only", got)
	}

	path := newPath(t, 0, 600_000, 200*time.Millisecond)
	_, _, _, tr = whepViewer(t, e, "bwe", tok, func() *webrtc.PeerConnection {
		pc, err := path.api(t).NewPeerConnection(webrtc.Configuration{})
		if err != nil {
			t.Fatal(err)
		}
		return pc
	})
	got := settled(tr, 12*time.Second, lowerOnly)
	t.Logf("limited viewer's layers in its last second: %v (%d dropped at the bottleneck)", got, path.drops())
	if !lowerOnly(got) {
		t.Fatalf("viewer behind 600 kbit/s: layers %v in its last second, want a lower one than the top", got)
	}
}
