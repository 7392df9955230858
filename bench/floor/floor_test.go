package floor

import (
	"testing"
	"time"
)

// TestSendTo: the measurement runs, the drainer reads what was sent, and the
// figure is in the range any machine gives (well above zero: a system call;
// well below a millisecond).
func TestSendTo(t *testing.T) {
	r, err := SendTo(20_000)
	if err != nil {
		t.Fatal(err)
	}
	if r.CPUPerPacket < 200*time.Nanosecond || r.CPUPerPacket > time.Millisecond {
		t.Fatalf("%v CPU per packet", r.CPUPerPacket)
	}
	if r.Delivered < 0.2 {
		t.Fatalf("%.0f%% delivered", 100*r.Delivered)
	}
}

// TestReceive: every packet is read and decrypted, at a plausible cost.
func TestReceive(t *testing.T) {
	r, err := Receive(5_000)
	if err != nil {
		t.Fatal(err)
	}
	if r.CPUPerPacket < 100*time.Nanosecond || r.CPUPerPacket > time.Millisecond {
		t.Fatalf("%v CPU per packet", r.CPUPerPacket)
	}
}
