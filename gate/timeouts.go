package gate

import (
	"net/http"
	"time"
)

// Kind is how a response is timed.
type Kind int

const (
	// Bounded requests get a deadline for their body and one for their answer.
	Bounded Kind = iota
	// Stream responses (live video, exports) last as long as the client
	// reads: the write deadline moves forward with every write.
	Stream
	// Open connections time themselves (the signaling WebSocket pings its
	// client, a profile runs for the seconds asked): no deadline is set.
	Open
)

// Timeouts are the deadlines of one request after its headers.
type Timeouts struct {
	Body  time.Duration // to read the request body
	Write time.Duration // to write the answer; for a stream, each write
}

// Handler sets every request's deadlines; kind tells which requests are
// streams or open connections.
func (t Timeouts) Handler(h http.Handler, kind func(*http.Request) Kind) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		now := time.Now()
		switch kind(r) {
		case Open:
			// The server's deadlines stay on a hijacked connection.
			_ = rc.SetReadDeadline(time.Time{})
			_ = rc.SetWriteDeadline(time.Time{})
		case Stream:
			_ = rc.SetReadDeadline(time.Time{})
			if t.Write > 0 {
				_ = rc.SetWriteDeadline(now.Add(t.Write))
				w = &streamWriter{ResponseWriter: w, rc: rc, d: t.Write}
			}
		default:
			write := t.Write
			if t.Body > 0 && r.Body != nil && r.Body != http.NoBody {
				// net/http lifts it when the body has been read, before its
				// background read of the connection.
				_ = rc.SetReadDeadline(now.Add(t.Body))
				write += t.Body // the answer's time starts after the body's
			}
			if t.Write > 0 {
				_ = rc.SetWriteDeadline(now.Add(write))
			}
		}
		h.ServeHTTP(w, r)
	})
}

// streamWriter moves the write deadline forward before each write, so a
// stream lives as long as its client keeps reading and no longer.
type streamWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (s *streamWriter) Write(p []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.d))
	return s.ResponseWriter.Write(p)
}

func (s *streamWriter) Flush() {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.d))
	_ = s.rc.Flush()
}

func (s *streamWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
