package session_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/loadtest"
	"github.com/petrel-sfu/petrel/server"
)

const testKey = "egresskey"

var testSecret = strings.Repeat("e", 40)

// TestWHEPThroughRealServer runs a real Petrel and plays a
// WHIP publisher's video and audio to the load generator's two kinds of WHEP
// viewer: its lean peers (hand-made ICE/DTLS/SRTP) and Pion
// PeerConnections. Every viewer must get both streams, and the egress must
// forget them once they hang up.
func TestWHEPThroughRealServer(t *testing.T) {
	cfg := config.Default()
	cfg.Loopback = true
	cfg.HTTP = "127.0.0.1:0"
	cfg.RTC.UDPPort = 0
	cfg.RTC.TCPPort = 0
	cfg.TURN.Enabled = false
	cfg.APIKey, cfg.APISecret = testKey, testSecret
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := server.Start(cfg, auth.Keys{testKey: testSecret}, testKey, false, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	if s.Sessions == nil {
		t.Fatal("session server not started")
	}
	url := "http://" + s.HTTPAddr
	for _, peer := range []string{"lean", "pion"} {
		t.Run(peer, func(t *testing.T) {
			lc := loadtest.Config{Scenario: "whep", Target: "petrel", URL: url, Room: "lean-" + peer, Peers: 4, Rate: 50,
				Duration: 2 * time.Second, Warmup: time.Second, Peer: peer, APIKey: testKey, Secret: testSecret, TargetPID: os.Getpid()}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := loadtest.Run(ctx, lc)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, p := range res.Peers {
				if p.Role != "subscriber" {
					continue
				}
				n++
				kinds := map[string]uint64{}
				for _, st := range p.Streams {
					kinds[st.Kind] += st.Packets
				}
				if p.Error != "" || kinds["video"] < 20 || kinds["audio"] < 20 || p.FirstFrameMs <= 0 {
					t.Errorf("%s: error %q, video %d audio %d packets, first frame %.0f ms", p.ID, p.Error, kinds["video"], kinds["audio"], p.FirstFrameMs)
				}
			}
			if n != 4 {
				t.Errorf("%d viewers, want 4", n)
			}
			// The viewers hung up (WHEP DELETE): the egress forgets them.
			deadline := time.Now().Add(10 * time.Second)
			for s.Sessions.Viewers() > 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if v := s.Sessions.Viewers(); v != 0 {
				t.Errorf("%d lean viewers left after the run", v)
			}
		})
	}
}
