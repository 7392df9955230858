package ingest

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/auth"
)

// syncBuf is a log sink the connection's goroutine and the test share.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FuzzRTMPSetup feeds arbitrary bytes to a connection before its publish is
// accepted (handshake, chunk stream, AMF0 commands): it must end, and no
// parser may panic (serve recovers a panic into a log line, which fails here).
func FuzzRTMPSetup(f *testing.F) {
	hs := append([]byte{3}, make([]byte, 1536)...)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(hs)
	f.Add(append(append(append([]byte{}, hs...), make([]byte, 1536)...),
		0x03, 0, 0, 0, 0, 0, 0x20, 0x14, 0, 0, 0, 0, 0x02, 0, 7, 'c', 'o', 'n', 'n', 'e', 'c', 't', 0, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x03, 0, 0, 9))
	f.Add(append(append(append([]byte{}, hs...), make([]byte, 1536)...), 0x02, 0, 0, 0, 0, 0, 4, 0x01, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, in []byte) {
		logs := &syncBuf{}
		s := &Server{o: Options{Keys: auth.Keys{"k": strings.Repeat("s", 32)}}, log: slog.New(slog.NewTextHandler(logs, nil)),
			conns: map[net.Conn]*publisher{}}
		srv, cli := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); s.serve(srv) }()
		go func() { _, _ = io.Copy(io.Discard, cli) }()
		_ = cli.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = cli.Write(in)
		_ = cli.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the connection did not end")
		}
		if strings.Contains(logs.String(), "panic") {
			t.Fatalf("a parser panicked: %s", logs.String())
		}
	})
}
