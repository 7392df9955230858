package hostile

import (
	"testing"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/client"
)

// pcOffer makes the offer of a loopback Pion peer connection that setup
// prepares; the connection is closed when the test ends.
func pcOffer(t *testing.T, setup func(pc *webrtc.PeerConnection)) string {
	t.Helper()
	pc, err := client.LoopbackAPI().NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	setup(pc)
	return localOffer(t, pc)
}

// sendTrack adds one sent track of codec mime to pc, as a WHIP publisher does.
func sendTrack(t *testing.T, mime string) func(pc *webrtc.PeerConnection) {
	return func(pc *webrtc.PeerConnection) {
		tr, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: mime, ClockRate: 90000}, "v", "s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pc.AddTrack(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// recvAV adds receive-only video and audio to pc, as a WHEP viewer does.
func recvAV(t *testing.T) func(pc *webrtc.PeerConnection) {
	return func(pc *webrtc.PeerConnection) {
		for _, k := range []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo, webrtc.RTPCodecTypeAudio} {
			if _, err := pc.AddTransceiverFromKind(k, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// localOffer makes pc's offer with all its candidates in it.
func localOffer(t *testing.T, pc *webrtc.PeerConnection) string {
	t.Helper()
	o, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	done := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(o); err != nil {
		t.Fatal(err)
	}
	<-done
	return pc.LocalDescription().SDP
}
