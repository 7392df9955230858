package netem

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"net/netip"
	"os"
	"sort"
	"testing"
	"time"
)

func newTestLab(t *testing.T, spec Spec) *Lab {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	l, err := NewLab(Options{Spec: spec, Seed: 1})
	if err != nil {
		t.Skipf("skipping: cannot create network namespaces here: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
		if _, err := os.Stat("/run/netns/" + l.A.NS); err == nil {
			t.Errorf("namespace %s left behind", l.A.NS)
		}
	})
	return l
}

// udpPair opens a sender in A and a receiver in B.
func udpPair(t *testing.T, l *Lab) (tx, rx *net.UDPConn) {
	t.Helper()
	if err := l.B.Do(func() (err error) {
		rx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(l.B.Addr, 9000)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.A.Do(func() (err error) {
		tx, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(l.B.Addr, 9000)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rx.SetReadBuffer(4 << 20)
	t.Cleanup(func() { tx.Close(); rx.Close() })
	return tx, rx
}

type arrival struct {
	seq   int
	delay time.Duration
	at    time.Duration
	size  int
}

// probe sends count datagrams of size bytes, one every gap, stamped with
// the send time, and collects them at the receiver until quiet.
func probe(t *testing.T, l *Lab, count, size int, gap time.Duration) []arrival {
	tx, rx := udpPair(t, l)
	base := time.Now()
	done := make(chan []arrival)
	go func() {
		var got []arrival
		buf := make([]byte, 2048)
		for {
			rx.SetReadDeadline(time.Now().Add(time.Second))
			n, err := rx.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			} else if err != nil {
				break
			}
			now := time.Since(base)
			sent := time.Duration(binary.BigEndian.Uint64(buf[8:]))
			got = append(got, arrival{seq: int(binary.BigEndian.Uint64(buf)), delay: now - sent, at: now, size: n})
		}
		done <- got
	}()
	msg := make([]byte, size)
	next := time.Now()
	for i := 0; i < count; i++ {
		binary.BigEndian.PutUint64(msg, uint64(i))
		binary.BigEndian.PutUint64(msg[8:], uint64(time.Since(base)))
		if _, err := tx.Write(msg); err != nil {
			t.Fatal(err)
		}
		if gap > 0 {
			next = next.Add(gap)
			time.Sleep(time.Until(next))
		}
	}
	return <-done
}

func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want }

func TestLabDelayAndJitter(t *testing.T) {
	tests := []struct {
		p Params
	}{
		{Params{Delay: 40 * time.Millisecond}},
		{Params{Delay: 40 * time.Millisecond, Jitter: 15 * time.Millisecond}},
		{Params{Delay: 100 * time.Millisecond, Jitter: 10 * time.Millisecond, Dist: Uniform}},
	}
	for _, tc := range tests {
		t.Run(tc.p.String(), func(t *testing.T) {
			l := newTestLab(t, Spec{AB: tc.p})
			got := probe(t, l, 2000, 200, time.Millisecond)
			if len(got) != 2000 {
				t.Fatalf("received %d of 2000", len(got))
			}
			ds := make([]float64, len(got))
			reordered := 0
			for i, a := range got {
				ds[i] = float64(a.delay) / 1e6
				if i > 0 && a.seq < got[i-1].seq {
					reordered++
				}
			}
			m, s := meanStd(ds)
			sorted := append([]float64(nil), ds...)
			sort.Float64s(sorted)
			t.Logf("p1 %.3f p50 %.3f p99 %.3f max %.3f", sorted[len(ds)/100], sorted[len(ds)/2], sorted[len(ds)*99/100], sorted[len(ds)-1])
			wantStd := float64(tc.p.Jitter) / 1e6
			if tc.p.Dist == Uniform {
				wantStd /= math.Sqrt(3)
			}
			t.Logf("%s: mean %.3f ms, std %.3f ms, %d reordered", tc.p, m, s, reordered)
			// The stack and the UDP sockets add a few tens of µs on top.
			if !within(m, float64(tc.p.Delay)/1e6, 0.02) {
				t.Errorf("mean delay %.3f ms, want %v ±2%%", m, tc.p.Delay)
			}
			if wantStd > 0 && !within(s, wantStd, 0.05) {
				t.Errorf("jitter (std) %.3f ms, want %.3f ±5%%", s, wantStd)
			}
			// Without jitter the spread is the host's scheduling noise:
			// robust percentiles, since a rare preemption is not jitter.
			if spread := sorted[len(ds)*9/10] - sorted[len(ds)/10]; wantStd == 0 && spread > 0.5 {
				t.Errorf("p90-p10 spread %.3f ms without jitter configured", spread)
			}
			if (reordered > 0) != (tc.p.Jitter > 0) {
				t.Errorf("%d reordered packets, want reordering only with jitter", reordered)
			}
		})
	}
}

func TestLabLoss(t *testing.T) {
	tests := []Params{
		{Loss: 0.10},
		{GE: &GilbertElliott{P: 0.02, R: 0.25, LossBad: 1}},
	}
	for _, p := range tests {
		t.Run(p.String(), func(t *testing.T) {
			l := newTestLab(t, Spec{AB: p})
			const n = 100000
			got := probeBursts(t, l, n, 100, 200*time.Microsecond, 10)
			ab, _ := l.Stats()
			loss := float64(ab.Lost) / float64(ab.In)
			want := p.Loss
			if p.GE != nil {
				want = p.GE.P / (p.GE.P + p.GE.R)
			}
			t.Logf("%s: loss %.4f (want %.4f), stats %+v", p, loss, want, ab)
			// Binomial (or Markov) sampling error at n=20000 is about 3%
			// relative; the seed is fixed, so this is a check of the
			// path, not of luck.
			if !within(loss, want, 0.08) {
				t.Errorf("loss %.4f, want %.4f ±8%%", loss, want)
			}
			// A stray packet of the namespace's own (none expected, but
			// the kernel may send one) is no error of the emulator.
			if d := int(ab.Out) - len(got); d < 0 || d > 2 {
				t.Errorf("emulator delivered %d, receiver got %d", ab.Out, len(got))
			}
			if ab.In < n*99/100 {
				t.Errorf("emulator saw only %d of %d packets", ab.In, n)
			}
		})
	}
}

func TestLabRate(t *testing.T) {
	for _, rate := range []int64{1_000_000, 10_000_000, 100_000_000} {
		// A 200 ms queue: deep enough that a hiccup of the sender does not
		// drain it, shallow enough to fill within the run.
		p := Params{Rate: rate, Limit: int(rate / 5 / 9600)}
		t.Run(p.String(), func(t *testing.T) {
			l := newTestLab(t, Spec{AB: p})
			// Offer about twice the rate for about 2 s.
			const size = 1172 // + 28 bytes of IP/UDP header = 1200 on the wire
			gap := time.Duration(float64(1200*8) / float64(2*rate) * 1e9)
			count := int(2 * time.Second / gap)
			var got []arrival
			if gap < 50*time.Microsecond {
				// Too fine to pace with sleeps: send in bursts of 10.
				got = probeBursts(t, l, count, size, gap*10, 10)
			} else {
				got = probe(t, l, count, size, gap)
			}
			if len(got) < 100 {
				t.Fatalf("received only %d packets", len(got))
			}
			// Rate over the middle of the flow: from packet 10% to 90%.
			a, b := got[len(got)/10], got[len(got)*9/10]
			bits := float64((len(got)*9/10-len(got)/10)*1200*8)
			measured := bits / (b.at - a.at).Seconds()
			ab, _ := l.Stats()
			t.Logf("%s: %.3f Mbit/s, %d queue drops of %d, delivered %d, received %d", p, measured/1e6, ab.QueueDrop, ab.In, ab.Out, len(got))
			if !within(measured, float64(rate), 0.03) {
				t.Errorf("rate %.3f Mbit/s, want %.3f ±3%%", measured/1e6, float64(rate)/1e6)
			}
			if ab.QueueDrop == 0 {
				t.Errorf("no tail drops while offering twice the rate")
			}
			// Offered twice the rate, the queue stands full: the median
			// sojourn is Limit packets at the rate (the sending host's own
			// queue may add a little at 100 Mbit/s).
			fullQ := time.Duration(float64(p.Limit) * 1200 * 8 / float64(rate) * 1e9)
			ds := make([]float64, 0, len(got))
			for _, a := range got[len(got)/2:] {
				ds = append(ds, float64(a.delay))
			}
			sort.Float64s(ds)
			if p50 := time.Duration(ds[len(ds)/2]); p50 < fullQ*9/10 || p50 > fullQ*11/10+time.Millisecond {
				t.Errorf("median delay %v, want a full queue's %v", p50, fullQ)
			}
		})
	}
}

func probeBursts(t *testing.T, l *Lab, count, size int, gap time.Duration, burst int) []arrival {
	// Same as probe, but several datagrams per pacing step.
	tx, rx := udpPair(t, l)
	base := time.Now()
	done := make(chan []arrival)
	go func() {
		var got []arrival
		buf := make([]byte, 2048)
		for {
			rx.SetReadDeadline(time.Now().Add(time.Second))
			n, err := rx.Read(buf)
			if err != nil {
				break
			}
			now := time.Since(base)
			got = append(got, arrival{seq: int(binary.BigEndian.Uint64(buf)), delay: now - time.Duration(binary.BigEndian.Uint64(buf[8:])), at: now, size: n})
		}
		done <- got
	}()
	msg := make([]byte, size)
	next := time.Now()
	for i := 0; i < count; i++ {
		binary.BigEndian.PutUint64(msg, uint64(i))
		binary.BigEndian.PutUint64(msg[8:], uint64(time.Since(base)))
		tx.Write(msg)
		if (i+1)%burst == 0 {
			next = next.Add(gap)
			time.Sleep(time.Until(next))
		}
	}
	return <-done
}

func TestLabScriptAndCleanup(t *testing.T) {
	l := newTestLab(t, Spec{})
	s, err := ParseScript("at 100ms a->b delay 30ms\nat 200ms rate 5mbit")
	if err != nil {
		t.Fatal(err)
	}
	steps := make(chan Step, 2)
	l.Play(s, func(st Step) { steps <- st })
	<-steps
	<-steps
	sp := l.Spec()
	if sp.AB.Rate != 5_000_000 || sp.AB.Delay != 0 || sp.BA.Rate != 5_000_000 {
		t.Fatalf("after script: %s", sp)
	}
	ls, err := List()
	if err != nil {
		t.Fatal(err)
	}
	mine := 0
	for _, lo := range ls {
		if lo.Lab == l.Name {
			mine++
			if !lo.Alive || lo.Owner != os.Getpid() {
				t.Errorf("lab %s listed as %+v", l.Name, lo)
			}
		}
	}
	if mine != 2 {
		t.Errorf("List found %d namespaces of %s, want 2", mine, l.Name)
	}
	// Cleanup of orphans must leave a live lab alone.
	Cleanup(false)
	if _, err := os.Stat("/run/netns/" + l.A.NS); err != nil {
		t.Errorf("Cleanup removed a live lab: %v", err)
	}
}
