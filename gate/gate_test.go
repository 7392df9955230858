package gate

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/protocol"
)

func TestClient(t *testing.T) {
	p, err := ParseProxies([]string{"10.0.0.0/8", "192.0.2.1", "::ffff:198.51.100.0/120"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, peer string
		header     http.Header
		want       string
	}{
		{"no header", "203.0.113.5:1000", nil, "203.0.113.5"},
		{"untrusted peer's header ignored", "203.0.113.5:1000", http.Header{"X-Forwarded-For": {"1.1.1.1"}}, "203.0.113.5"},
		{"trusted peer", "10.1.2.3:1000", http.Header{"X-Forwarded-For": {"1.1.1.1"}}, "1.1.1.1"},
		{"chain stops at the first untrusted hop", "10.1.2.3:1000", http.Header{"X-Forwarded-For": {"6.6.6.6, 1.1.1.1, 192.0.2.1"}}, "1.1.1.1"},
		{"header lines joined", "10.1.2.3:1000", http.Header{"X-Forwarded-For": {"6.6.6.6", "10.9.9.9"}}, "6.6.6.6"},
		{"garbage hop", "10.1.2.3:1000", http.Header{"X-Forwarded-For": {"1.1.1.1, unknown"}}, "10.1.2.3"},
		{"mapped prefix", "198.51.100.7:1000", http.Header{"X-Forwarded-For": {"1.1.1.1"}}, "1.1.1.1"},
		{"Forwarded", "10.1.2.3:1000", http.Header{"Forwarded": {`for=6.6.6.6, for="[2001:db8::1]:4711";proto=https`}}, "2001:db8::1"},
		{"X-Forwarded-For wins", "10.1.2.3:1000", http.Header{"Forwarded": {"for=6.6.6.6"}, "X-Forwarded-For": {"1.1.1.1"}}, "1.1.1.1"},
		{"port in hop", "10.1.2.3:1000", http.Header{"X-Forwarded-For": {"1.1.1.1:5555"}}, "1.1.1.1"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		r.Header = tc.header
		if r.Header == nil {
			r.Header = http.Header{}
		}
		if got := p.Client(r); got != netip.MustParseAddr(tc.want) {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if _, err := ParseProxies([]string{"proxy.example"}); err == nil {
		t.Error("a name was taken for a proxy")
	}
}

func TestLocal(t *testing.T) {
	for _, tc := range []struct {
		name, remote, host string
		header             http.Header
		ok                 bool
	}{
		{"loopback", "127.0.0.1:5", "127.0.0.1:7880", nil, true},
		{"localhost", "[::1]:5", "localhost:7880", nil, true},
		{"ipv6 host", "[::1]:5", "[::1]:7880", nil, true},
		{"node name", "127.0.0.1:5", "node1.example:7880", nil, true},
		{"other loopback address", "127.0.0.2:5", "127.0.0.3", nil, true},
		{"rebinding", "127.0.0.1:5", "evil.example:7880", nil, false},
		{"no host", "127.0.0.1:5", "", nil, false},
		{"remote", "192.0.2.1:5", "127.0.0.1", nil, false},
		{"proxied", "127.0.0.1:5", "127.0.0.1", http.Header{"X-Forwarded-For": {"127.0.0.1"}}, false},
		{"real ip", "127.0.0.1:5", "127.0.0.1", http.Header{"X-Real-Ip": {"127.0.0.1"}}, false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr, r.Host = tc.remote, tc.host
		for k, v := range tc.header {
			r.Header[k] = v
		}
		if err := Local(r, "node1.example"); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestJoins(t *testing.T) {
	j := NewJoins(1000, 2) // burst 4 per address
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	for i := 0; i < 4; i++ {
		if err := j.Admit(a); err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
	}
	if err := j.Admit(a); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("fifth join from one address: %v", err)
	}
	if err := j.Admit(b); err != nil {
		t.Fatalf("another address: %v", err)
	}
	// One IPv6 subscriber network is one address.
	v6 := NewJoins(1000, 1)
	_ = v6.Admit(netip.MustParseAddr("2001:db8::1"))
	_ = v6.Admit(netip.MustParseAddr("2001:db8::2"))
	if err := v6.Admit(netip.MustParseAddr("2001:db8::3")); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("third join from one /64: %v", err)
	}
	// The server's budget comes after the address's.
	g := NewJoins(1, 0)
	_, _ = g.Admit(a), g.Admit(a)
	if err := g.Admit(b); protocol.CodeOf(err) != protocol.CodeServerBusy {
		t.Fatalf("over the server's budget: %v", err)
	}
	// Many addresses stay bounded.
	for i := 0; i < 3*maxTracked; i++ {
		_ = j.Admit(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	if len(j.cur) > maxTracked || len(j.prev) > maxTracked {
		t.Fatalf("%d+%d addresses tracked, cap %d", len(j.cur), len(j.prev), maxTracked)
	}
}

func TestRefusals(t *testing.T) {
	var buf syncBuf
	l := NewRefusals(slog.New(slog.NewTextHandler(&buf, nil)), "request refused", 100*time.Millisecond)
	r := httptest.NewRequest("GET", "/", nil)
	for i := 0; i < 1000; i++ {
		l.Note("ws", r, protocol.Errorf(protocol.CodeUnauthorized, "bad token"))
	}
	time.Sleep(250 * time.Millisecond)
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 2 || !strings.Contains(out, "count=999") {
		t.Fatalf("want one detailed line and one summary of 999, got:\n%s", out)
	}
	// Quiet again: the next one is logged in full.
	l.Note("whip", r, errors.New("x"))
	if !strings.Contains(buf.String(), "door=whip") {
		t.Fatalf("after a quiet interval:\n%s", buf.String())
	}
}

func TestListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, 2, nil, nil)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	dial()
	third := dial()
	_ = third.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := third.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("the third connection was not closed: %v", err)
	}
	a := netip.MustParseAddr("127.0.0.1")
	if n := l.Open(a); n != 2 {
		t.Fatalf("%d open", n)
	}
	(<-accepted).Close()
	if n := l.Open(a); n != 1 {
		t.Fatalf("%d open after a close", n)
	}
	dial()
	select {
	case <-accepted:
	case <-time.After(2 * time.Second):
		t.Fatal("a connection within the cap again was not accepted")
	}
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "reset") }

func TestTimeouts(t *testing.T) {
	var ctxErr error
	h := Timeouts{Body: 300 * time.Millisecond, Write: time.Second}.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		// Past the body deadline: the request must not be cancelled.
		time.Sleep(500 * time.Millisecond)
		ctxErr = r.Context().Err()
		_, _ = io.WriteString(w, "ok")
	}), func(*http.Request) Kind { return Bounded })
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" || ctxErr != nil {
		t.Fatalf("a prompt body: %q, context %v", b, ctxErr)
	}
	// A body that stops arriving.
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write([]byte("v=0")) }()
	req, _ := http.NewRequest("POST", srv.URL, pr)
	req.ContentLength = 100
	start := time.Now()
	resp, err = http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("a stalled body: %s", resp.Status)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("a stalled body took %s", d)
	}
	pw.Close()
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestStreamDeadlineMoves(t *testing.T) {
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 4; i++ {
			_, _ = io.WriteString(w, "frame\n")
			w.(http.Flusher).Flush()
			time.Sleep(200 * time.Millisecond)
		}
	})
	for _, tc := range []struct {
		kind Kind
		full bool
	}{{Stream, true}, {Open, true}, {Bounded, false}} {
		srv := httptest.NewServer(Timeouts{Body: time.Second, Write: 300 * time.Millisecond}.Handler(slow, func(*http.Request) Kind { return tc.kind }))
		resp, err := http.Get(srv.URL)
		var b []byte
		if err == nil {
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if full := strings.Count(string(b), "frame") == 4; full != tc.full {
			t.Errorf("kind %d: got %q, want all four frames: %v", tc.kind, b, tc.full)
		}
		srv.Close()
	}
}
