package soak_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/bench/soak/soak"
	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/test/hostile"
)

func TestMain(m *testing.M) { hostile.Main(m) }

// TestSoak is 90 seconds of bench/soak's churn (participants with video and
// data, WHEP viewers, a camera whose pusher stops and restarts) against the
// real binary: over the last minute nothing may grow by more than 5% (or a
// few units of churn's own noise), the anchor's video never stops, and the
// churn itself succeeds.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("90 seconds of churn")
	}
	const clipDir = "../../../loadtest/testdata"
	clip, err := emulator.LoadClip(clipDir)
	if err != nil {
		t.Fatal(err)
	}
	camPort, err := soak.FreeUDPPair()
	if err != nil {
		t.Fatal(err)
	}
	sprop := base64.StdEncoding.EncodeToString(clip.SPS) + "," + base64.StdEncoding.EncodeToString(clip.PPS)
	s := hostile.Start(t, hostile.Options{YAML: fmt.Sprintf("cameras:\n  - id: soak\n    rtp:\n      port: %d\n      sprop_parameter_sets: %s\n", camPort, sprop)})
	samples, err := soak.Run(context.Background(), soak.Config{
		URL: s.URL, PID: s.PID(), Keys: s.Keys, APIKey: s.APIKey,
		Camera: "soak", CameraPort: camPort, Clip: clipDir,
		Duration: 90 * time.Second, Every: 2 * time.Second,
		CameraOn: 20 * time.Second, CameraOff: 7 * time.Second,
		Logf: t.Logf,
	})
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	s.Healthy(t)
	last := samples[len(samples)-1]
	if last.Joins < 20 || last.WHEPSessions < 10 || last.CameraRestarts < 2 || last.DataIn < 100 {
		t.Errorf("too little churn to judge: %+v", last)
	}
	if last.Failures > 2 {
		t.Errorf("%d joins, WHEP sessions or camera views failed", last.Failures)
	}
	for i := 1; i < len(samples); i++ {
		if samples[i].AnchorPackets <= samples[i-1].AnchorPackets {
			t.Errorf("the anchor's video stopped between %s and %s", samples[i-1].At, samples[i].At)
		}
	}
	// The churn's population varies by a participant or two: allow that much
	// besides the 5%.
	slack := map[string]float64{"rss": 8 << 20, "goroutines": 50, "open_files": 8}
	for _, g := range soak.Growths(samples, time.Minute) {
		allowed := max(0.05*g.First, slack[g.Name])
		t.Logf("%s over the last minute: %.0f -> %.0f (%+.1f%%, slope × span %+.1f%%)", g.Name, g.First, g.Last, 100*g.Rel, 100*g.Slope)
		if g.Last-g.First > allowed {
			t.Errorf("%s grew from %.0f to %.0f over the last minute (allowed: %.0f)", g.Name, g.First, g.Last, allowed)
		}
	}
}
