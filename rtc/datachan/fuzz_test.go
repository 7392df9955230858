package datachan

import (
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"
)

// deadConn is a connection that reads nothing and writes nowhere: the fuzz
// targets hand packets to the association themselves.
type deadConn struct {
	done chan struct{}
	once sync.Once
}

func (c *deadConn) Read([]byte) (int, error)         { <-c.done; return 0, net.ErrClosed }
func (c *deadConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *deadConn) Close() error                     { c.once.Do(func() { close(c.done) }); return nil }
func (c *deadConn) LocalAddr() net.Addr              { return &net.UDPAddr{} }
func (c *deadConn) RemoteAddr() net.Addr             { return &net.UDPAddr{} }
func (c *deadConn) SetDeadline(time.Time) error      { return nil }
func (c *deadConn) SetReadDeadline(time.Time) error  { return nil }
func (c *deadConn) SetWriteDeadline(time.Time) error { return nil }

const (
	fuzzTag     = 0x0a0b0c0d // the peer's verification tag
	fuzzPeerTSN = 100
)

// established is an association whose peer (fuzzTag, first TSN
// fuzzPeerTSN, 16 outgoing streams) completed the handshake.
func established(t testing.TB, cfg Config) (*Association, func()) {
	conn := &deadConn{done: make(chan struct{})}
	cfg.Conn = conn
	a := New(cfg)
	a.mu.Lock()
	a.peer = initChunk{tag: fuzzTag, rwnd: 1 << 20, outStreams: 16, inStreams: 16, tsn: fuzzPeerTSN, forwardTSN: true, reconfig: true}
	a.peerTag = fuzzTag
	a.establish()
	a.mu.Unlock()
	return a, func() { a.Close(); conn.Close() }
}

// fuzzPackets splits b into packets: each a 2-byte length and that many
// bytes of chunks, given the association's tag and a good checksum.
func fuzzPackets(a *Association, b []byte, each func([]byte)) {
	for len(b) >= 2 {
		n := min(int(binary.BigEndian.Uint16(b)), len(b)-2)
		var w packetWriter
		w.start(nil, a.myTag)
		w.b = append(w.b, b[2:2+n]...)
		each(w.finish())
		b = b[2+n:]
	}
}

// checkHeld: what the receiver holds stays within its window (and the gap
// filler's slack), and its accounting never goes below zero.
func checkHeld(t *testing.T, a *Association) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := &a.rcv
	if r.held < 0 || r.held > r.window+r.window/gapSlack {
		t.Fatalf("held %d of a %d-byte window", r.held, r.window)
	}
	if len(r.ooo) > maxEarly || len(a.chans) > a.cfg.MaxChannels {
		t.Fatalf("%d chunks past a gap, %d channels", len(r.ooo), len(a.chans))
	}
	if a.state == stateClosed {
		return
	}
	// Everything held is accounted for: the chunks past a gap, the
	// message being put together, the ones waiting and the ones unread.
	sum := 0
	for _, c := range r.ooo {
		sum += itemCost
		if !c.done {
			sum += len(c.data)
		}
	}
	if r.partial.active {
		sum += r.partial.cost
	}
	for _, st := range r.streams {
		for _, m := range st.waiting {
			sum += msgCost(m.data)
		}
	}
	for _, c := range a.chans {
		for _, m := range c.msgs {
			sum += msgCost(m.data)
		}
	}
	if sum != r.held {
		t.Fatalf("held %d, but %d is held", r.held, sum)
	}
}

// chunkBytes is one chunk: type, flags and value.
func chunkBytes(typ, flags byte, v []byte) []byte {
	var w packetWriter
	w.chunk(typ, flags, len(v))
	w.b = append(w.b, v...)
	w.pad()
	return w.b
}

func dataBytes(flags byte, tsn uint32, stream, ssn uint16, ppid uint32, payload []byte) []byte {
	v := binary.BigEndian.AppendUint32(nil, tsn)
	v = binary.BigEndian.AppendUint16(v, stream)
	v = binary.BigEndian.AppendUint16(v, ssn)
	v = binary.BigEndian.AppendUint32(v, ppid)
	return chunkBytes(ctData, flags, append(v, payload...))
}

func fuzzPacket(chunks ...[]byte) []byte {
	var b []byte
	for _, c := range chunks {
		b = append(b, c...)
	}
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
}

