package egress

import (
	"strings"
	"testing"
)

func TestCheckTarget(t *testing.T) {
	for _, u := range []string{"rtmp://live.example.com/app/key", "rtmps://a.example.com:443/live2/sk_1?x=1", "rtmp://127.0.0.1:1935/live/test"} {
		if err := checkTarget(u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	for _, u := range []string{"", "file:///etc/passwd", "http://a/b/c", "https://a/b", "srt://a:1/x", "rtmp:/a/b", "rtmp://a", "rtmp://a/",
		"rtmp:opaque/x", "rtmp://a/b c", "rtmp://a/b\n-y", "RTMPX://a/b", "rtmp://a/" + strings.Repeat("k", maxURL)} {
		if err := checkTarget(u); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
}

func TestRedactHidesTheStreamKey(t *testing.T) {
	for in, want := range map[string]string{
		"rtmp://a.example.com/app/sk_secret":             "rtmp://a.example.com/app/…",
		"rtmps://u:pw@a.example.com:443/app/k?token=sec": "rtmps://a.example.com:443/app/…",
		"rtmp://a/app": "rtmp://a/app",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// The ports handed to ffmpeg are pairs outside the kernel's ephemeral range,
// never handed twice while ffmpeg may still be binding them.
func TestFreePortPairs(t *testing.T) {
	lo, hi := portRange()
	seen := map[int]bool{}
	for i := 0; i < 50; i++ {
		p, err := freePortPair()
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p+1 > hi+1 || seen[p] || seen[p+1] {
			t.Fatalf("port %d (range %d–%d, seen %v)", p, lo, hi, seen[p])
		}
		seen[p], seen[p+1] = true, true
	}
}
