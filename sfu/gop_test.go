package sfu

import (
	"sync"
	"testing"
	"time"

	"github.com/pion/rtp"
)

// syncWriter is a recWriter safe to read while the layer's reader writes to it.
type syncWriter struct {
	mu   sync.Mutex
	seqs []uint16
	up   bool // the transport is up: before, writes are refused (n == 0), as a session's before DTLS
}

func (w *syncWriter) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.up {
		return 0, nil
	}
	w.seqs = append(w.seqs, h.SequenceNumber)
	return h.MarshalSize() + len(p), nil
}
func (w *syncWriter) Write(b []byte) (int, error) { return len(b), nil }

func (w *syncWriter) sent() []uint16 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]uint16(nil), w.seqs...)
}

// A camera's new viewer starts from the cached GOP as soon as its transport
// is up, not at the camera's next packet (up to a frame interval later, or
// much more for a camera that pauses): transportReady wakes the layer's
// reader, which replays the GOP, and the stream continues from there.
func TestGOPReplayWhenTransportComesUp(t *testing.T) {
	lt := &LocalTrack{q: make(chan *[]byte, 64), done: make(chan struct{}), rtcpQ: make(chan []byte, 1), wake: make(chan struct{}, 1)}
	lt.pool.New = func() any { b := make([]byte, maxPacket); return &b }
	pub := &Publication{sid: "TR_cam", kind: Video, ck: codecVP8, cacheSize: 1024, owner: &Participant{sid: "PA_cam"}}
	empty := []*DownTrack{}
	pub.downs.Store(&empty)
	pub.SetGOPStart(true)
	l := &layer{index: 0, pub: pub, src: lt, cache: NewPacketCache(1024)}
	pub.layers[0].Store(l)
	lt.pub = pub
	d := newDownTrack(pub, nil)
	w := &syncWriter{}
	d.writer, d.ssrc, d.pt, d.clock = w, 7, 100, 90000
	d.bound.Store(true)
	d.needSync.Store(true)
	pub.addDown(d)
	go l.forward()
	defer lt.Close()

	// A GOP arrives while the viewer's transport is not up: nothing reaches it.
	for i := uint16(0); i < 5; i++ {
		if err := lt.WriteRTP(vp8Packet(100+i, 3000*uint32(i), i == 0, 0)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(lt.q) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the last packet read is handled
	if s := w.sent(); len(s) != 0 {
		t.Fatalf("%d packets sent before the transport was up", len(s))
	}
	// The transport comes up; the camera sends nothing more for now.
	w.mu.Lock()
	w.up = true
	w.mu.Unlock()
	d.transportReady()
	for len(w.sent()) < 5 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s := w.sent()
	if len(s) != 5 {
		t.Fatalf("after the transport came up: %d packets of the cached GOP sent without a new packet, want 5", len(s))
	}
	// The next packet follows without a gap or a repeat.
	if err := lt.WriteRTP(vp8Packet(105, 15000, false, 0)); err != nil {
		t.Fatal(err)
	}
	for len(w.sent()) < 6 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	s = w.sent()
	if len(s) != 6 {
		t.Fatalf("sent %v, want 6 packets", s)
	}
	for i := 1; i < len(s); i++ {
		if s[i] != s[i-1]+1 {
			t.Fatalf("sequence %v: not continuous", s)
		}
	}
}
