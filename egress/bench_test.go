package egress

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/pion/rtp"
)

// BenchmarkWriteRTP is the lean egress's whole per-packet cost once a
// DownTrack has rewritten the header: marshal into the viewer's buffer,
// SRTP-encrypt (the profile DTLS negotiated: AES-256-GCM with lean peers),
// sendto(2) on the shared socket. Compare with bench/'s FloorSendTo
// (docs/benchmarks.md): cpu-ns/op is the benchmark thread's own CPU time,
// which load on a shared machine does not inflate.
func BenchmarkWriteRTP(b *testing.B) {
	s := startServer(b)
	c := newClient(b)
	ev := newEvents()
	v, answer, err := s.NewViewer(c.offer(), testTracks, ev)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.connect(answer); err != nil {
		b.Fatal(err)
	}
	<-ev.dtls
	c.mu.Lock()
	c.rx = nil // the client stops decrypting: the benchmark measures the sender
	c.mu.Unlock()
	h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 90000, SSRC: v.Senders[0].SSRC}
	payload := make([]byte, 1188) // 1200-byte packets, as the floor
	b.SetBytes(1200)
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	start := threadCPU()
	for i := 0; i < b.N; i++ {
		h.SequenceNumber++
		if _, err := v.WriteRTP(&h, payload); err != nil {
			b.Fatal(err)
		}
	}
	cpu := threadCPU() - start
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// threadCPU is the CPU time of the calling OS thread (RUSAGE_THREAD).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
