package dtlsrec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/dtls/v3"
	"github.com/pion/dtls/v3/pkg/crypto/selfsign"
)

// tap is a transport that keeps a copy of what it writes, for replaying.
type tap struct {
	net.PacketConn
	mu   sync.Mutex
	sent [][]byte
}

func (t *tap) WriteTo(b []byte, a net.Addr) (int, error) {
	t.mu.Lock()
	t.sent = append(t.sent, append([]byte(nil), b...))
	t.mu.Unlock()
	return t.PacketConn.WriteTo(b, a)
}

func (t *tap) last() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent[len(t.sent)-1]
}

type end struct {
	c  *Conn      // nil: plain pion/dtls
	dc *dtls.Conn // the handshake's connection
	rw net.Conn   // what application data goes through
	pc *tap
}

// handshake connects a DTLS server and client over loopback UDP, each with
// Conn (fast) or plain pion/dtls, and hands off where fast.
func handshake(t testing.TB, fastServer, fastClient bool, suites ...dtls.CipherSuiteID) (server, client *end) {
	t.Helper()
	cert, err := selfsign.GenerateSelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	mk := func() *tap {
		u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { u.Close() })
		return &tap{PacketConn: u}
	}
	sp, cp := mk(), mk()
	open := func(pc *tap, raddr net.Addr, fast, isServer bool) (*end, error) {
		e := &end{pc: pc}
		var transport net.PacketConn = pc
		if fast {
			e.c = New(pc, raddr)
			transport = e.c.Transport()
		}
		opts := []dtls.ServerOption{dtls.WithCertificates(cert), dtls.WithInsecureSkipVerify(true),
			dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret)}
		if len(suites) > 0 {
			opts = append(opts, dtls.WithCipherSuites(suites...))
		}
		var dc *dtls.Conn
		var err error
		if isServer {
			dc, err = dtls.ServerWithOptions(transport, raddr, append(opts, dtls.WithClientAuth(dtls.RequireAnyClientCert))...)
		} else {
			copts := []dtls.ClientOption{dtls.WithCertificates(cert), dtls.WithInsecureSkipVerify(true),
				dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret)}
			if len(suites) > 0 {
				copts = append(copts, dtls.WithCipherSuites(suites...))
			}
			dc, err = dtls.ClientWithOptions(transport, raddr, copts...)
		}
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := dc.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		e.dc, e.rw = dc, dc
		t.Cleanup(func() { dc.Close() })
		if fast {
			if err := e.c.Handoff(dc); err != nil {
				return e, err
			}
			e.rw = e.c
			t.Cleanup(func() { e.c.Close() })
		}
		return e, nil
	}
	var wg sync.WaitGroup
	var serr, cerr error
	wg.Add(2)
	go func() { defer wg.Done(); server, serr = open(sp, cp.LocalAddr(), fastServer, true) }()
	go func() { defer wg.Done(); client, cerr = open(cp, sp.LocalAddr(), fastClient, false) }()
	wg.Wait()
	if serr != nil && !errors.Is(serr, ErrUnsupported) || cerr != nil && !errors.Is(cerr, ErrUnsupported) {
		t.Fatalf("handshake: server %v, client %v", serr, cerr)
	}
	return server, client
}

