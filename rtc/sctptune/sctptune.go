// Package sctptune holds how Petrel configures Pion's SCTP associations
// (data channels) and the UDP socket under them, as measured by
// `petrel lab bench` against TCP in a netem lab (docs/benchmarks.md, "Data
// channels vs TCP", and lab/notes.md). The server calls TuneSCTP on the SettingEngine it
// builds its API from, and SetSocketBuffers on its ICE UDP socket.
package sctptune

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/pion/webrtc/v4"
)

// Tuning is how Petrel configures its SCTP associations and how its
// senders keep a data channel's buffer full. The zero value is Pion's
// default behaviour.
type Tuning struct {
	// MaxReceiveBuffer is the receive window advertised to the peer. Pion's
	// default of 1 MiB caps a transfer at 1 MiB per RTT: 105 Mbit/s at
	// 80 ms.
	MaxReceiveBuffer uint32
	// SendHigh and SendLow are the sender's bufferedAmount watermarks:
	// write while below High, resume when it falls to Low. Pion counts
	// unacknowledged bytes in bufferedAmount, so High is also a cap on the
	// bytes in flight and must exceed the bandwidth-delay product.
	SendHigh, SendLow uint64
	// MessageSize is the bulk write size.
	MessageSize int
	// SocketBuffer sizes the UDP socket's kernel buffers. With the kernel
	// default (208 KiB) a Go receiver that falls a few milliseconds behind
	// a burst overflows it; SCTP takes the drops for congestion and
	// collapses its window, where TCP (buffered in the kernel) never loses.
	SocketBuffer int
	// DTLSReplayWindow is how far behind the newest record a DTLS record
	// may arrive and still be accepted. Pion's default, 64, drops every
	// packet that a jittery link reorders by more than 64 packets (at
	// 100 Mbit/s, about 6 ms): SCTP sees it as loss, again and again.
	DTLSReplayWindow uint
	// ZeroChecksum skips SCTP's CRC32c where both ends agree (RFC 9653):
	// DTLS already authenticates every packet.
	ZeroChecksum bool
	// MinCwnd floors the congestion window (SetSCTPMinCwnd).
	MinCwnd uint32
	// FastRtxWnd is how much may be fast-retransmitted at once
	// (SetSCTPFastRtxWnd; Pion's default is one MTU).
	FastRtxWnd uint32
	// CwndCAStep is the congestion-avoidance increase per RTT
	// (SetSCTPCwndCAStep; default one MTU, as RFC 4960).
	CwndCAStep uint32
}

// Set changes one field by name (for experiments: "mincwnd=262144").
func (t *Tuning) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	n, err := strconv.ParseUint(v, 10, 64)
	if !ok || err != nil {
		return fmt.Errorf("tuning %q: want name=bytes", kv)
	}
	switch k {
	case "rcvbuf":
		t.MaxReceiveBuffer = uint32(n)
	case "high":
		t.SendHigh = n
	case "low":
		t.SendLow = n
	case "msgsize":
		t.MessageSize = int(n)
	case "sockbuf":
		t.SocketBuffer = int(n)
	case "zerochecksum":
		t.ZeroChecksum = n != 0
	case "replay":
		t.DTLSReplayWindow = uint(n)
	case "mincwnd":
		t.MinCwnd = uint32(n)
	case "fastrtxwnd":
		t.FastRtxWnd = uint32(n)
	case "castep":
		t.CwndCAStep = uint32(n)
	default:
		return fmt.Errorf("unknown tuning %q", k)
	}
	return nil
}

// Default is Pion's defaults with the watermarks of Pion's flow
// control example (1 MiB / 512 KiB): what an application gets without
// thinking about it.
var Default = Tuning{SendHigh: 1 << 20, SendLow: 512 << 10, MessageSize: 64 << 10}

// Petrel is what Petrel uses, chosen with `petrel lab bench` (the reasons
// in lab/notes.md, "Pion: what Petrel tunes"):
//
//   - an 8 MiB UDP socket buffer: the kernel's default overflows at the
//     receiver on a long path (RcvbufErrors), and SCTP takes each drop for
//     congestion;
//   - a DTLS replay window of 4096 records instead of 64, so a jittery
//     link does not turn reordering into loss; 4096 records are 40 ms of
//     reordering at 1 Gbit/s, and the window is a bit field shifted on
//     every record, so it is no larger;
//   - a congestion-window floor of 256 KiB: Pion's SCTP halves cwnd on
//     three miss indications even when RACK would have waited, so on a
//     reordering link cwnd would sit at its 4-MTU minimum. It is a floor,
//     not a target: with loss cwnd still falls to it.
//   - the receive window stays at Pion's 1 MiB and the sender's high
//     watermark at 2 MiB: larger windows overflow a 1000-packet bottleneck
//     queue in one burst, which Pion recovers from only by its
//     retransmission timer (RTO.min 1 s, not configurable).
var Petrel = Tuning{
	SendHigh:         2 << 20,
	SendLow:          1 << 20,
	MessageSize:      64 << 10,
	SocketBuffer:     8 << 20,
	DTLSReplayWindow: 4096,
	MinCwnd:          256 << 10,
}

// TuneSCTP applies Petrel's SCTP settings to a SettingEngine. The server
// calls it when it builds its webrtc.API; senders should also use
// Petrel's watermarks.
func TuneSCTP(se *webrtc.SettingEngine) { Petrel.Apply(se) }

// Apply sets the association-level options of t on se.
func (t Tuning) Apply(se *webrtc.SettingEngine) {
	if t.MaxReceiveBuffer > 0 {
		se.SetSCTPMaxReceiveBufferSize(t.MaxReceiveBuffer)
	}
	if t.ZeroChecksum {
		se.EnableSCTPZeroChecksum(true)
	}
	if t.DTLSReplayWindow > 0 {
		se.SetDTLSReplayProtectionWindow(t.DTLSReplayWindow)
	}
	if t.MinCwnd > 0 {
		se.SetSCTPMinCwnd(t.MinCwnd)
	}
	if t.FastRtxWnd > 0 {
		se.SetSCTPFastRtxWnd(t.FastRtxWnd)
	}
	if t.CwndCAStep > 0 {
		se.SetSCTPCwndCAStep(t.CwndCAStep)
	}
}

// ListenUDP opens the UDP socket for an ICE UDP mux with kernel buffers of
// size bytes each way. As root it uses SO_RCVBUFFORCE/SO_SNDBUFFORCE, so
// net.core.rmem_max (4 MiB here) does not cap it; otherwise the kernel
// clamps to rmem_max/wmem_max, which operators should raise.
func ListenUDP(laddr *net.UDPAddr, size int) (*net.UDPConn, error) {
	c, err := net.ListenUDP("udp4", laddr)
	if err != nil {
		return nil, err
	}
	if size > 0 {
		SetSocketBuffers(c, size)
	}
	return c, nil
}

// SetSocketBuffers raises a UDP socket's buffers to size bytes (see ListenUDP).
func SetSocketBuffers(c *net.UDPConn, size int) {
	c.SetReadBuffer(size)
	c.SetWriteBuffer(size)
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, size)
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, size)
		})
	}
}
