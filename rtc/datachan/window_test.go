package datachan

import (
	"encoding/binary"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// rawPeer is a hand-made SCTP endpoint facing an Association: it runs the
// handshake and then writes whatever DATA it likes, reading nothing but
// the victim's packets it asks for.
type rawPeer struct {
	t      *testing.T
	la, lb *link
	victim *Association
	tag    uint32 // the victim's verification tag: what our packets carry
	tsn    uint32 // our next TSN
	rwnd   atomic.Int64
}

// newRawPeer starts an association on one end of a link and completes its
// handshake by hand from the other.
func newRawPeer(t *testing.T, cfg Config) *rawPeer {
	t.Helper()
	la, lb := newLinks()
	cfg.Conn = lb
	b := New(cfg)
	t.Cleanup(func() { b.Close(); la.Close() })
	p := &rawPeer{t: t, la: la, lb: lb, victim: b, tsn: 1000}
	init := p.expect(ctInit)
	c, err := parseInit(init)
	if err != nil {
		t.Fatal(err)
	}
	p.tag = c.tag
	ack := initChunk{tag: 0x1234567, rwnd: 1 << 20, outStreams: 1024, inStreams: 1024, tsn: p.tsn, cookie: []byte("cookie")}
	p.write(packet(c.tag, ctInitAck, 0, appendInit(nil, ack)))
	if string(p.expect(ctCookieEcho)) != "cookie" {
		t.Fatal("the victim echoed another cookie")
	}
	p.write(packet(c.tag, ctCookieAck, 0, nil))
	select {
	case <-b.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("no association within 5 s")
	}
	p.rwnd.Store(-1)
	return p
}

// mute drops what the victim sends from now on, keeping the window of its
// last SACK.
func (p *rawPeer) mute() {
	p.lb.mu.Lock()
	defer p.lb.mu.Unlock()
	p.lb.filter = func(b []byte) bool {
		it := chunkIter{b: b[headerSize:]}
		for {
			ct, _, v, ok := it.next()
			if !ok {
				return false
			}
			if ct == ctSack && len(v) >= 8 {
				p.rwnd.Store(int64(binary.BigEndian.Uint32(v[4:])))
			}
		}
	}
}

func (p *rawPeer) write(b []byte) { p.lb.in <- b }

// expect waits for the victim's first chunk of type typ and returns its value.
func (p *rawPeer) expect(typ byte) []byte {
	p.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case b := <-p.la.in:
			it := chunkIter{b: b[headerSize:]}
			for {
				ct, _, v, ok := it.next()
				if !ok {
					break
				}
				if ct == typ {
					return v
				}
			}
		case <-timeout:
			p.t.Fatalf("no chunk of type %d within 5 s", typ)
			return nil
		}
	}
}

// drain discards what the victim sent so far.
func (p *rawPeer) drain() {
	for {
		select {
		case <-p.la.in:
		default:
			return
		}
	}
}

// chunk is one DATA chunk of the peer's.
type chunk struct {
	flags  byte
	tsn    uint32
	stream uint16
	ssn    uint16
	ppid   uint32
	data   []byte
}

// send packs chunks into packets of at most 1200 bytes.
func (p *rawPeer) send(chunks []chunk) {
	var w packetWriter
	w.start(nil, p.tag)
	for _, c := range chunks {
		n := dataHeaderSize + len(c.data)
		if w.len()+(n+3)&^3 > 1200 {
			p.write(w.finish())
			w = packetWriter{}
			w.start(nil, p.tag)
		}
		w.chunk(ctData, c.flags, 12+len(c.data))
		w.b = binary.BigEndian.AppendUint32(w.b, c.tsn)
		w.b = binary.BigEndian.AppendUint16(w.b, c.stream)
		w.b = binary.BigEndian.AppendUint16(w.b, c.ssn)
		w.b = binary.BigEndian.AppendUint32(w.b, c.ppid)
		w.b = append(w.b, c.data...)
		w.pad()
	}
	if w.len() > headerSize {
		p.write(w.finish())
	}
}

// next is the chunk of a whole (B and E) message with the next TSN.
func (p *rawPeer) next(flags byte, stream, ssn uint16, ppid uint32, data []byte) chunk {
	p.tsn++
	return chunk{flags | flagBegin | flagEnd, p.tsn - 1, stream, ssn, ppid, data}
}

