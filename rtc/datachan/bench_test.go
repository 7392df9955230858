package datachan

import (
	"testing"
	"time"
)

// BenchmarkTransfer: 64 KiB messages over an in-memory link (no DTLS, no
// socket), so the figure is the association's own cost, sender and
// receiver together, per byte.
func BenchmarkTransfer(b *testing.B) {
	la, lb := newLinks()
	x := New(Config{Conn: la, Client: true})
	y := New(Config{Conn: lb})
	defer func() { x.Close(); y.Close(); la.Close() }()
	<-x.Ready()
	<-y.Ready()
	c, err := x.Open("bulk", Options{})
	if err != nil {
		b.Fatal(err)
	}
	var r *Channel
	select {
	case r = <-y.accept:
	case <-time.After(5 * time.Second):
		b.Fatal("no channel")
	}
	const size = 64 << 10
	done := make(chan struct{})
	go func() {
		buf := make([]byte, size)
		for i := 0; i < b.N; i++ {
			if _, err := r.Read(buf); err != nil {
				break
			}
		}
		close(done)
	}()
	low := make(chan struct{}, 1)
	c.OnBufferedAmountLow(2<<20, func() {
		select {
		case low <- struct{}{}:
		default:
		}
	})
	msg := make([]byte, size)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for c.BufferedAmount() > 4<<20 {
			<-low
		}
		if err := c.Send(msg, false); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}
