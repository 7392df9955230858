package integration

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/client"
)

// pathConn is a client's UDP socket behind an emulated path: what it sends
// leaves delay later; what it receives passes a bottleneck of rate bit/s
// whose queue holds at most maxQueue of packets (the rest is dropped at its
// tail), as a home router's uplink to the client would.
type pathConn struct {
	net.PacketConn
	delay    time.Duration
	rate     int64
	maxQueue time.Duration

	in, out chan datagram
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	dropped int
}

type datagram struct {
	b    []byte
	addr net.Addr
	due  time.Time
}

// newPath opens a socket on 127.0.0.1 behind the emulated path; it closes
// with the test.
func newPath(t *testing.T, delay time.Duration, rate int64, maxQueue time.Duration) *pathConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &pathConn{PacketConn: c, delay: delay, rate: rate, maxQueue: maxQueue,
		in: make(chan datagram, 4096), out: make(chan datagram, 4096), done: make(chan struct{})}
	go p.receive()
	go p.send()
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// api is a Pion API whose connections all use this path.
func (p *pathConn) api(t *testing.T) *webrtc.API {
	mux := ice.NewUDPMuxDefault(ice.UDPMuxParams{UDPConn: p})
	t.Cleanup(func() { _ = mux.Close() })
	return client.LoopbackAPI(func(se *webrtc.SettingEngine) { se.SetICEUDPMux(mux) })
}

func (p *pathConn) receive() {
	var last time.Time
	for {
		b := make([]byte, 1600)
		n, addr, err := p.PacketConn.ReadFrom(b)
		if err != nil {
			close(p.in)
			return
		}
		now := time.Now()
		due := now
		if p.rate > 0 {
			due = last
			if due.Before(now) {
				due = now
			}
			due = due.Add(time.Duration(int64(n+28) * 8 * int64(time.Second) / p.rate))
			if due.Sub(now) > p.maxQueue {
				p.mu.Lock()
				p.dropped++
				p.mu.Unlock()
				continue
			}
			last = due
		}
		select {
		case p.in <- datagram{b: b[:n], addr: addr, due: due}:
		default:
		}
	}
}

func (p *pathConn) ReadFrom(b []byte) (int, net.Addr, error) {
	d, ok := <-p.in
	if !ok {
		return 0, nil, net.ErrClosed
	}
	time.Sleep(time.Until(d.due))
	return copy(b, d.b), d.addr, nil
}

func (p *pathConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	if p.delay == 0 {
		return p.PacketConn.WriteTo(b, addr)
	}
	select {
	case p.out <- datagram{b: append([]byte(nil), b...), addr: addr, due: time.Now().Add(p.delay)}:
		return len(b), nil
	case <-p.done:
		return 0, net.ErrClosed
	}
}

func (p *pathConn) send() {
	for {
		select {
		case d := <-p.out:
			time.Sleep(time.Until(d.due))
			_, _ = p.PacketConn.WriteTo(d.b, d.addr)
		case <-p.done:
			return
		}
	}
}

func (p *pathConn) Close() error {
	err := errors.New("closed")
	p.once.Do(func() {
		close(p.done)
		err = p.PacketConn.Close()
	})
	return err
}

func (p *pathConn) drops() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}
