package sfu

import (
	"testing"
	"time"
)

// A speaker change's keyframe request is sent once; receivers asking meanwhile
// are served by it; it is repeated only when no keyframe came within the
// publisher's round trip plus the margin.
func TestSwitchKeyframeRepeatsOnlyWithoutKeyframe(t *testing.T) {
	pub, _ := testPub(3, false)
	l := pub.layer(0)
	src := l.src.(*nopSource)
	pub.switchKeyframe()
	for _, d := range pub.Subscribers() {
		d.retryKeyframe() // receivers that would ask on their own
		l.requestKeyframe()
	}
	if n := src.keyframes.Load(); n != 1 {
		t.Fatalf("%d keyframe requests for one speaker change", n)
	}
	// No keyframe comes (the publisher still sends): asked again.
	deadline := time.Now().Add(5 * time.Second)
	for src.keyframes.Load() < 2 && time.Now().Before(deadline) {
		l.lastRecv.Store(now())
		time.Sleep(10 * time.Millisecond)
	}
	if n := src.keyframes.Load(); n != 2 {
		t.Fatalf("no repeat without a keyframe: %d requests", n)
	}
	// The keyframe arrives: no more requests.
	l.lastKey.Store(now())
	time.Sleep(keyframeMargin + defaultPublisRTT + 300*time.Millisecond)
	if n := src.keyframes.Load(); n != 2 {
		t.Fatalf("asked again after the keyframe arrived: %d requests", n)
	}
}
