package lograte

import (
	"testing"
	"time"
)

func TestAllow(t *testing.T) {
	var l Limit
	if n, ok := l.Allow(time.Hour); !ok || n != 0 {
		t.Fatalf("first call: %d %v, want 0 true", n, ok)
	}
	for i := 0; i < 3; i++ {
		if _, ok := l.Allow(time.Hour); ok {
			t.Fatal("a call within the interval was allowed")
		}
	}
	if n, ok := l.Allow(0); !ok || n != 3 {
		t.Fatalf("after the interval: %d %v, want 3 true", n, ok)
	}
}