func openMsg(label string, typ byte, param uint32) []byte {
	m := []byte{dcepOpen, typ, 0, 0}
	m = binary.BigEndian.AppendUint32(m, param)
	m = binary.BigEndian.AppendUint16(m, uint16(len(label)))
	m = binary.BigEndian.AppendUint16(m, 0)
	return append(m, label...)
}

// FuzzAssociation feeds packets of arbitrary chunks to an established
// association: nothing panics, and the receiver's window accounting holds.
func FuzzAssociation(f *testing.F) {
	be := byte(flagBegin | flagEnd)
	open := dataBytes(be, fuzzPeerTSN, 0, 0, ppidDCEP, openMsg("x", chanReliable, 0))
	f.Add(fuzzPacket(open, dataBytes(be, fuzzPeerTSN+1, 0, 1, ppidBinary, []byte("hello"))))
	f.Add(fuzzPacket(open, dataBytes(flagBegin, fuzzPeerTSN+1, 0, 1, ppidBinary, []byte("he")),
		dataBytes(flagEnd, fuzzPeerTSN+2, 0, 1, ppidBinary, []byte("llo"))))
	f.Add(append(fuzzPacket(open, dataBytes(be, fuzzPeerTSN+3, 0, 2, ppidString, []byte("late"))),
		fuzzPacket(dataBytes(be|flagUnordered, fuzzPeerTSN+2, 0, 0, ppidBinary, []byte("u")),
			chunkBytes(ctForwardTSN, 0, []byte{0, 0, 0, fuzzPeerTSN + 1, 0, 0, 0, 1}))...))
	f.Add(fuzzPacket(open, dataBytes(be, fuzzPeerTSN+5, 0, 3, ppidBinary, []byte("gap")),
		chunkBytes(ctSack, 0, sackValue(0, 1, 2)), chunkBytes(ctHeartbeat, 0, []byte{0, 1, 0, 8, 1, 2, 3, 4})))
	f.Add(fuzzPacket(open, chunkBytes(ctReconfig, 0, appendParam(nil, ptOutgoingReset,
		[]byte{0, 0, 0, fuzzPeerTSN, 0, 0, 0, 0, 0, 0, 0, fuzzPeerTSN, 0, 0}))))
	f.Add(fuzzPacket(dataBytes(be, fuzzPeerTSN, 99, 0, ppidBinary, []byte("bad stream")), chunkBytes(ctAbort, 0, nil)))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, stop := established(t, Config{ReceiveWindow: 64 << 10, MaxMessage: 8 << 10, MaxChannels: 4})
		defer stop()
		fuzzPackets(a, b, func(p []byte) {
			a.handlePacket(p)
			checkHeld(t, a)
		})
		// Reading what is readable gives every byte back.
		a.mu.Lock()
		var chans []*Channel
		for _, c := range a.chans {
			chans = append(chans, c)
		}
		a.mu.Unlock()
		buf := make([]byte, 64<<10)
		for _, c := range chans {
			for {
				a.mu.Lock()
				n := len(c.msgs)
				a.mu.Unlock()
				if n == 0 {
					break
				}
				if _, err := c.Read(buf); err != nil {
					t.Fatal(err)
				}
			}
		}
		checkHeld(t, a)
	})
}

// FuzzDCEP hands arbitrary DATA_CHANNEL_OPEN and ACK messages to an
// association, each on its own stream.
func FuzzDCEP(f *testing.F) {
	f.Add(openMsg("_reliable", chanReliable, 0))
	f.Add(openMsg("_lossy", chanRexmit|chanUnorderedBit, 0))
	f.Add(openMsg("timed", chanTimed, 1000))
	f.Add([]byte{dcepAck})
	f.Add([]byte{dcepOpen, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, m []byte) {
		a, stop := established(t, Config{MaxChannels: 4})
		defer stop()
		for i := 0; i < 8; i++ {
			a.handlePacket(fuzzPackets1(a, dataBytes(flagBegin|flagEnd, fuzzPeerTSN+uint32(i), uint16(2*i), 0, ppidDCEP, m)))
		}
		checkHeld(t, a)
	})
}

// fuzzPackets1 is one packet of the given chunks.
func fuzzPackets1(a *Association, chunks ...[]byte) []byte {
	var p []byte
	fuzzPackets(a, fuzzPacket(chunks...), func(b []byte) { p = b })
	return p
}
