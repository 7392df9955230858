package sfu

import (
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
)

// rtpWriter is where a DownTrack's rewritten packets go: a subscriber session
// that encrypts into its own buffer and writes to the socket itself, or a
// local participant's sink. The DownTrack's rewriting, layer selection, NACK
// answers and keyframe requests are the same for every writer.
type rtpWriter interface {
	WriteRTP(h *rtp.Header, payload []byte) (int, error)
}

// fanBatch is the batch of one fan-out of one packet. It is taken from the
// first batchWriter's pool when that writer is written to and goes back once
// sent: only the fan-outs running at the same moment hold one, not every
// layer of every track (a room of 10 simulcast publishers has 40 fan-out
// goroutines).
type fanBatch struct{ b Batch }

func (f *fanBatch) get(w batchWriter) Batch {
	if f.b == nil {
		f.b = w.NewBatch()
	}
	return f.b
}

// flush sends what the batch holds and returns it to its pool.
func (f *fanBatch) flush() {
	if f != nil && f.b != nil {
		f.b.Flush()
		f.b = nil
	}
}

// rtcpWriter sends a participant's sender reports (reporter.go).
type rtcpWriter interface {
	WriteRTCP(pkts []rtcp.Packet) error
}

// bindWriter starts d on w once its owner negotiated the SSRC, payload type,
// clock rate and header extension ids (0: not negotiated).
func (d *DownTrack) bindWriter(w rtpWriter, ssrc uint32, pt uint8, clock uint32, twccID, ddID uint8) {
	d.mu.Lock()
	d.writer, d.ssrc, d.pt, d.clock = w, ssrc, pt, clock
	if d.sub != nil && d.sub.bwe != nil {
		d.twccID = twccID
	}
	d.ddID = ddID
	d.mu.Unlock()
	d.bound.Store(true)
	if l := d.pub.layer(int8(d.target.Load())); l != nil {
		l.requestKeyframe()
	}
}
