package cluster

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/client"
)

// whipExchange posts an SDP offer to a WHIP or WHEP endpoint and applies
// the answer; it returns the session's URL.
func whipExchange(t *testing.T, pc *webrtc.PeerConnection, url, tok string) string {
	t.Helper()
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		t.Fatal(err)
	}
	<-gathered
	req, _ := http.NewRequest("POST", url, strings.NewReader(pc.LocalDescription().SDP))
	req.Header.Set("Content-Type", "application/sdp")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %s: %s", url, resp.Status, body)
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(body)}); err != nil {
		t.Fatal(err)
	}
	return resp.Header.Get("Location")
}

// A WHIP publisher on node a and a WHEP viewer on node b of the same room:
// b has no participant of the room when the viewer asks, so it pulls the
// room from a (a link opens, a's publisher is mirrored on b) and the viewer
// decodes the publisher's frames, in order. When the viewer leaves, b stops
// hosting the room and a sends nothing more over the link for it.
func TestWHIPToWHEPAcrossNodes(t *testing.T) {
	_, a, b, _ := clusterOf(t)
	api := client.LoopbackAPI()
	pub, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	v := newVideo(t, "whip-cam")
	sender, err := pub.AddTrack(v.track)
	if err != nil {
		t.Fatal(err)
	}
	go keyframeOnPLI(sender, v)
	whipExchange(t, pub, a.url+"/whip/studio", token(t, "studio", "encoder"))
	waitFor(t, 5*time.Second, "node b sees the room in Redis", func() bool {
		for _, n := range b.srv.Cluster.Nodes() {
			if n.ID == "a" && len(n.Rooms["studio"]) > 0 {
				return true
			}
		}
		return false
	})

	view, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { view.Close() })
	if _, err := view.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
		t.Fatal(err)
	}
	f := &frames{}
	view.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		for {
			p, _, err := tr.ReadRTP()
			if err != nil {
				return
			}
			f.record(p, tr.ID())
		}
	})
	viewTok := token(t, "studio", "viewer")
	session := whipExchange(t, view, b.url+"/whep/studio", viewTok)
	f.waitFrames(t, 60, 15*time.Second, "the WHEP viewer on node b decodes the WHIP publisher's video from node a")
	if !f.inOrder(30) {
		t.Fatal("the viewer's frames arrive out of order or with gaps")
	}
	sentToB := func() uint64 {
		if l := a.srv.Cluster.Links()["b"]; l != nil {
			return l.Stats().SentPackets
		}
		return 0
	}
	if sentToB() == 0 {
		t.Fatal("no media packet crossed the link from a to b")
	}

	// The viewer leaves: b no longer hosts the room, and a stops sending its
	// video (about 90 packets a second while it was watched).
	req, _ := http.NewRequestWithContext(context.Background(), "DELETE", b.url+session, nil)
	req.Header.Set("Authorization", "Bearer "+viewTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE the WHEP session: %s", resp.Status)
	}
	waitFor(t, 10*time.Second, "node a stops sending the room's video once b's viewer left", func() bool {
		before := sentToB()
		time.Sleep(time.Second)
		return sentToB()-before < 10
	})
}
