package datachan

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

// packet builds one SCTP packet with one chunk.
func packet(vtag uint32, typ, flags byte, value []byte) []byte {
	var w packetWriter
	w.start(nil, vtag)
	w.chunk(typ, flags, len(value))
	w.b = append(w.b, value...)
	w.pad()
	return w.finish()
}

func dataValue(tsn uint32, stream uint16, ppid uint32, payload []byte) []byte {
	v := binary.BigEndian.AppendUint32(nil, tsn)
	v = binary.BigEndian.AppendUint16(v, stream)
	v = binary.BigEndian.AppendUint16(v, 0)
	v = binary.BigEndian.AppendUint32(v, ppid)
	return append(v, payload...)
}

// TestHostileInput: packets a peer (or anyone who can write to the DTLS
// connection) should not send are dropped and counted, never acted on, and
// the association goes on carrying messages.
func TestHostileInput(t *testing.T) {
	la, lb := newLinks()
	a := New(Config{Conn: la, Client: true})
	b := New(Config{Conn: lb, MaxMessage: 4096})
	t.Cleanup(func() { a.Close(); b.Close(); la.Close() })
	<-a.Ready()
	<-b.Ready()
	c, err := a.Open("x", Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := accept(t, b)
	n := 0
	roundTrip := func(what string) {
		t.Helper()
		if err := c.Send(message(n, 100), false); err != nil {
			t.Fatalf("after %s: %v", what, err)
		}
		buf := make([]byte, 200)
		got := make(chan error, 1)
		go func() {
			k, err := r.Read(buf)
			if err == nil && (k != 100 || binary.BigEndian.Uint32(buf) != uint32(n)) {
				err = errorf("wrong message")
			}
			got <- err
		}()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("after %s: %v", what, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("after %s: the association stopped carrying messages", what)
		}
		n++
	}
	roundTrip("nothing")
	b.mu.Lock()
	tag, cum, acked := b.myTag, b.rcv.cum, b.snd.cumAck
	b.mu.Unlock()
	badSum := packet(tag, ctHeartbeat, 0, []byte{0, 1, 0, 8, 1, 2, 3, 4})
	badSum[8] ^= 0xff
	truncated := packet(tag, ctData, 3, dataValue(cum+1, 0, ppidBinary, []byte("abcd")))
	binary.BigEndian.PutUint16(truncated[14:], 400) // chunk length past the packet
	truncated = packetWithChecksum(truncated)
	type packetCase struct {
		name string
		pkt  []byte
	}
	dropped := []packetCase{
		{"a short datagram", []byte{1, 2, 3}},
		{"a bad checksum", badSum},
		{"a wrong verification tag", packet(tag+1, ctData, 3, dataValue(cum+1, 0, ppidBinary, []byte("x")))},
		{"a chunk longer than the packet", truncated},
		{"an INIT with a tag", packet(tag, ctInit, 0, make([]byte, 16))},
		{"DATA far ahead", packet(tag, ctData, 3, dataValue(cum+1<<20, 0, ppidBinary, []byte("x")))},
		{"a SACK of data never sent", packet(tag, ctSack, 0, binary.BigEndian.AppendUint32(make([]byte, 0, 12), b.myTSN+1<<20))},
		{"a SACK with a gap block past the flight", packet(tag, ctSack, 0, sackValue(acked, 9, 200))},
		{"a FORWARD-TSN far ahead", packet(tag, ctForwardTSN, 0, binary.BigEndian.AppendUint32(nil, cum+1<<20))},
	}
	// Not counted as dropped, and they change nothing: a heartbeat too
	// large to answer, and answers (one truncated) to no probe.
	ignored := []packetCase{
		{"a heartbeat of 4 KB", packet(tag, ctHeartbeat, 0, make([]byte, 4096))},
		{"an answer to no path MTU probe", packet(tag, ctHeartbeatAck, 0, appendParam(nil, ptHBInfo, []byte("pmtu\x00\x00\x00\x01\x00\x00\x1f\x40")))},
		{"a truncated heartbeat answer", packet(tag, ctHeartbeatAck, 0, []byte{0, 1, 0, 40, 'p', 'm'})},
	}
	for _, c := range dropped {
		before := b.Stats().Dropped
		lb.in <- c.pkt
		roundTrip(c.name)
		if b.Stats().Dropped == before {
			t.Errorf("%s: not counted as dropped", c.name)
		}
	}
	for _, c := range ignored {
		lb.in <- c.pkt
		roundTrip(c.name)
	}
	if m := b.Stats().MTU; m != 1200 {
		t.Errorf("forged probe answers moved the MTU to %d", m)
	}
	select {
	case <-b.Done():
		t.Fatalf("the association ended: %v", b.Err())
	default:
	}

	// DATA with the next TSNs takes the place of the sender's next chunks
	// (anyone who can write to the connection can do that), so these come
	// last, and only the receiver is checked.
	b.mu.Lock()
	cum = b.rcv.cum
	b.mu.Unlock()
	for i, p := range [][]byte{
		packet(tag, ctData, 3, dataValue(cum+1, 9, ppidDCEP, []byte{dcepOpen, 0, 0})),
		packet(tag, ctData, 3, dataValue(cum+2, 77, ppidBinary, []byte("x"))),
	} {
		before := b.Stats().Dropped
		lb.in <- p
		time.Sleep(50 * time.Millisecond)
		if b.Stats().Dropped == before {
			t.Errorf("injected message %d: not counted as dropped", i)
		}
	}
	select {
	case <-b.Done():
		t.Fatalf("the association ended: %v", b.Err())
	default:
	}
}

// TestOversizedMessage: a message over the receiver's limit ends the
// association, with an ABORT that the sender hears.
func TestOversizedMessage(t *testing.T) {
	la, lb := newLinks()
	a := New(Config{Conn: la, Client: true})
	b := New(Config{Conn: lb, MaxMessage: 4096})
	t.Cleanup(func() { a.Close(); b.Close(); la.Close() })
	c, err := a.Open("x", Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := accept(t, b)
	if err := c.Send(make([]byte, 5000), false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
		if !strings.Contains(b.Err().Error(), "limit") {
			t.Errorf("ended with %v", b.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an oversized message did not end the association")
	}
	select {
	case <-a.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the sender did not hear the ABORT")
	}
	if _, err := r.Read(make([]byte, 10)); err == nil {
		t.Error("read on a channel of an ended association")
	}
}

type errorf string

func (e errorf) Error() string { return string(e) }

// packetWithChecksum recomputes a packet's checksum.
func packetWithChecksum(b []byte) []byte {
	w := packetWriter{b: b}
	return w.finish()
}

// sackValue is a SACK with one gap block.
func sackValue(cum uint32, start, end uint16) []byte {
	v := binary.BigEndian.AppendUint32(nil, cum)
	v = binary.BigEndian.AppendUint32(v, 1<<16)
	v = binary.BigEndian.AppendUint16(v, 1)
	v = binary.BigEndian.AppendUint16(v, 0)
	v = binary.BigEndian.AppendUint16(v, start)
	return binary.BigEndian.AppendUint16(v, end)
}
