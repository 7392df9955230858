package hostile

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
)

// profile reads one of the server's pprof profiles from the loopback admin API.
func (s *Server) profile(t *testing.T, token, name string) io.ReadCloser {
	t.Helper()
	req, err := http.NewRequest("GET", s.URL+"/v1/admin/debug/pprof/"+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("profile %s: %v", name, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("profile %s: %s", name, resp.Status)
	}
	return resp.Body
}

// liveHeap is the server's heap after a forced collection (what is live) and
// its goroutine stacks in use, read from its heap profile's MemStats on the
// loopback admin API.
func (s *Server) liveHeap(t *testing.T, token string) (heap, stack int64) {
	t.Helper()
	body := s.profile(t, token, "heap?gc=1&debug=1")
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	heap, stack = -1, -1
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			heap, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "# Stack = "); ok { // "inuse / sys"
			stack, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	if heap <= 0 || stack <= 0 {
		t.Fatal("no HeapAlloc or Stack in the heap profile")
	}
	return heap, stack
}

// TestMemoryPerParticipant joins room-protocol participants (a data session,
// a subscriber session and a WebSocket each) that receive one publisher's
// video and audio, and measures what each costs the server: live heap after a
// collection, RSS and goroutines, from the difference between a small and a
// larger room (what one more participant costs, the fixed costs cancel).
// The bounds keep headroom over what was measured (docs/benchmarks.md,
// "Memory per participant": 45-60 KiB of live heap and one goroutine). TURN
// is off, as in the benchmark: a client that gathers relay candidates adds
// TURN allocations to this.
func TestMemoryPerParticipant(t *testing.T) {
	s := Start(t, Options{Args: []string{"--turn=false", "--joins-per-ip", "0", "--max-conns-per-ip", "0", "--joins-per-second", "1000", "--log-level", "warn"}})
	admin := s.Token(t, "mem", "admin", auth.Grants{Admin: true})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	all := auth.Grants{Publish: true, Subscribe: true, PublishData: true}
	pub, err := client.Join(ctx, s.WS, s.Token(t, "mem", "pub", all), client.Options{Name: "pub"})
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	defer pub.Close()
	video, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, "v", "pub")
	if err != nil {
		t.Fatal(err)
	}
	audio, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "a", "pub")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pub.Publish(ctx, video, "camera"); err != nil {
		t.Fatalf("publish video: %v", err)
	}
	if _, _, err := pub.Publish(ctx, audio, "microphone"); err != nil {
		t.Fatalf("publish audio: %v", err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // 30 frames/s of 2 packets and 50 Opus packets/s
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		frame, opus := make([]byte, 2000), make([]byte, 80)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			_ = audio.WriteSample(media.Sample{Data: opus, Duration: 20 * time.Millisecond})
			if n%3 != 0 {
				frame[0] = 0x01
				if n%90 == 1 {
					frame[0] = 0x00 // a keyframe every 3 s
				}
				_ = video.WriteSample(media.Sample{Data: frame, Duration: 33 * time.Millisecond})
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	var subs []*client.Client
	defer func() {
		for _, c := range subs {
			c.Close()
		}
	}()
	// join adds participants until there are n, each receiving both tracks.
	join := func(n int) {
		for i := len(subs); i < n; i++ {
			id := fmt.Sprintf("sub%d", i)
			c, err := client.Join(ctx, s.WS, s.Token(t, "mem", id, all), client.Options{Name: id})
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			subs = append(subs, c)
			got := 0
			for got < 2 {
				select {
				case tr := <-c.Tracks:
					got++
					go func() {
						for {
							if _, _, err := tr.Remote.ReadRTP(); err != nil {
								return
							}
						}
					}()
				case <-ctx.Done():
					t.Fatalf("%s received %d of 2 tracks", id, got)
				}
			}
		}
		time.Sleep(2 * time.Second) // media flows to the newest for a while
	}
	type point struct {
		heap, stack, rss int64
		g                int
	}
	measure := func() point {
		p := point{rss: s.RSS(t), g: s.Goroutines(t)}
		s.liveHeap(t, admin) // a second collection empties the sync.Pools' victims
		p.heap, p.stack = s.liveHeap(t, admin)
		return p
	}
	const small, large = 4, 20
	join(small)
	p0 := measure()
	join(large)
	// Steady state: a subscriber session keeps pion/dtls (its goroutines)
	// until the client's first SRTCP, which a loaded machine may delay.
	settle(t, s, p0.g+large-small, 10*time.Second)
	p1 := measure()
	n := int64(large - small)
	heapPer, stackPer, rssPer := (p1.heap-p0.heap)/n, (p1.stack-p0.stack)/n, (p1.rss-p0.rss)/n
	gPer := float64(p1.g-p0.g) / float64(n)
	t.Logf("per participant (%d → %d): live heap %d KiB, stacks %d KiB, RSS %d KiB, goroutines %.2f (live heap %d → %d KiB, goroutines %d → %d)",
		small, large, heapPer>>10, stackPer>>10, rssPer>>10, gPer, p0.heap>>10, p1.heap>>10, p0.g, p1.g)
	if heapPer > 100<<10 {
		t.Errorf("live heap per participant %d KiB, want at most 100", heapPer>>10)
	}
	// One: the WebSocket's reader. Writers, DTLS and SCTP keep none.
	if gPer > 1.5 {
		t.Errorf("%.2f goroutines per participant, want at most 1.5; the most common:\n%s", gPer, s.goroutineGroups(t, admin, large))
	}
}

// goroutineGroups lists the server's goroutines that number at least min,
// by their innermost Petrel or Pion frame.
func (s *Server) goroutineGroups(t *testing.T, token string, min int) string {
	t.Helper()
	body := s.profile(t, token, "goroutine?debug=1")
	defer body.Close()
	var out strings.Builder
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	count, frames := 0, []string{}
	emit := func() {
		if count >= min {
			fmt.Fprintf(&out, "%d: %s\n", count, strings.Join(frames, " < "))
		}
		count, frames = 0, nil
	}
	for sc.Scan() {
		line := sc.Text()
		if n, _, ok := strings.Cut(line, " @ "); ok {
			emit()
			count, _ = strconv.Atoi(n)
			continue
		}
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && len(frames) < 4 &&
			(strings.Contains(f[2], "petrel") || strings.Contains(f[2], "pion")) {
			frames = append(frames, f[2])
		}
	}
	emit()
	return out.String()
}
