package hostile

import (
	"testing"
	"time"
)

// TestHarness checks the harness itself: the server starts, reports its
// health, memory and goroutines, and comes back after a crash.
func TestHarness(t *testing.T) {
	s := Start(t, Options{})
	s.Healthy(t)
	if rss := s.RSS(t); rss < 1<<20 {
		t.Fatalf("RSS %d bytes", rss)
	}
	if g := s.Goroutines(t); g < 2 {
		t.Fatalf("%d goroutines", g)
	}
	if s.OpenFiles(t) < 3 {
		t.Fatal("no open files")
	}
	pid := s.PID()
	s.Restart(t)
	if s.PID() == pid {
		t.Fatal("same process after restart")
	}
	s.Healthy(t)
	s.WaitLog(t, "listening", 5*time.Second)
}
