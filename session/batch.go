package session

import (
	"fmt"

	"github.com/pion/rtp"
)

// BatchSize is how many packets a Batch holds before it sends them.
const BatchSize = 64

// Batch collects the packets one fan-out goroutine writes to lean viewers
// and sends them with one sendmmsg(2) (Flush), instead of a sendto(2) per
// viewer: one incoming packet goes to many viewers on the same socket, and
// the system call's entry, Go's netpoll bookkeeping and the fd lock are paid
// once per batch. UDP GSO does not apply (every datagram has its own
// destination). Packets are encrypted straight into the batch's buffers.
//
// A Batch belongs to one goroutine; it is not safe for concurrent use. The
// packets reach the socket when the batch is full or on Flush, which the
// owner calls once it has handed the incoming packet to every viewer.
type Batch struct {
	s    *Server
	n    int
	bufs [BatchSize][mtu + srtpOverhead]byte
	sys  batchSys // the system call's own state (batch_linux.go)
	errs int      // datagrams the kernel refused since the last Flush
}

// NewBatch returns an empty batch.
func NewBatch() *Batch {
	b := &Batch{}
	b.sys.init(b)
	return b
}

// Errors is how many datagrams the last Flush could not send.
func (b *Batch) Errors() int { return b.errs }

// QueueRTP is WriteRTP into b: the packet is marshalled and encrypted into
// b's next buffer and sent with the batch's other packets by Flush (or when
// the batch is full). The same rules hold: 0 and no error before the SRTP
// keys are in place. It allocates nothing.
func (v *Session) QueueRTP(b *Batch, h *rtp.Header, payload []byte) (int, error) {
	if !v.ready.Load() {
		if v.closed.Load() {
			return 0, errClosed
		}
		return 0, nil
	}
	if b.s != v.s || b.n == BatchSize {
		b.Flush()
		b.s = v.s
	}
	v.wmu.Lock()
	out, n, err := v.protect(b.bufs[b.n][:], h, payload)
	switch {
	case err != nil:
	case v.tcp != nil:
		// An ICE-TCP path: the batch's buffer was only the scratch space,
		// the packet goes into the connection's queue, not sendmmsg(2).
		err = v.tcp.send(out)
	case !b.sys.put(b.n, v.remote, len(out), v.s.v6):
		err = fmt.Errorf("session: %s cannot be reached from the server's socket", v.remote)
	default:
		b.n++
	}
	v.wmu.Unlock()
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Flush sends the queued packets. A datagram the kernel refuses is counted
// (Errors) and skipped; the others still go.
func (b *Batch) Flush() {
	b.errs = 0
	if b.n == 0 {
		return
	}
	b.sys.send(b)
	b.n = 0
}