// exchange sends n messages each way and checks that each arrives once and
// whole. At most 64 are in flight each way, so the sockets' buffers do not
// overflow even under the race detector; the handoff may reorder the first
// few, as a datagram transport may.
func exchange(a, b net.Conn, n int) error {
	var got [2]atomic.Int64
	errs := make(chan error, 2)
	recv := func(r net.Conn, tag string, count *atomic.Int64) {
		buf := make([]byte, 2000)
		seen := make([]bool, n)
		for i := 0; i < n; i++ {
			k, err := r.Read(buf)
			if err != nil {
				errs <- fmt.Errorf("%s: read %d: %w", tag, i, err)
				return
			}
			var j int
			if _, err := fmt.Sscanf(string(buf[len(tag)+1:len(tag)+7]), "%06d", &j); err != nil || j < 0 || j >= n || seen[j] {
				errs <- fmt.Errorf("%s: message %d unexpected: %q", tag, i, buf[:min(k, 20)])
				return
			}
			if want := msg(tag, j); !bytes.Equal(buf[:k], want) {
				errs <- fmt.Errorf("%s: message %d is not what was sent", tag, j)
				return
			}
			seen[j] = true
			count.Add(1)
		}
		errs <- nil
	}
	go recv(b, "a→b", &got[0])
	go recv(a, "b→a", &got[1])
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < n; i++ {
		for int64(i)-min(got[0].Load(), got[1].Load()) > 64 {
			if time.Now().After(deadline) {
				return fmt.Errorf("stuck: %d and %d of %d arrived", got[0].Load(), got[1].Load(), n)
			}
			time.Sleep(100 * time.Microsecond)
		}
		if _, err := a.Write(msg("a→b", i)); err != nil {
			return err
		}
		if _, err := b.Write(msg("b→a", i)); err != nil {
			return err
		}
	}
	for i := 0; i < 2; i++ {
		select {
		case err := <-errs:
			if err != nil {
				return err
			}
		case <-time.After(time.Until(deadline)):
			return fmt.Errorf("not everything arrived in 10 s: %d and %d of %d", got[0].Load(), got[1].Load(), n)
		}
	}
	return nil
}

func msg(tag string, i int) []byte {
	return append([]byte(fmt.Sprintf("%s %06d ", tag, i)), bytes.Repeat([]byte{byte(i)}, 1100)...)
}

