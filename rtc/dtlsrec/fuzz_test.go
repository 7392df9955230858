package dtlsrec

import (
	"encoding/binary"
	"net"
	"testing"
	"time"
)

// nullPC is a transport that is never read: FuzzRecords hands records to
// the connection itself.
type nullPC struct{}

func (nullPC) ReadFrom([]byte) (int, net.Addr, error)    { return 0, nil, net.ErrClosed }
func (nullPC) WriteTo(b []byte, _ net.Addr) (int, error) { return len(b), nil }
func (nullPC) Close() error                              { return nil }
func (nullPC) LocalAddr() net.Addr                       { return &net.UDPAddr{} }
func (nullPC) SetDeadline(time.Time) error               { return nil }
func (nullPC) SetReadDeadline(time.Time) error           { return nil }
func (nullPC) SetWriteDeadline(time.Time) error          { return nil }

// fuzzConn is a handed-off connection whose peer seals with the key it
// opens with, epoch 1.
func fuzzConn(t testing.TB) *Conn {
	key := make([]byte, 16)
	for i := range key {
		key[i] = byte(i)
	}
	a, err := gcm(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &Conn{pc: nullPC{}, pending: make(chan []byte, 64), ready: make(chan struct{}), done: make(chan struct{})}
	c.shim = shim{c: c, wake: make(chan struct{}, 1), failed: make(chan struct{}), dlWake: make(chan struct{}, 1)}
	c.k.Store(&keys{seal: a, open: a, sealIV: [4]byte{1, 2, 3, 4}, openIV: [4]byte{1, 2, 3, 4}, epoch: 1})
	return c
}

// sealed is an application data record of c's peer with sequence number seq.
func sealed(c *Conn, seq uint64, p []byte) []byte {
	c.wmu.Lock()
	c.wseq = seq
	c.wmu.Unlock()
	var rec []byte
	c.pc = capturePC{&rec}
	c.Write(p)
	c.pc = nullPC{}
	return rec
}

type capturePC struct{ out *[]byte }

func (c capturePC) ReadFrom([]byte) (int, net.Addr, error) { return 0, nil, net.ErrClosed }
func (c capturePC) WriteTo(b []byte, _ net.Addr) (int, error) {
	*c.out = append(*c.out, b...)
	return len(b), nil
}
func (capturePC) Close() error                     { return nil }
func (capturePC) LocalAddr() net.Addr              { return &net.UDPAddr{} }
func (capturePC) SetDeadline(time.Time) error      { return nil }
func (capturePC) SetReadDeadline(time.Time) error  { return nil }
func (capturePC) SetWriteDeadline(time.Time) error { return nil }

// FuzzRecords hands arbitrary datagrams to a handed-off connection: nothing
// panics, what is returned authenticated, and no sequence number is taken
// twice.
func FuzzRecords(f *testing.F) {
	c := fuzzConn(f)
	one := sealed(c, 5, []byte("hello"))
	two := append(sealed(c, 6, []byte("a")), sealed(c, 7, []byte("b"))...)
	f.Add(one)
	f.Add(two)
	f.Add(append(append([]byte(nil), one...), one...))             // a replay in one datagram
	f.Add([]byte{22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1}) // a handshake record: pion/dtls's
	f.Add(one[:20])
	big := binary.BigEndian.AppendUint16(append([]byte(nil), one[:11]...), 0xffff)
	f.Add(big)
	f.Fuzz(func(t *testing.T, d []byte) {
		c := fuzzConn(t)
		for pass := range 2 {
			first, ok := c.records(append([]byte(nil), d...))
			if ok && len(first) > len(d) {
				t.Fatalf("a %d-byte record from a %d-byte datagram", len(first), len(d))
			}
			if pass == 1 && (ok || len(c.pending) > 0) {
				t.Fatal("a record was taken twice")
			}
			for _, ok := c.shim.pop(); ok; _, ok = c.shim.pop() {
			}
		drain:
			for {
				select {
				case <-c.pending:
				default:
					break drain
				}
			}
		}
	})
}
