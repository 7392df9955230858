package sfu

import (
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
)

// rtpWriter is where a DownTrack's rewritten packets go: Pion's track writer
// for a subscriber's PeerConnection (Bind), or a lean egress viewer that
// encrypts into its own buffer and writes to the UDP socket itself
// (bindWriter). The DownTrack's rewriting, layer selection, NACK answers and
// keyframe requests are the same for both.
type rtpWriter interface {
	WriteRTP(h *rtp.Header, payload []byte) (int, error)
}

// rtcpWriter sends a participant's sender reports (reportLoop): a
// PeerConnection, or a lean egress viewer.
type rtcpWriter interface {
	WriteRTCP(pkts []rtcp.Packet) error
}

// bindWriter is Bind for a writer that is not a Pion track: the SSRC, payload
// type and clock rate were negotiated by its owner.
func (d *DownTrack) bindWriter(w rtpWriter, ssrc uint32, pt uint8, clock uint32) {
	d.mu.Lock()
	d.writer, d.ssrc, d.pt, d.clock = w, ssrc, pt, clock
	d.mu.Unlock()
	d.bound.Store(true)
	if l := d.pub.layer(int8(d.target.Load())); l != nil {
		l.requestKeyframe()
	}
}
