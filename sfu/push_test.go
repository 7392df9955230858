package sfu

import (
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// queueSource is a pushSource as a session's stream is: packets queue until
// the layer's reader has read them all and took over with PushTo; from then
// on the receiving goroutine (receive) forwards them itself.
type queueSource struct {
	nopSource
	mu     sync.Mutex
	q      chan []byte
	push   func([]byte)
	pushed atomic.Int64
}

func (s *queueSource) ReadRTP(b []byte) (int, error) {
	p, ok := <-s.q
	if !ok {
		return 0, io.EOF
	}
	return copy(b, p), nil
}

func (s *queueSource) PushTo(fn func([]byte)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fn != nil && len(s.q) > 0 {
		return false
	}
	s.push = fn
	return true
}

// receive is the session's reader: push when the layer took over, queue before.
func (s *queueSource) receive(b []byte) {
	s.mu.Lock()
	fn := s.push
	if fn == nil {
		s.q <- b
	}
	s.mu.Unlock()
	if fn != nil {
		s.pushed.Add(1)
		fn(b)
	}
}

func (s *queueSource) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.q)
}

// Packets queued before the layer's reader hands over to the receiving
// goroutine and packets pushed after it reach the subscriber once each, in
// order; a packet pushed after the layer ended goes nowhere.
func TestPushSourceHandOver(t *testing.T) {
	src, l, ws := pushLayer(1)
	w := ws[0]

	// Packets wait in the queue before the layer starts reading.
	const queued, total = 20, 200
	for i := uint16(0); i < queued; i++ {
		src.receive(vp8Packet(100+i, 3000*uint32(i), i == 0, 0))
	}
	ended := make(chan struct{})
	go func() {
		l.forward()
		close(ended)
	}()
	for i := uint16(queued); i < total; i++ {
		src.receive(vp8Packet(100+i, 3000*uint32(i), false, 0))
		if i%10 == 0 {
			time.Sleep(time.Millisecond) // let the reader catch up and take over
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(w.sent()) < total && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s := w.sent()
	if len(s) != total {
		t.Fatalf("%d packets sent, want %d", len(s), total)
	}
	for i := 1; i < len(s); i++ {
		if s[i] != s[i-1]+1 {
			t.Fatalf("sequence %v: not in order", s)
		}
	}
	if src.pushed.Load() == 0 {
		t.Fatal("no packet was pushed: the layer's reader never handed over")
	}

	src.Stop()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the layer did not end when its source stopped")
	}
	src.push(vp8Packet(100+total, 3000*total, false, 0))
	if n := len(w.sent()); n != total {
		t.Fatalf("a packet pushed after the end was sent (%d packets)", n)
	}
}

// pushLayer is a video layer reading src with n subscribers.
func pushLayer(n int) (*queueSource, *layer, []*syncWriter) {
	src := &queueSource{q: make(chan []byte, 64)}
	pub := &Publication{sid: "TR_push", kind: Video, ck: codecVP8, cacheSize: 1024, owner: &Participant{sid: "PA_push"}}
	empty := []*DownTrack{}
	pub.downs.Store(&empty)
	l := &layer{index: 0, pub: pub, src: src, cache: NewPacketCache(1024)}
	pub.layers[0].Store(l)
	var ws []*syncWriter
	for i := 0; i < n; i++ {
		d := newDownTrack(pub, nil)
		w := &syncWriter{up: true}
		d.writer, d.ssrc, d.pt, d.clock = w, 7, 100, 90000
		d.bound.Store(true)
		d.needSync.Store(true)
		pub.addDown(d)
		ws = append(ws, w)
	}
	return src, l, ws
}

// A fan-out wide enough to be split between workers stays on the layer's
// goroutine (the receiving goroutine reads on meanwhile): one that becomes
// wide while pushed goes back to it, and stays there.
func TestPushSourceWideFanoutQueues(t *testing.T) {
	src, l, ws := pushLayer(parallelFanout - 1)
	go l.forward()
	defer src.Stop()
	taken := func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.push != nil
	}
	deadline := time.Now().Add(5 * time.Second)
	src.receive(vp8Packet(100, 0, true, 0))
	for !taken() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !taken() {
		t.Fatalf("a fan-out to %d subscribers was not handed over", parallelFanout-1)
	}
	d := newDownTrack(l.pub, nil)
	last := &syncWriter{up: true}
	d.writer, d.ssrc, d.pt, d.clock = last, 7, 100, 90000
	d.bound.Store(true)
	d.needSync.Store(true)
	l.pub.addDown(d)
	src.receive(vp8Packet(101, 3000, true, 0)) // pushed; the fan-out is wide now
	if taken() {
		t.Fatalf("a fan-out to %d subscribers stays with the receiving goroutine", parallelFanout)
	}
	for i := uint16(2); i < 10; i++ {
		src.receive(vp8Packet(100+i, 3000*uint32(i), false, 0))
	}
	for _, w := range append(ws, last) {
		want := 10
		if w == last {
			want = 9
		}
		for len(w.sent()) < want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if n := len(w.sent()); n != want {
			t.Fatalf("a subscriber got %d packets, want %d", n, want)
		}
	}
	if n := src.pushed.Load(); n != 1 {
		t.Fatalf("%d packets pushed, want 1", n)
	}
	if taken() {
		t.Fatal("the wide fan-out was handed over again")
	}
}
