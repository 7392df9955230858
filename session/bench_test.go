package session

import (
	"net"
	"runtime"
	"testing"

	"github.com/pion/rtp"
	"github.com/pion/stun/v4"

	"github.com/petrel-sfu/petrel/bench/floor"
)

// BenchmarkWriteRTP is a session's whole per-packet cost once a
// DownTrack has rewritten the header: marshal into the viewer's buffer,
// SRTP-encrypt (the profile DTLS negotiated: AES-256-GCM with lean peers),
// sendto(2) on the shared socket. Compare with bench/'s FloorSendTo
// (docs/benchmarks.md): cpu-ns/op is the benchmark thread's own CPU time,
// which load on a shared machine does not inflate.
func BenchmarkWriteRTP(b *testing.B) {
	_, c, v := connectedViewer(b)
	c.mu.Lock()
	c.rx = nil // the client stops decrypting: the benchmark measures the sender
	c.mu.Unlock()
	h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 90000, SSRC: v.Senders[0].SSRC}
	payload := make([]byte, 1188) // 1200-byte packets, as the floor
	b.SetBytes(1200)
	b.ReportAllocs()
	cpuPerOp(b, func(int) {
		h.SequenceNumber++
		if _, err := v.WriteRTP(&h, payload); err != nil {
			b.Fatal(err)
		}
	}, nil)
}

// connectedViewer is a server with one viewer whose client has finished
// the DTLS handshake.
func connectedViewer(tb testing.TB) (*Server, *client, *Viewer) {
	s := startServer(tb)
	c, v := connectViewer(tb, s)
	return s, c, v
}

// connectViewer adds a viewer to s and returns it once its client has
// finished the DTLS handshake.
func connectViewer(tb testing.TB, s *Server) (*client, *Viewer) {
	c := newClient(tb)
	ev := newEvents()
	v, answer, err := s.NewViewer(c.offer(), testTracks, ev)
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.connect(answer); err != nil {
		tb.Fatal(err)
	}
	wait(tb, ev.dtls, "DTLS")
	return c, v
}

// cpuPerOp runs op b.N times on a locked thread and reports cpu-ns/op: the
// thread's own CPU time per op, which load on a shared machine does not
// inflate. done runs after the last op, on the clock (a final flush).
func cpuPerOp(b *testing.B, op func(i int), done func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	start := floor.ThreadCPU()
	for i := 0; i < b.N; i++ {
		op(i)
	}
	if done != nil {
		done()
	}
	cpu := floor.ThreadCPU() - start
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkBinding is what one ICE check costs the server once a viewer is
// connected (clients send one every 2 s as keepalive and consent): decode,
// find the viewer, check the message integrity, answer with a signed success
// response and sendto(2) it.
func BenchmarkBinding(b *testing.B) {
	s, c, _ := connectedViewer(b)
	m, err := stun.Build(stun.BindingRequest, stun.TransactionID, stun.NewUsername(c.sufrag+":"+c.ufrag),
		stun.RawAttribute{Type: stun.AttrICEControlling, Value: make([]byte, 8)},
		stun.RawAttribute{Type: stun.AttrPriority, Value: []byte{0x6e, 0, 0, 1}},
		stun.NewShortTermIntegrity(c.spwd), stun.Fingerprint)
	if err != nil {
		b.Fatal(err)
	}
	from := c.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	b.ReportAllocs()
	cpuPerOp(b, func(int) {
		if !s.onSTUN(&s.stunMsg, m.Raw, from) {
			b.Fatal("binding request not taken")
		}
	}, nil)
}