// open opens a channel on stream id with a DATA_CHANNEL_OPEN.
func (p *rawPeer) open(id uint16, label string) {
	m := []byte{dcepOpen, chanReliable, 0, 0, 0, 0, 0, 0}
	m = binary.BigEndian.AppendUint16(m, uint16(len(label)))
	m = binary.BigEndian.AppendUint16(m, 0)
	m = append(m, label...)
	p.send([]chunk{p.next(0, id, 0, ppidDCEP, m)})
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestHostileMemory: a peer that sends what can never be read (ordered
// messages behind a missing one on many streams, messages of two tiny
// chunks each, chunks far past a gap), then floods a channel nobody reads,
// makes the receiver hold at most twice its window, and is aborted for
// sending past the window it was told.
func TestHostileMemory(t *testing.T) {
	const window = 1 << 20
	one := []byte{'x'}
	attacks := []struct {
		name string
		send func(p *rawPeer, add func(...chunk))
	}{
		{"gapped streams", func(p *rawPeer, add func(...chunk)) {
			// Channels nobody accepted yet, each with messages behind a
			// missing SSN 1; then every other stream id, open or not,
			// valid or not.
			for s := 4; s < 32; s += 2 {
				p.open(uint16(s), "gapped")
				for ssn := 2; ssn <= 1000; ssn++ {
					add(p.next(0, uint16(s), uint16(ssn), ppidBinary, one))
				}
			}
			for s := 32; s < 8192; s++ {
				for ssn := 1; ssn <= 10; ssn++ {
					add(p.next(0, uint16(s), uint16(ssn), ppidBinary, one))
				}
			}
		}},
		{"tiny fragments", func(p *rawPeer, add func(...chunk)) {
			for i := 0; i < 1000; i++ {
				add(chunk{flagBegin, p.tsn, 3, uint16(i + 1), ppidBinary, one},
					chunk{flagEnd, p.tsn + 1, 3, uint16(i + 1), ppidBinary, one})
				p.tsn += 2
			}
		}},
		{"past a gap", func(p *rawPeer, add func(...chunk)) {
			p.tsn++
			for i := 0; i < maxAhead-2; i += 2 {
				add(p.next(flagUnordered, 2, 0, ppidBinary, one))
				p.tsn++
			}
		}},
		{"unread", func(p *rawPeer, add func(...chunk)) {}},
	}
	for _, at := range attacks {
		t.Run(at.name, func(t *testing.T) {
			p := newRawPeer(t, Config{ReceiveWindow: window, MaxMessage: 64 << 10})
			b := p.victim
			// A channel the application accepts and never reads.
			p.open(2, "unread")
			accept(t, b)
			p.mute()
			p.drain()
			before := heapInUse()
			var chunks []chunk
			add := func(c ...chunk) {
				chunks = append(chunks, c...)
				if len(chunks) >= 50 {
					p.send(chunks)
					chunks = chunks[:0]
				}
			}
			at.send(p, add)
			for i := 0; i < 200000; i++ {
				add(p.next(0, 2, uint16(i+1), ppidBinary, one))
			}
			p.send(chunks)
			// Let the victim take every packet in.
			deadline := time.Now().Add(20 * time.Second)
			for len(p.lb.in) > 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
			grown := heapInUse() - before
			t.Logf("held %d bytes of a %d-byte window; heap grew by %d", b.heldBytes(), window, grown)
			if grown > 2*window {
				t.Errorf("the heap grew by %d bytes, over twice the %d-byte window", grown, window)
			}
			if w := p.rwnd.Load(); w > 64<<10 {
				t.Errorf("the last window advertised was %d bytes", w)
			}
			select {
			case <-b.Done():
				if !strings.Contains(b.Err().Error(), "window") {
					t.Errorf("aborted with %v", b.Err())
				}
			default:
				t.Error("a peer that kept sending past a closed window was not aborted")
			}
		})
	}
}

func (a *Association) heldBytes() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rcv.held
}

// TestStreamLimits: DATA on a stream the peer may not use is acknowledged,
// answered with an ERROR and discarded; a stream that holds maxParked
// ordered messages behind a missing one ends the association with a
// Protocol Violation.
func TestStreamLimits(t *testing.T) {
	p := newRawPeer(t, Config{ReceiveWindow: 1 << 20})
	b := p.victim
	p.open(2, "c")
	accept(t, b)
	p.drain()
	p.send([]chunk{p.next(0, 1024, 0, ppidBinary, []byte("x"))}) // the peer said 1024 outgoing streams
	if v := p.expect(ctError); len(v) < 2 || binary.BigEndian.Uint16(v) != 1 {
		t.Fatalf("ERROR cause %x, want Invalid Stream Identifier", v)
	}
	b.mu.Lock()
	cum := b.rcv.cum
	b.mu.Unlock()
	if cum != p.tsn-1 {
		t.Errorf("the chunk on an invalid stream was not acknowledged: cum %d, sent %d", cum, p.tsn-1)
	}
	var chunks []chunk
	for ssn := 2; ssn <= maxParked+2; ssn++ {
		chunks = append(chunks, p.next(0, 2, uint16(ssn), ppidBinary, []byte("x")))
	}
	p.send(chunks)
	var abort []byte
	for abort == nil {
		abort = p.expect(ctAbort)
	}
	if len(abort) < 2 || binary.BigEndian.Uint16(abort) != 13 {
		t.Errorf("ABORT cause %x, want Protocol Violation", abort)
	}
	select {
	case <-b.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the association did not end")
	}
}

// TestChannelLimit: a peer that opens channels and never answers their
// reset holds at most MaxChannels of them.
func TestChannelLimit(t *testing.T) {
	p := newRawPeer(t, Config{MaxChannels: 8})
	b := p.victim
	for i := 0; i < 100; i++ {
		p.open(uint16(2*i), "x")
	}
	p.send([]chunk{p.next(0, 0, 1, ppidBinary, []byte("x"))})
	time.Sleep(50 * time.Millisecond)
	b.mu.Lock()
	n := len(b.chans)
	b.mu.Unlock()
	if n > 8 {
		t.Errorf("%d channels held, over the limit of 8", n)
	}
}
