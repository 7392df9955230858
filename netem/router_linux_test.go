package netem

import (
	"encoding/binary"
	"runtime"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCoalescing forwards evenly paced packets, one every 25 µs as a 450
// Mbit/s flow of 1.4 KB datagrams, through a direction with 40 ms of delay
// over socket pairs in place of the TUNs: the forwarding thread must wake
// about once per coalescing tick (100 µs here), not once per packet's
// arrival and once per its due time, and still deliver each packet within
// half a tick of its due time on average.
func TestCoalescing(t *testing.T) {
	pair := func() [2]int {
		fd, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Skipf("socketpair: %v", err)
		}
		t.Cleanup(func() { unix.Close(fd[0]); unix.Close(fd[1]) })
		for _, f := range fd {
			unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_SNDBUF, 8<<20)
			unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		}
		return [2]int{fd[0], fd[1]}
	}
	in, out := pair(), pair()
	base := time.Now()
	p := Params{Delay: 40 * time.Millisecond}
	d, err := newDirection("test", in[1], out[0], p, 1, 0, base)
	if err != nil {
		t.Fatal(err)
	}
	go d.run()
	defer d.close()

	const n, gap = 16000, 25 * time.Microsecond
	sent := make([]int64, n)
	go func() {
		// Paced by spinning: a sleep cannot keep 25 µs.
		runtime.LockOSThread()
		msg := make([]byte, 1400)
		start := time.Now()
		for i := 0; i < n; i++ {
			for time.Since(start) < time.Duration(i)*gap {
			}
			sent[i] = int64(time.Since(base))
			binary.BigEndian.PutUint32(msg, uint32(i))
			unix.Write(in[0], msg)
		}
	}()
	var delays []float64
	buf := make([]byte, 2048)
	fds := []unix.PollFd{{Fd: int32(out[1]), Events: unix.POLLIN}}
	deadline := time.Now().Add(5 * time.Second)
	for len(delays) < n && time.Now().Before(deadline) {
		m, err := unix.Read(out[1], buf)
		if err != nil {
			unix.Poll(fds, 100)
			continue
		}
		now := int64(time.Since(base))
		if m >= 4 {
			delays = append(delays, float64(now-sent[binary.BigEndian.Uint32(buf)])/1e6)
		}
	}
	st := d.snapshot()
	// A host so busy that it woke the emulator itself late by a millisecond
	// on average can judge neither the median delay nor a 5 s deadline.
	late := time.Duration(st.LateNs / max(st.Out, 1))
	if len(delays) < n*9/10 {
		if late > time.Millisecond && st.QueueDrop+st.PoolDrop == 0 {
			t.Skipf("received %d of %d in 5 s, none dropped: the host woke the emulator %v late on average", len(delays), n, late)
		}
		t.Fatalf("received %d of %d (stats %+v)", len(delays), n, st)
	}
	sort.Float64s(delays)
	p50 := delays[len(delays)/2]
	span := time.Duration(n) * gap
	t.Logf("%d packets in %v: %d wakes (%.2f per packet, %.0f a second); delay p1 %.3f p50 %.3f p99 %.3f ms; late by %v on average",
		len(delays), span, st.Wakes, float64(st.Wakes)/float64(n), float64(st.Wakes)/(span+p.Delay).Seconds(),
		delays[len(delays)/100], p50, delays[len(delays)*99/100], time.Duration(st.LateNs/max(st.Out, 1)))
	// Woken by each arrival and each due time, the loop made 23000 a
	// second here (0.63 per packet: some arrivals come while it works);
	// once per 100 µs tick is 10000 a second, and the idle wakes at the
	// start and the end add a few.
	if perSec := float64(st.Wakes) / (span + p.Delay).Seconds(); perSec > 14000 {
		t.Errorf("%.0f wakes a second for %d packets a second, want about one per %v tick", perSec, int(time.Second/gap), maxTick)
	}
	// The host's scheduling adds to the receiver's side.
	if late > time.Millisecond {
		t.Skipf("the host woke the emulator %v late on average: too busy to judge the median delay", late)
	}
	// The receiver shares the cores with the spinning sender and the
	// emulator: while it waits for a core, every packet reads late. The
	// fastest percent is the emulator's own delay: dated up to half a tick
	// early (and by a batch's read), released up to half a tick early. The
	// median only has to be near it.
	want, p1 := float64(p.Delay)/1e6, delays[len(delays)/100]
	tick := float64(maxTick) / 1e6
	if p1 < want-tick-0.05 || p1 > want+0.5 {
		t.Errorf("fastest percent delayed %.3f ms, want %.3f (less at most a tick)", p1, want)
	}
	if p50 < want-tick/2 || p50 > want+5 {
		t.Errorf("median delay %.3f ms, want %.3f (and the receiver's scheduling)", p50, want)
	}
}
