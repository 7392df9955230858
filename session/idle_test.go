package session

import (
	"bytes"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/rtc/datachan"
)

// petrelGoroutines counts the goroutines with a frame of Petrel's own code
// (the server's; a Pion client has none), the test's own and the server's
// three (socket reader, RTCP, janitor) aside, and describes them.
func petrelGoroutines(t *testing.T) (int, string) {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	head := regexp.MustCompile(`^(\d+) @`)
	n := 0
	var desc []string
	for _, blk := range strings.Split(b.String(), "\n\n") {
		m := head.FindStringSubmatch(blk)
		if m == nil || !strings.Contains(blk, "petrel-sfu/petrel/") || strings.Contains(blk, "testing.tRunner") ||
			strings.Contains(blk, "session.(*Server).Serve") || strings.Contains(blk, "session.(*Server).rtcp") ||
			strings.Contains(blk, "session.(*Server).janitor") {
			continue
		}
		k, _ := strconv.Atoi(m[1])
		n += k
		var frames []string
		for _, l := range strings.Split(blk, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "#" {
				frames = append(frames, f[2])
			}
		}
		desc = append(desc, m[1]+"× "+strings.Join(frames, " <- "))
	}
	return n, strings.Join(desc, "\n")
}

// idleEvents reads each channel without a goroutine of its own: what
// arrives is handed over by the association's reader (OnReadable), and
// echoed.
type idleEvents struct {
	*events
	got chan string
}

func (e *idleEvents) OnDataChannel(dc *datachan.Channel) {
	var mu sync.Mutex
	dc.OnReadable(func() {
		mu.Lock()
		defer mu.Unlock()
		buf := make([]byte, 1<<16)
		for {
			n, str, err := dc.ReadNow(buf)
			if err != nil {
				return // datachan.ErrEmpty: until the next call
			}
			e.got <- dc.Label() + ":" + string(buf[:n])
			_ = dc.Send(buf[:n], str)
		}
	})
}

// TestDataSessionIdleCostsNoGoroutine: once a data session's channels are
// open and quiet, the session holds no goroutine (no SCTP reader, no
// accept loop, no pion/dtls connection); a message then still arrives and
// is answered, and the session goes quiet again.
func TestDataSessionIdleCostsNoGoroutine(t *testing.T) {
	s := startServer(t)
	base, _ := petrelGoroutines(t) // earlier tests' sessions may still be ending
	ev := &idleEvents{events: newEvents(), got: make(chan string, 16)}
	pc, _ := pionClient(t)
	rel, err := pc.CreateDataChannel("_reliable", nil)
	if err != nil {
		t.Fatal(err)
	}
	echoes := make(chan string, 16)
	rel.OnMessage(func(m webrtc.DataChannelMessage) { echoes <- string(m.Data) })
	opened := make(chan struct{})
	rel.OnOpen(func() { close(opened) })
	_, answer, err := s.NewDataSession(offerWith(t, pc, nil), 65536, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		t.Fatal(err)
	}
	wait(t, opened, "the channel open")

	quiet := func(when string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, desc := petrelGoroutines(t)
			if n <= base {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d goroutines beyond the %d before the session:\n%s", when, n-base, base, desc)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	quiet("channel open, nothing sent")
	for i, msg := range []string{"hello", "again"} {
		if err := rel.SendText(msg); err != nil {
			t.Fatal(err)
		}
		if got := wait(t, ev.got, "the message at the server"); got != "_reliable:"+msg {
			t.Fatalf("server got %q", got)
		}
		if got := wait(t, echoes, "the echo"); got != msg {
			t.Fatalf("client got %q", got)
		}
		quiet("after message " + strconv.Itoa(i+1))
	}
	_ = pc.Close()
	if r := wait(t, ev.closed, "close"); r == "" {
		t.Error("no reason")
	}
}
