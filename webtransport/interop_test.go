package webtransport_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/webtransport"
	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

// moqClock finds moq-clock-ietf (crates.io moq-clock-ietf 0.6.25, MoQT draft-18;
// test/interop/moq-install.sh installs it).
func moqClock(t *testing.T) string {
	if p, err := exec.LookPath("moq-clock-ietf"); err == nil {
		return p
	}
	home, _ := os.UserHomeDir()
	p := filepath.Join(home, ".cargo", "bin", "moq-clock-ietf")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	t.Skip("moq-clock-ietf not installed (run test/interop/moq-install.sh): skipping the MoQT interop test")
	return ""
}

// lines collects a process's output lines.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) read(r *bufio.Scanner) {
	for r.Scan() {
		l.mu.Lock()
		l.l = append(l.l, r.Text())
		l.mu.Unlock()
	}
}

func (l *lines) match(re *regexp.Regexp) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.l {
		if re.MatchString(s) {
			n++
		}
	}
	return n
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.l, "\n")
}

func (e *env) runClock(t *testing.T, bin, identity string, args ...string) (*lines, *lines) {
	t.Helper()
	u := e.url() + "?token=" + e.token("interop", identity)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"--bind", "127.0.0.1:0", "--tls-disable-verify"}, append(args, u)...)...)
	cmd.Env = append(os.Environ(), "RUST_LOG=info")
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out, errs := &lines{}, &lines{}
	go out.read(bufio.NewScanner(stdout))
	go errs.read(bufio.NewScanner(stderr))
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s %v stdout:\n%s\nstderr:\n%s", filepath.Base(bin), args, out, errs)
		}
	})
	return out, errs
}

// An independent MoQT draft-18 implementation publishes through Petrel and a
// Petrel client receives its objects; then a Petrel client publishes and the
// independent implementation subscribes through Petrel.
func TestInteropMoqClock(t *testing.T) {
	bin := moqClock(t)
	e := start(t)

	// moq-clock publishes petrel/interop/clock, track now.
	e.runClock(t, bin, "clock", "--publish", "--namespace", "petrel/interop/clock")
	viewer := e.dial("interop", "viewer")
	var sub interface{ Unsubscribe() }
	var objects chan struct {
		g, o uint64
		p    string
	}
	waitFor(t, "moq-clock's namespace to be published", 30*time.Second, func() bool {
		s, err := viewer.Subscribe(context.Background(), []string{"petrel", "interop", "clock"}, "now", false)
		if err != nil {
			return false
		}
		sub = s
		objects = make(chan struct {
			g, o uint64
			p    string
		}, 100)
		go func() {
			for o := range s.Objects {
				objects <- struct {
					g, o uint64
					p    string
				}{o.Group, o.ID, string(o.Payload)}
			}
		}()
		return true
	})
	defer sub.Unsubscribe()
	seconds := regexp.MustCompile(`^\d\d$`)
	got := 0
	deadline := time.After(30 * time.Second)
	for got < 3 {
		select {
		case o := <-objects:
			if o.o > 0 && !seconds.MatchString(o.p) {
				t.Fatalf("object %d/%d from moq-clock: %q", o.g, o.o, o.p)
			}
			got++
		case <-deadline:
			t.Fatalf("%d objects from moq-clock through Petrel", got)
		}
	}

	// A Petrel client publishes clock-shaped objects; moq-clock subscribes.
	pub := e.dial("interop", "gopub")
	tr := pub.AddTrack("now", false)
	if err := pub.Announce(context.Background(), []string{"petrel", "interop", "gopub"}); err != nil {
		t.Fatal(err)
	}
	out, _ := e.runClock(t, bin, "clocksub", "--namespace", "petrel/interop/gopub", "--track", "now")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for g := 0; ; g++ {
			base := fmt.Sprintf("2030-01-01 00:%02d:", g%60)
			if tr.WriteFrame(&moqt.Meta{AudioLevel: -1}, true, []byte(base)) != nil {
				return
			}
			for s := 0; s < 10; s++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				_ = tr.WriteFrame(&moqt.Meta{AudioLevel: -1}, false, []byte(fmt.Sprintf("%02d", s)))
			}
		}
	}()
	re := regexp.MustCompile(`^2030-01-01 00:\d\d:\d\d$`)
	waitFor(t, "moq-clock to print objects published by a Petrel client", 30*time.Second, func() bool { return out.match(re) >= 5 })
}

