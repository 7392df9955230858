package loadtest

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// janusEnv starts Janus in a namespace of its own, or skips when this machine
// cannot (not root, no janus).
func janusEnv(t *testing.T, n int) (*NetNS, *Server) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	if _, err := exec.LookPath("janus"); err != nil {
		t.Skip("janus not installed (apt-get install janus)")
	}
	ns, err := NewNetNS("petrel-load-t"+string(rune('0'+n)), 200+n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	s, err := StartJanus(ns, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return ns, s
}

func TestJanusEchoAndVideoRoom(t *testing.T) {
	ns, s := janusEnv(t, 1)
	res := runSmall(t, Config{Scenario: "echo", Target: "janus", URL: s.URL, Bind: ns.HostAddr, Peers: 3, Rate: 20, Duration: time.Second, Warmup: time.Second, TargetPID: s.PID()})
	checkAllReceived(t, res, "echo", 3)
	if res.Summary.TargetCPU <= 0 || res.Summary.TargetRSSMiB <= 0 {
		t.Errorf("janus CPU %.1f%% RSS %.1f MiB: want the target sampled", res.Summary.TargetCPU, res.Summary.TargetRSSMiB)
	}
	res = runSmall(t, Config{Scenario: "stream", Target: "janus", URL: s.URL, Bind: ns.HostAddr, Peers: 2, Rate: 20, Duration: time.Second, Warmup: time.Second})
	checkAllReceived(t, res, "subscriber", 2)
	res = runSmall(t, Config{Scenario: "stream", Target: "janus", JanusStreaming: true, URL: s.URL, Bind: ns.HostAddr, Peers: 2, Rate: 20, Duration: time.Second, Warmup: time.Second})
	checkAllReceived(t, res, "subscriber", 2)
}

func TestJanusAudioBridgeMix(t *testing.T) {
	ns, s := janusEnv(t, 2)
	res := runSmall(t, Config{Scenario: "mix", Target: "janus", URL: s.URL, Bind: ns.HostAddr, Peers: 4, Talkers: 2, Rate: 20, Duration: 2 * time.Second, Warmup: time.Second, TargetPID: s.PID()})
	checkMix(t, res, 4, 80)
	t.Logf("summary: %+v", res.Summary)
}
