package session

import (
	"bytes"
	"testing"

	"github.com/pion/rtp"
)

// TestBatch fans packets out to three viewers through one Batch, as a
// forwarding goroutine does: every viewer gets every packet of its own, in
// order and decryptable, whether the batch is flushed after each incoming
// packet or fills up on its own (more than BatchSize queued).
func TestBatch(t *testing.T) {
	s := startServer(t)
	type peer struct {
		c *client
		v *Viewer
	}
	var peers []peer
	for range 3 {
		c, v := connectViewer(t, s)
		peers = append(peers, peer{c, v})
	}
	b := NewBatch()
	payload := bytes.Repeat([]byte{0x5a}, 1100)
	// A viewer before its keys: nothing is queued, n = 0 (the DownTrack waits).
	late := newClient(t)
	lv, _, err := s.NewViewer(late.offer(), testTracks, newEvents())
	if err != nil {
		t.Fatal(err)
	}
	h := rtp.Header{Version: 2, PayloadType: 96, Timestamp: 1}
	if n, err := lv.QueueRTP(b, &h, payload); n != 0 || err != nil || b.n != 0 {
		t.Fatalf("queue before DTLS: %d %v, %d queued", n, err, b.n)
	}

	recv := func(p peer, seq uint16) {
		t.Helper()
		got := wait(t, p.c.media, "media")
		var gh rtp.Header
		if _, err := gh.Unmarshal(got); err != nil || gh.SSRC != p.v.Senders[0].SSRC || gh.SequenceNumber != seq || !bytes.Equal(got[12:], payload) {
			t.Fatalf("received %v %+v, want seq %d", err, gh, seq)
		}
	}
	// One incoming packet at a time, a flush after each fan-out.
	for seq := uint16(1); seq <= 20; seq++ {
		for _, p := range peers {
			h.SSRC, h.SequenceNumber = p.v.Senders[0].SSRC, seq
			if n, err := p.v.QueueRTP(b, &h, payload); err != nil || n != 12+len(payload) {
				t.Fatalf("queue: %d %v", n, err)
			}
		}
		b.Flush()
		if b.Errors() != 0 {
			t.Fatalf("%d datagrams refused", b.Errors())
		}
		for _, p := range peers {
			recv(p, seq)
		}
	}
	// More than a batch for one viewer: the batch sends itself when full.
	p := peers[0]
	done := make(chan struct{})
	go func() {
		defer close(done)
		for seq := uint16(21); seq <= 21+BatchSize+10; seq++ {
			recv(p, seq)
		}
	}()
	for seq := uint16(21); seq <= 21+BatchSize+10; seq++ {
		h.SSRC, h.SequenceNumber = p.v.Senders[0].SSRC, seq
		if _, err := p.v.QueueRTP(b, &h, payload); err != nil {
			t.Fatal(err)
		}
	}
	b.Flush()
	<-done

	// Queueing and flushing allocate nothing.
	allocs := leastAllocs(50, func() {
		for _, p := range peers {
			h.SSRC = p.v.Senders[0].SSRC
			h.SequenceNumber++
			_, _ = p.v.QueueRTP(b, &h, payload)
		}
		b.Flush()
	})
	if allocs != 0 {
		t.Errorf("QueueRTP and Flush allocate %.1f times per fan-out", allocs)
	}
}

// leastAllocs is testing.AllocsPerRun, the least of five tries: the test's
// own receivers run while f is in a system call and allocate, but what f
// allocates itself it allocates every time.
func leastAllocs(runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for i := 0; i < 4 && least > 0; i++ {
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}

// BenchmarkQueueRTP is BenchmarkWriteRTP through a Batch flushed every 50
// packets (one incoming packet fanned out to 50 viewers): compare with
// bench/'s FloorSendmmsg.
func BenchmarkQueueRTP(b *testing.B) {
	_, c, v := connectedViewer(b)
	c.mu.Lock()
	c.rx = nil // the client stops decrypting: the benchmark measures the sender
	c.mu.Unlock()
	h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 90000, SSRC: v.Senders[0].SSRC}
	payload := make([]byte, 1188)
	bt := NewBatch()
	b.SetBytes(1200)
	b.ReportAllocs()
	cpuPerOp(b, func(i int) {
		h.SequenceNumber++
		if _, err := v.QueueRTP(bt, &h, payload); err != nil {
			b.Fatal(err)
		}
		if i%50 == 49 {
			bt.Flush()
		}
	}, bt.Flush)
}