// clockLine is what moq-clock prints per object it receives.
var clockLine = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`)

// subscribeWhenPublished subscribes viewer to ns/track once the publisher has
// announced it, and counts the objects that arrive.
func subscribeWhenPublished(t *testing.T, viewer *webtransport.Client, ns []string, track string) (*webtransport.ClientSub, *atomic.Int64) {
	t.Helper()
	var s *webtransport.ClientSub
	waitFor(t, strings.Join(ns, "/")+" to be published", 30*time.Second, func() bool {
		var err error
		s, err = viewer.Subscribe(context.Background(), ns, track, false)
		return err == nil
	})
	n := &atomic.Int64{}
	go func() {
		for o := range s.Objects {
			if len(o.Payload) > 0 {
				n.Add(1)
			}
		}
	}()
	t.Cleanup(s.Unsubscribe)
	return s, n
}

// moq-clock publishes with MoQT OBJECT_DATAGRAMs: Petrel takes them and
// forwards them as OBJECT_DATAGRAMs to another moq-clock and to a Petrel client.
func TestInteropMoqClockDatagrams(t *testing.T) {
	bin := moqClock(t)
	e := start(t)
	e.runClock(t, bin, "dclock", "--publish", "--datagrams", "--namespace", "petrel/interop/dclock")
	ns := []string{"petrel", "interop", "dclock"}
	_, got := subscribeWhenPublished(t, e.dial("interop", "viewer"), ns, "now")
	waitFor(t, "moq-clock's datagram objects at a Petrel client", 30*time.Second, func() bool { return got.Load() >= 2 })
	out, _ := e.runClock(t, bin, "dsub", "--namespace", "petrel/interop/dclock", "--track", "now")
	waitFor(t, "a second moq-clock to print the first one's datagram objects", 30*time.Second, func() bool { return out.match(clockLine) >= 3 })
}

// A late joiner: moq-clock --join-groups subscribes through Petrel to another
// moq-clock's clock (SUBSCRIBE with the Largest Object filter, then a joining
// FETCH); Petrel answers the FETCH from its relay cache, and moq-clock checks
// that history and live objects meet without a gap or a missing minute base.
func TestInteropMoqClockJoiningFetch(t *testing.T) {
	bin := moqClock(t)
	e := start(t)
	e.runClock(t, bin, "clock", "--publish", "--namespace", "petrel/interop/clock")
	ns := []string{"petrel", "interop", "clock"}
	_, got := subscribeWhenPublished(t, e.dial("interop", "viewer"), ns, "now")
	waitFor(t, "moq-clock's objects in Petrel's cache", 30*time.Second, func() bool { return got.Load() >= 3 })
	out, errs := e.runClock(t, bin, "joiner", "--namespace", "petrel/interop/clock", "--track", "now", "--join-groups", "1")
	history := regexp.MustCompile(`history complete`)
	waitFor(t, "moq-clock's joining FETCH through Petrel", 30*time.Second, func() bool { return errs.match(history) >= 1 })
	// stdout and stderr are separate pipes read by separate goroutines: the
	// history's lines may still be on their way when stderr says it is
	// complete. Live objects come once a second, so in 800 ms at most one
	// line can be live: two or more mean history was printed.
	deadline := time.Now().Add(800 * time.Millisecond)
	for out.match(clockLine) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	before := out.match(clockLine)
	if before < 2 {
		t.Fatalf("the joiner printed %d times from history (the current minute so far)", before)
	}
	waitFor(t, "live objects after the history", 30*time.Second, func() bool { return out.match(clockLine) >= before+2 })
}
