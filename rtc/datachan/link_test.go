package datachan

import (
	"container/heap"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// link is one end of an in-memory datagram link whose packets can be lost
// and delayed (a random delay reorders them), for tests. Packets are
// delivered in the order they are due, so a constant delay keeps their
// order, as on a real link.
type link struct {
	in     chan []byte
	peer   *link
	mu     sync.Mutex
	rng    *rand.Rand
	loss   float64
	delay  func(r *rand.Rand) time.Duration
	filter func(b []byte) bool          // false: drop
	hold   func(b []byte) time.Duration // extra delay of this packet
	queue  dueQueue                     // delayed packets, toward peer
	seq    uint64
	wake   chan struct{}
	done   chan struct{}
	once   *sync.Once
}

type duePacket struct {
	due time.Time
	seq uint64
	p   []byte
}

type dueQueue []duePacket

func (q dueQueue) Len() int { return len(q) }
func (q dueQueue) Less(i, j int) bool {
	return q[i].due.Before(q[j].due) || q[i].due.Equal(q[j].due) && q[i].seq < q[j].seq
}
func (q dueQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)   { *q = append(*q, x.(duePacket)) }
func (q *dueQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

func newLinks() (*link, *link) {
	done, once := make(chan struct{}), &sync.Once{}
	a := &link{in: make(chan []byte, 4096), rng: rand.New(rand.NewPCG(1, 2)), wake: make(chan struct{}, 1), done: done, once: once}
	b := &link{in: make(chan []byte, 4096), rng: rand.New(rand.NewPCG(3, 4)), wake: make(chan struct{}, 1), done: done, once: once}
	a.peer, b.peer = b, a
	go a.deliver()
	go b.deliver()
	return a, b
}

// Queued is how many packets wait for Read, as dtlsrec.Conn tells the
// association on the server.
func (l *link) Queued() int { return len(l.in) }

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
	defer l.mu.Unlock()
	if l.rng.Float64() < l.loss || (l.filter != nil && !l.filter(p)) {
		return len(b), nil
	}
	var d time.Duration
	if l.delay != nil {
		d = l.delay(l.rng)
	}
	if l.hold != nil {
		d += l.hold(p)
	}
	l.seq++
	heap.Push(&l.queue, duePacket{due: time.Now().Add(d), seq: l.seq, p: p})
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return len(b), nil
}

// deliver hands the peer each packet when it is due.
func (l *link) deliver() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		l.mu.Lock()
		var wait time.Duration = time.Hour
		for l.queue.Len() > 0 {
			if wait = time.Until(l.queue[0].due); wait > 0 {
				break
			}
			p := heap.Pop(&l.queue).(duePacket).p
			select {
			case l.peer.in <- p:
			default: // a full queue drops
			}
		}
		l.mu.Unlock()
		t.Reset(wait)
		select {
		case <-t.C:
		case <-l.wake:
		case <-l.done:
			return
		}
	}
}

func (l *link) Close() error                     { l.once.Do(func() { close(l.done) }); return nil }
func (l *link) LocalAddr() net.Addr              { return &net.UDPAddr{} }
func (l *link) RemoteAddr() net.Addr             { return &net.UDPAddr{} }
func (l *link) SetDeadline(time.Time) error      { return nil }
func (l *link) SetReadDeadline(time.Time) error  { return nil }
func (l *link) SetWriteDeadline(time.Time) error { return nil }
