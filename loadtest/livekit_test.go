package loadtest

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// liveKitEnv starts the shared livekit-server on 127.0.0.1 in development
// mode, or skips when it is not there.
func liveKitEnv(t *testing.T) *Server {
	t.Helper()
	bin := LiveKitBinary()
	if bin == "" {
		t.Skip("livekit-server not found: set PETREL_LIVEKIT_BIN, or put it in shared/peers/livekit/ beside the checkout")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	from := 42000 + 200*rand.IntN(35)
	s, err := StartLiveKit(bin, LiveKitOptions{Addr: "127.0.0.1", Port: port, UDPFrom: from, UDPTo: from + 199, Dev: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("livekit log:\n%s", s.LogTail())
		}
		s.Stop()
	})
	return s
}

func runLiveKit(t *testing.T, cfg Config) *Result {
	t.Helper()
	cfg.Target = "livekit"
	if testing.Verbose() {
		cfg.Progress = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != "" {
		t.Fatalf("run: %s", res.Error)
	}
	return res
}

// TestLiveKitTarget: one publisher and three viewers through LiveKit's own
// signalling; every viewer gets video and audio, and the target's CPU and
// memory are sampled. Then a room where two publishers receive each other.
func TestLiveKitTarget(t *testing.T) {
	s := liveKitEnv(t)
	res := runLiveKit(t, Config{Scenario: "stream", URL: s.URL, Peers: 3, Rate: 20, Duration: 2 * time.Second, Warmup: time.Second, TargetPID: s.PID()})
	checkAllReceived(t, res, "subscriber", 3)
	sm := res.Summary
	if sm.Connected != 4 || sm.Failed != 0 {
		t.Errorf("connected %d failed %d, want 4 and 0 (%v)", sm.Connected, sm.Failed, sm.Errors)
	}
	if sm.TargetCPU <= 0 || sm.TargetRSSMiB <= 0 {
		t.Errorf("livekit CPU %.1f%% RSS %.1f MiB: want the target sampled", sm.TargetCPU, sm.TargetRSSMiB)
	}
	if sm.DelayMs.N == 0 {
		t.Errorf("no one-way delay measured: the synthetic stamps did not survive the server")
	}

	res = runLiveKit(t, Config{Scenario: "room", Room: "load-room", URL: s.URL, Publishers: 2, Peers: 1, Rate: 20, Duration: 2 * time.Second, Warmup: time.Second})
	checkAllReceived(t, res, "publisher", 2)
	checkAllReceived(t, res, "subscriber", 1)
}
