package lean

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestPacketConnQueue: records come out in order and whole, a full queue
// drops instead of blocking, the read deadline interrupts a blocked read with
// a timeout, and Shutdown ends reads with net.ErrClosed once the queue is
// empty.
func TestPacketConnQueue(t *testing.T) {
	remote := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}
	c := NewPacketConnSize(func(b []byte) (int, error) { return len(b), nil }, nil, remote, 3)
	for i := range 3 {
		if !c.Push([]byte{byte(i), 1, 2}) {
			t.Fatalf("record %d dropped", i)
		}
	}
	if c.Push([]byte{9}) {
		t.Fatal("a fourth record fit a queue of three")
	}
	buf := make([]byte, 64)
	for i := range 3 {
		n, addr, err := c.ReadFrom(buf)
		if err != nil || n != 3 || buf[0] != byte(i) || addr != remote {
			t.Fatalf("read %d: %d %v %v %v", i, n, buf[:n], addr, err)
		}
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	start := time.Now()
	_, _, err := c.ReadFrom(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || time.Since(start) < 15*time.Millisecond {
		t.Fatalf("deadline: %v after %v", err, time.Since(start))
	}
	c.SetReadDeadline(time.Time{})
	c.Push([]byte{7})
	c.Shutdown()
	if n, _, err := c.ReadFrom(buf); err != nil || n != 1 {
		t.Fatalf("queued record after shutdown: %d %v", n, err)
	}
	if _, _, err := c.ReadFrom(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after shutdown: %v", err)
	}
}
