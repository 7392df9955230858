package lean

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/pion/transport/v5/packetio"
)

// PacketConn is the net.PacketConn a pion/dtls handshake runs over when
// another goroutine owns the UDP socket: that goroutine demultiplexes by
// first byte (RFC 7983) and hands DTLS records over with Push; writes go
// straight out of the shared socket to the one remote address.
// Records wait in a packetio.Buffer: it starts at 2 KB and grows with what is
// queued, so an idle connection holds little and a record costs no
// allocation of its own.
type PacketConn struct {
	in     atomic.Pointer[packetio.Buffer]
	muted  atomic.Bool
	write  func([]byte) (int, error)
	local  net.Addr
	remote net.Addr
}

// HandshakeQueue is how many records NewPacketConn queues: a handshake is a
// few flights, and records beyond these are a flood and are dropped.
const HandshakeQueue = 16

// NewPacketConn returns an adapter that writes with write, for a DTLS
// connection that only runs its handshake.
func NewPacketConn(write func([]byte) (int, error), local, remote net.Addr) *PacketConn {
	return NewPacketConnSize(write, local, remote, HandshakeQueue)
}

// NewPacketConnSize is NewPacketConn with a queue of n records, for a DTLS
// connection that carries data after its handshake.
func NewPacketConnSize(write func([]byte) (int, error), local, remote net.Addr, n int) *PacketConn {
	in := packetio.NewBuffer()
	in.SetLimitCount(n)
	c := &PacketConn{write: write, local: local, remote: remote}
	c.in.Store(in)
	return c
}

// shut stands in for a PacketConn's queue after Shutdown: a closed buffer
// holds nothing, so one serves every connection.
var shut = func() *packetio.Buffer { b := packetio.NewBuffer(); _ = b.Close(); return b }()

// Push hands a DTLS record over (copied: b belongs to the caller's read
// buffer). It never blocks; it reports false if the record was dropped.
func (c *PacketConn) Push(b []byte) bool {
	// A full queue is a flood (a handshake retransmits; SCTP resends).
	_, err := c.in.Load().Write(b, nil)
	return err == nil
}

// Queued is how many records wait for ReadFrom.
func (c *PacketConn) Queued() int { return c.in.Load().Count() }

// Shutdown releases a blocked ReadFrom for good: the DTLS connection's Close
// waits for its reader, so the owner calls Shutdown before Close. Records
// still queued can be read; once none are, the queue (grown to hold the
// handshake's flights) is let go of, as a viewer's session lives on without
// DTLS.
func (c *PacketConn) Shutdown() {
	in := c.in.Load()
	_ = in.Close()
	c.release(in)
}

// release drops in, closed, once it is empty (nothing is added to a closed
// buffer, so it stays so).
func (c *PacketConn) release(in *packetio.Buffer) {
	if in != shut && in.Count() == 0 {
		c.in.CompareAndSwap(in, shut)
	}
}

// ReadFrom returns a timeout error at the read deadline: the DTLS connection
// interrupts its reader this way (a failed handshake, a cancelled context)
// and waits for it to return.
func (c *PacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	in := c.in.Load()
	n, _, err := in.Read(b, nil)
	if errors.Is(err, io.EOF) {
		c.release(in)
		return 0, nil, net.ErrClosed
	}
	if err != nil {
		return 0, nil, err
	}
	return n, c.remote, nil
}

// Mute makes writes succeed without sending: a DTLS connection whose keys
// are in use elsewhere can then be closed without telling the peer.
func (c *PacketConn) Mute() { c.muted.Store(true) }

// WriteTo works after Shutdown too: a DTLS close_notify goes out then.
func (c *PacketConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	if c.muted.Load() {
		return len(b), nil
	}
	return c.write(b)
}

func (c *PacketConn) Close() error                  { return nil } // the owner owns the socket
func (c *PacketConn) LocalAddr() net.Addr           { return c.local }
func (c *PacketConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }
func (c *PacketConn) SetReadDeadline(t time.Time) error {
	if in := c.in.Load(); in != shut { // reads of shut end at once
		return in.SetReadDeadline(t)
	}
	return nil
}
func (c *PacketConn) SetWriteDeadline(time.Time) error { return nil }
