package datachan

import (
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// link is one end of an in-memory datagram link whose packets can be lost
// and delayed (a random delay reorders them), for tests.
type link struct {
	in     chan []byte
	peer   *link
	mu     sync.Mutex
	rng    *rand.Rand
	loss   float64
	delay  func(r *rand.Rand) time.Duration
	filter func(b []byte) bool // false: drop
	done   chan struct{}
	once   *sync.Once
}

func newLinks() (*link, *link) {
	done, once := make(chan struct{}), &sync.Once{}
	a := &link{in: make(chan []byte, 4096), rng: rand.New(rand.NewPCG(1, 2)), done: done, once: once}
	b := &link{in: make(chan []byte, 4096), rng: rand.New(rand.NewPCG(3, 4)), done: done, once: once}
	a.peer, b.peer = b, a
	return a, b
}

func (l *link) Read(b []byte) (int, error) {
	select {
	case p := <-l.in:
		return copy(b, p), nil
	case <-l.done:
		return 0, net.ErrClosed
	}
}

func (l *link) Write(b []byte) (int, error) {
	p := append([]byte(nil), b...)
	l.mu.Lock()
	drop := l.rng.Float64() < l.loss || (l.filter != nil && !l.filter(p))
	var d time.Duration
	if l.delay != nil {
		d = l.delay(l.rng)
	}
	l.mu.Unlock()
	if drop {
		return len(b), nil
	}
	send := func() {
		select {
		case l.peer.in <- p:
		default: // a full queue drops
		}
	}
	if d > 0 {
		time.AfterFunc(d, send)
	} else {
		send()
	}
	return len(b), nil
}

func (l *link) Close() error                     { l.once.Do(func() { close(l.done) }); return nil }
func (l *link) LocalAddr() net.Addr              { return &net.UDPAddr{} }
func (l *link) RemoteAddr() net.Addr             { return &net.UDPAddr{} }
func (l *link) SetDeadline(time.Time) error      { return nil }
func (l *link) SetReadDeadline(time.Time) error  { return nil }
func (l *link) SetWriteDeadline(time.Time) error { return nil }
