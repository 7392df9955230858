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
	"testing"
	"time"

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
