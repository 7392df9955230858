package signal

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestSmallBuffersKeepReadAhead: what a client sends right behind its
// upgrade request, which net/http has already buffered, is read from the
// small-buffered connection first, and what is written reaches the client.
func TestSmallBuffersKeepReadAhead(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := smallBuffers{w}.Hijack()
		if err != nil {
			got <- "hijack: " + err.Error()
			return
		}
		defer conn.Close()
		if brw.Reader.Size() != wsBuffer || brw.Writer.Size() != wsBuffer {
			got <- "buffer sizes"
			return
		}
		b := make([]byte, len("early bytes, then later ones"))
		if _, err := io.ReadFull(brw, b); err != nil {
			got <- "read: " + err.Error()
			return
		}
		got <- string(b)
		_, _ = brw.WriteString("reply")
		_ = brw.Flush()
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// One write: the request and the first bytes behind it arrive together.
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\nearly bytes, "); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := io.WriteString(c, "then later ones"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	select {
	case s := <-got:
		if s != "early bytes, then later ones" {
			t.Fatalf("server read %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server read nothing")
	}
	b := make([]byte, 5)
	if _, err := io.ReadFull(br, b); err != nil || string(b) != "reply" {
		t.Fatalf("client read %q, %v", b, err)
	}
}
