package webtransport_test

import (
	"context"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/webtransport"
	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}

// TestMeasureWebTransport prints session start times and frame latency on
// loopback (docs/benchmarks.md, "WebTransport"). It measures, it does not
// judge: run with PETREL_WT_MEASURE=1.
func TestMeasureWebTransport(t *testing.T) {
	if os.Getenv("PETREL_WT_MEASURE") == "" {
		t.Skip("measurement: set PETREL_WT_MEASURE=1")
	}
	e := start(t)
	// Session start: WebTransport (QUIC + TLS + CONNECT + SETUP) against
	// WebRTC (WebSocket join + publisher connection with ICE, DTLS, SCTP).
	var wtStart, rtcStart []time.Duration
	for i := 0; i < 10; i++ {
		t0 := time.Now()
		c := e.dial("m", "wt-start")
		wtStart = append(wtStart, time.Since(t0))
		c.Close()
	}
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := client.Join(ctx, "ws://"+e.srv.HTTPAddr+"/v1/rtc", e.token("m", "rtc-start"), client.Options{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		rtcStart = append(rtcStart, time.Since(t0))
		c.Close()
	}
	t.Logf("session start: WebTransport median %v p90 %v; WebRTC join median %v p90 %v",
		pct(wtStart, .5), pct(wtStart, .9), pct(rtcStart, .5), pct(rtcStart, .9))

	// Frame latency: a WebTransport publisher at 30 fps, 3 KB frames, received
	// by a WebTransport subscriber (relay, streams and datagrams) and a Pion
	// WebRTC subscriber (bridge to RTP).
	pub := e.dial("m", "pub")
	video := pub.AddTrack("video", false)
	if err := pub.Announce(context.Background(), []string{"petrel", "m", "pub"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "server subscription", 10*time.Second, func() bool { return video.Subscribers() > 0 })
	var forceKey atomic.Bool // an encoder answers keyframe requests
	video.OnKeyframeRequest(func() { forceKey.Store(true) })
	var mu sync.Mutex
	sentAt := map[int]time.Time{}
	every(t, 33*time.Millisecond, func(n int) {
		key := n%60 == 0 || forceKey.Swap(false)
		f := vp8Frame(n, key)
		mu.Lock()
		sentAt[n] = time.Now()
		mu.Unlock()
		m := moqt.Meta{TimestampUs: uint64(n) * 33333, Keyframe: key, AudioLevel: -1}
		if key {
			m.Codec = "vp8"
		}
		_ = video.WriteFrame(&m, key, f)
	})
	lat := func(n int, at time.Time) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return at.Sub(sentAt[n])
	}
	for _, dgram := range []bool{false, true} {
		sub := e.dial("m", "wtsub")
		s, err := sub.Subscribe(context.Background(), []string{"petrel", "m", "pub"}, "video", dgram)
		if err != nil {
			t.Fatal(err)
		}
		var d []time.Duration
		first := time.Now()
		var firstObj time.Duration
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			select {
			case o := <-s.Objects:
				if firstObj == 0 {
					firstObj = time.Since(first)
				}
				d = append(d, lat(int(o.Payload[1])<<8|int(o.Payload[2]), time.Now()))
			case <-time.After(100 * time.Millisecond):
			}
		}
		t.Logf("WebTransport -> WebTransport (datagrams %v): %d frames, first after %v, latency median %v p95 %v max %v",
			dgram, len(d), firstObj, pct(d, .5), pct(d, .95), pct(d, 1))
		sub.Close()
	}
	viewer := e.join("m", "viewer")
	var tr client.Track
	select {
	case tr = <-viewer.Tracks:
	case <-time.After(10 * time.Second):
		t.Fatal("no track")
	}
	dp, _ := webtransport.NewDepacketizer("vp8", 90000)
	var d []time.Duration
	joined := time.Now()
	var firstFrame time.Duration
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); {
		_ = tr.Remote.SetReadDeadline(deadline)
		p, _, err := tr.Remote.ReadRTP()
		if err != nil {
			break
		}
		dp.Push(&p.Header, p.Payload, len(p.Payload) > 4 && vp8Key(p.Payload), func(_ uint64, _ bool, f []byte) {
			if firstFrame == 0 {
				firstFrame = time.Since(joined)
			}
			d = append(d, lat(int(f[1])<<8|int(f[2]), time.Now()))
		})
	}
	t.Logf("WebTransport -> WebRTC (Pion): %d frames, first %v after the track, latency median %v p95 %v max %v", len(d), firstFrame, pct(d, .5), pct(d, .95), pct(d, 1))
}
