package integration

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

func leanEgress(c *config.Config) { c.RTC.LeanEgress = true }

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
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	done := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		t.Fatal(err)
	}
	<-done
	resp, answer := post(t, e.url+"/whep/"+room, "application/sdp", token, pc.LocalDescription().SDP)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("WHEP: %d %s", resp.StatusCode, answer)
	}
	if !strings.Contains(answer, "a=ice-lite") {
		t.Fatalf("the WHEP answer is not the lean egress's:\n%s", answer)
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

// TestWHEPICERestartLean: a Pion WHEP viewer of the lean egress restarts
// ICE (PATCH with its new credentials, the server's new ones applied to
// its answer) and keeps receiving the same stream, with no new DTLS
// handshake; a PATCH whose credentials are malformed is refused with 400.
func TestWHEPICERestartLean(t *testing.T) {
	e := start(t, leanEgress)
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
	dropped := e.srv.LeanEgress.Dropped()

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
	mu.Lock()
	states = nil
	mu.Unlock()
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
		return len(states) >= 2 && states[len(states)-1] == webrtc.ICEConnectionStateConnected
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
	if n := e.srv.LeanEgress.Dropped(); n != dropped {
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
