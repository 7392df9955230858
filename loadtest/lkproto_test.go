package loadtest

import (
	"math/rand/v2"
	"testing"
)

// TestParseLKResponse decodes a join response (nested participant, varints)
// and a trickle, rejects a truncated message, and survives garbage.
func TestParseLKResponse(t *testing.T) {
	part := lkString(lkString(nil, 1, "PA_abc"), 2, "viewer0001")
	join := lkBytes(nil, 2, part)
	join = lkVarint(lkVarint(lkVarint(join, 6, 1), 10, 15), 11, 5)
	msg := lkBytes(nil, lkResJoin, join)
	r, err := parseLKResponse(msg)
	if err != nil {
		t.Fatal(err)
	}
	if r.kind != lkResJoin || r.sid != "PA_abc" || !r.subscriberPrimary || r.pingTimeout != 15 || r.pingInterval != 5 {
		t.Errorf("join: %+v", r)
	}
	if _, err := parseLKResponse(msg[:len(msg)-1]); err == nil {
		t.Error("a truncated join decoded without error")
	}
	r, err = parseLKResponse(lkBytes(nil, lkResTrickle, lkTrickle(`{"candidate":"candidate:1 1 udp 1 127.0.0.1 5000 typ host"}`, lkTargetSubscriber)))
	if err != nil || r.target != lkTargetSubscriber || r.candidate == "" {
		t.Errorf("trickle: %+v %v", r, err)
	}
	if _, err := parseLKResponse(nil); err == nil {
		t.Error("an empty response decoded without error")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, rng.IntN(64))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if rng.IntN(2) == 0 && len(b) > 0 {
			b[0] = byte(rng.IntN(24)+1)<<3 | 2 // a length-delimited top-level field
		}
		_, _ = parseLKResponse(b)
	}
}