// TestInterop: records Conn seals are opened by pion/dtls and the other way
// round, with AES-128-GCM and AES-256-GCM, and between two Conns.
func TestInterop(t *testing.T) {
	for _, tc := range []struct {
		name         string
		fastS, fastC bool
		suite        dtls.CipherSuiteID
	}{
		{"fast server, pion client, AES-128-GCM", true, false, dtls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256},
		{"pion server, fast client, AES-128-GCM", false, true, dtls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256},
		{"fast both, AES-256-GCM", true, true, dtls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384},
		{"fast both, default suites", true, true, 0},
		{"pion both", false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var suites []dtls.CipherSuiteID
			if tc.suite != 0 {
				suites = append(suites, tc.suite)
			}
			s, c := handshake(t, tc.fastS, tc.fastC, suites...)
			if err := exchange(s.rw, c.rw, 2000); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestUnsupportedSuite: with a CBC suite Handoff says so, and pion/dtls's
// connection (fed by the pump) carries the data.
func TestUnsupportedSuite(t *testing.T) {
	s, c := handshake(t, true, false, dtls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA)
	if s.rw != s.dc {
		t.Fatal("Handoff took a CBC connection")
	}
	if err := exchange(s.rw, c.rw, 200); err != nil {
		t.Fatal(err)
	}
}

// TestHostileRecords: a forged record, a replayed one, a truncated one and
// a record of another epoch are not delivered; the connection goes on.
func TestHostileRecords(t *testing.T) {
	s, c := handshake(t, true, true)
	if err := exchange(s.rw, c.rw, 10); err != nil {
		t.Fatal(err)
	}
	inject := func(b []byte) {
		if _, err := c.pc.PacketConn.WriteTo(b, s.pc.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	replayed := c.pc.last()
	forged := append([]byte(nil), replayed...)
	forged[len(forged)-1] ^= 1
	forged[10]++ // a new sequence number, so it is not taken for a replay
	truncated := append([]byte(nil), replayed[:20]...)
	inject(replayed)
	inject(forged)
	inject(truncated)
	if err := exchange(s.rw, c.rw, 10); err != nil {
		t.Fatal(err)
	}
	st := s.c.Stats()
	if st.Replayed != 1 || st.Forged != 1 {
		t.Fatalf("stats %+v, want 1 replayed and 1 forged", st)
	}
}

// BenchmarkRoundTrip: one 1200-byte record each way per iteration, through
// Conn at both ends, against pion/dtls at both ends.
func BenchmarkRoundTrip(b *testing.B) {
	for _, fast := range []bool{false, true} {
		name := "pion"
		if fast {
			name = "dtlsrec"
		}
		b.Run(name, func(b *testing.B) {
			s, c := handshake(b, fast, fast)
			buf := make([]byte, 2000)
			p := make([]byte, 1200)
			b.SetBytes(2 * 1200)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.rw.Write(p)
				s.rw.Read(buf)
				s.rw.Write(p)
				c.rw.Read(buf)
			}
		})
	}
}

// TestReplayWindow: a record is taken once, late ones within the window
// are taken, older ones are not.
func TestReplayWindow(t *testing.T) {
	c := &Conn{}
	check := func(seq uint64, want bool) {
		t.Helper()
		if got := c.seen(seq, true); got != want {
			t.Fatalf("seen(%d) = %v, want %v", seq, got, want)
		}
	}
	check(5, false)
	check(3, false)
	check(3, true)
	check(5, true)
	check(4, false)
	check(20000, false)
	check(20000-replayWindow, true) // too old to tell
	check(20000-replayWindow+1, false)
	check(19999, false)
	check(19999, true)
	check(20000+3*replayWindow/2, false) // a jump: what was seen is forgotten
	check(20000+replayWindow, false)
	check(20000+replayWindow, true)
}

// TestSequenceExhausted: the last 48-bit sequence number is used, the next
// write is refused rather than wrapping into the epoch (RFC 6347 4.1), and
// the connection ends.
func TestSequenceExhausted(t *testing.T) {
	s, c := handshake(t, true, true)
	if err := exchange(s.rw, c.rw, 2); err != nil {
		t.Fatal(err)
	}
	s.c.wmu.Lock()
	s.c.wseq = maxSeq
	s.c.wmu.Unlock()
	if _, err := s.rw.Write([]byte("last")); err != nil {
		t.Fatalf("the last sequence number: %v", err)
	}
	buf := make([]byte, 100)
	if n, err := c.rw.Read(buf); err != nil || string(buf[:n]) != "last" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if _, err := s.rw.Write([]byte("wrapped")); !errors.Is(err, ErrSequenceExhausted) {
		t.Fatalf("a write past the last sequence number: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.rw.Read(buf); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read on an exhausted connection")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an exhausted connection did not end")
	}
}

// TestPionClosedAfterData: once the peer's application data arrived,
// pion/dtls is closed (its reader no longer runs: a Read of it fails), a
// forged alert changes nothing, and the peer's close_notify, which
// dtlsrec now reads itself, ends Read.
func TestPionClosedAfterData(t *testing.T) {
	s, c := handshake(t, true, false)
	if err := exchange(s.rw, c.rw, 5); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !s.c.detached.Load() {
		if time.Now().After(deadline) {
			t.Fatal("pion/dtls still open after the peer's application data")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-s.c.shim.failed: // pion/dtls's transport is closed
	case <-time.After(5 * time.Second):
		t.Fatal("pion/dtls's transport still open")
	}
	if _, err := s.dc.Read(make([]byte, 100)); err == nil {
		t.Fatal("pion/dtls's connection still reads")
	}
	// An alert record of the current epoch that does not authenticate.
	forged := append([]byte(nil), c.pc.last()...)
	forged[0] = typeAlert
	forged[10] += 100
	if _, err := c.pc.PacketConn.WriteTo(forged, s.pc.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if err := exchange(s.rw, c.rw, 5); err != nil {
		t.Fatalf("after a forged alert: %v", err)
	}
	_ = c.dc.Close() // close_notify
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 2000)
		for {
			if _, err := s.rw.Read(buf); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("Read after close_notify: %v, want EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("close_notify did not end Read")
	}
}
