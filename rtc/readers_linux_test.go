package rtc

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// perReader is a ReaderFilter whose handlers record, each for its own
// reader, the sequence numbers each sender's 'k' datagrams carried.
type perReader struct {
	mu      sync.Mutex
	readers []*seqLog
}

type seqLog struct {
	mu   sync.Mutex
	seqs map[netip.AddrPort][]uint32
}

func (f *perReader) Handle([]byte, netip.AddrPort) bool { panic("a reader's own handler is used") }

func (f *perReader) NewReader() PacketFilter {
	l := &seqLog{seqs: map[netip.AddrPort][]uint32{}}
	f.mu.Lock()
	f.readers = append(f.readers, l)
	f.mu.Unlock()
	return l
}

func (l *seqLog) Handle(b []byte, from netip.AddrPort) bool {
	if len(b) != 5 || b[0] != 'k' {
		return false
	}
	l.mu.Lock()
	l.seqs[from] = append(l.seqs[from], binary.BigEndian.Uint32(b[1:]))
	l.mu.Unlock()
	return true
}

// The UDP port as a SO_REUSEPORT group of two sockets: the kernel spreads
// the clients over both readers, each client's datagrams reach one reader
// only and in the order sent, and what the filter leaves reaches the mux
// whichever socket it came in on.
func TestReaderGroup(t *testing.T) {
	conns, err := listenUDPGroup("udp4", "127.0.0.1:0", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 2 {
		t.Fatalf("%d sockets, want 2 (SO_REUSEPORT)", len(conns))
	}
	port := conns[0].LocalAddr().(*net.UDPAddr).Port
	if p := conns[1].LocalAddr().(*net.UDPAddr).Port; p != port {
		t.Fatalf("second socket on port %d, want %d", p, port)
	}
	// The group holds its port: a plain bind of it fails.
	if pc, err := net.ListenPacket("udp4", conns[0].LocalAddr().String()); err == nil {
		pc.Close()
		t.Fatal("the group's port could be bound again")
	}
	c := newFilterConn(conns[0], conns[1:]...)
	defer c.Close()
	f := &perReader{}
	var pf PacketFilter = f
	c.f.Store(&pf)

	// The mux's goroutine reads meanwhile: its handler is made on the first read.
	type got struct {
		s    string
		from netip.AddrPort
	}
	muxed := make(chan got, 256)
	go func() {
		b := make([]byte, 8192)
		for {
			n, from, err := c.ReadFromAddrPort(b)
			if err != nil {
				close(muxed)
				return
			}
			muxed <- got{string(b[:n]), from}
		}
	}()

	const clients, perClient = 16, 200
	var peers []*net.UDPConn
	for range clients {
		p, err := net.DialUDP("udp4", nil, conns[0].LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		peers = append(peers, p)
	}
	var msg [5]byte
	msg[0] = 'k'
	for i := range perClient {
		for _, p := range peers {
			binary.BigEndian.PutUint32(msg[1:], uint32(i))
			if _, err := p.Write(msg[:]); err != nil {
				t.Fatal(err)
			}
		}
		if i%20 == 0 {
			time.Sleep(time.Millisecond) // within the socket buffers
		}
	}
	for _, p := range peers {
		if _, err := p.Write([]byte("p")); err != nil {
			t.Fatal(err)
		}
	}
	// Every client's 'p' reaches the mux, from either socket.
	want := map[netip.AddrPort]bool{}
	for _, p := range peers {
		want[p.LocalAddr().(*net.UDPAddr).AddrPort()] = true
	}
	deadline := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case g := <-muxed:
			if g.s != "p" {
				t.Fatalf("mux read %q", g.s)
			}
			delete(want, netip.AddrPortFrom(g.from.Addr().Unmap(), g.from.Port()))
		case <-deadline:
			t.Fatalf("%d clients' datagrams never reached the mux", len(want))
		}
	}

	f.mu.Lock()
	readers := f.readers
	f.mu.Unlock()
	busy, total := 0, 0
	seen := map[netip.AddrPort]int{}
	for _, l := range readers {
		l.mu.Lock()
		if len(l.seqs) > 0 {
			busy++
		}
		for from, seqs := range l.seqs {
			seen[from]++
			for i, s := range seqs {
				if i > 0 && s <= seqs[i-1] {
					t.Fatalf("client %v: %d after %d on one reader", from, s, seqs[i-1])
				}
			}
			total += len(seqs)
		}
		l.mu.Unlock()
	}
	if busy != 2 {
		t.Fatalf("%d of %d readers got traffic, want 2", busy, len(readers))
	}
	for from, n := range seen {
		if n != 1 {
			t.Fatalf("client %v's datagrams reached %d readers", from, n)
		}
	}
	if total < clients*perClient*9/10 {
		t.Fatalf("%d of %d datagrams arrived", total, clients*perClient)
	}
	t.Logf("%d readers, %d clients, %d datagrams", busy, len(seen), total)
}
