package hostile

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestICETCPLeanGarbage: the lean server owns the ICE-TCP port. Garbage on
// it, a frame length of 65535 with nothing after, and 300 connections that
// never send a byte, all from one address: each connection is closed (at
// once, or when its first packet is overdue), the witness's media keeps
// flowing, the server stays healthy and its footprint settles, and the
// refusals are logged a line per interval, not a line each.
func TestICETCPLeanGarbage(t *testing.T) {
	underAttack(t, Options{}, func(t *testing.T, s *Server, w *Witness) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 5)}, Timeout: 5 * time.Second}
		addr := fmt.Sprintf("127.0.0.1:%d", s.TCPPort)
		var conns []net.Conn
		dial := func() net.Conn {
			c, err := d.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("dial the ICE-TCP port: %v", err)
			}
			conns = append(conns, c)
			return c
		}
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for i := 0; i < 20; i++ {
			b := make([]byte, 100+i*100)
			_, _ = rand.Read(b)
			_, _ = dial().Write(b)
		}
		_, _ = dial().Write([]byte{0xff, 0xff})
		for i := 0; i < 300; i++ {
			dial()
		}
		s.Healthy(t)
		w.Check(t)

		// Every one of them is closed by the server: the 65535-byte frame
		// and the garbage at once, the silent ones within the first-packet
		// deadline (5 s).
		deadline := time.Now().Add(10 * time.Second)
		for i, c := range conns {
			_ = c.SetReadDeadline(deadline)
			var b [16]byte
			for {
				_, err := c.Read(b[:])
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("connection %d of %d is still open after 10 s", i, len(conns))
				}
				if err != nil {
					break
				}
			}
		}
		s.Healthy(t)
		w.Check(t)
		if n := strings.Count(s.Logs(), "webrtc session: ICE-TCP connection"); n < 1 || n > 3 {
			t.Errorf("%d log lines about %d refused ICE-TCP connections, want a few (rate-limited)", n, len(conns))
		}
	})
}
