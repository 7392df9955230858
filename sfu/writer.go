package sfu

import (
	"sync"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/egress"
)

// rtpWriter is where a DownTrack's rewritten packets go: Pion's track writer
// for a subscriber's PeerConnection (Bind), or a lean egress viewer that
// encrypts into its own buffer and writes to the UDP socket itself
// (bindWriter). The DownTrack's rewriting, layer selection, NACK answers and
// keyframe requests are the same for both.
type rtpWriter interface {
	WriteRTP(h *rtp.Header, payload []byte) (int, error)
}

// batchWriter is a writer that can also queue a packet into the fan-out
// goroutine's batch (a lean egress viewer: the batch goes out in one
// sendmmsg(2) when the fan-out of the incoming packet is done, instead of a
// sendto(2) per viewer). The results mean what WriteRTP's do.
type batchWriter interface {
	QueueRTP(b *egress.Batch, h *rtp.Header, payload []byte) (int, error)
}

// fanBatch is the batch of one fan-out of one packet. A batch (100 KB) is
// taken from a pool when the first batchWriter is written to and goes back
// once sent: only the fan-outs running at the same moment hold one, not
// every layer of every track (a room of 10 simulcast publishers has 40
// fan-out goroutines), and tracks without lean viewers take none.
type fanBatch struct{ b *egress.Batch }

var batches = sync.Pool{New: func() any { return egress.NewBatch() }}

func (f *fanBatch) get() *egress.Batch {
	if f.b == nil {
		f.b = batches.Get().(*egress.Batch)
	}
	return f.b
}

// flush sends what the batch holds and returns the batch to the pool.
func (f *fanBatch) flush() {
	if f != nil && f.b != nil {
		f.b.Flush()
		batches.Put(f.b)
		f.b = nil
	}
}

// rtcpWriter sends a participant's sender reports (reporter.go): a
// PeerConnection, or a lean egress viewer.
type rtcpWriter interface {
	WriteRTCP(pkts []rtcp.Packet) error
}

// bindWriter is Bind for a writer that is not a Pion track: the SSRC, payload
// type, clock rate and header extension ids (0: not negotiated) were
// negotiated by its owner.
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
