package netem

import (
	"math"
	"testing"
	"time"
)

func TestParseParams(t *testing.T) {
	tests := []struct {
		in   string
		want Params
		err  bool
	}{
		{in: "", want: Params{}},
		{in: "none", want: Params{}},
		{in: "delay 40ms", want: Params{Delay: 40 * time.Millisecond}},
		{in: "delay 40ms 15ms distribution pareto", want: Params{Delay: 40 * time.Millisecond, Jitter: 15 * time.Millisecond, Dist: Pareto}},
		{in: "loss 1.5% duplicate 0.1%", want: Params{Loss: 0.015, Duplicate: 0.001}},
		{in: "rate 10mbit limit 50", want: Params{Rate: 10_000_000, Limit: 50}},
		{in: "rate 0.1mbit", want: Params{Rate: 100_000}},
		{in: "rate 1mbps", want: Params{Rate: 8_000_000}},
		{in: "loss gemodel 1% 30% 70% 0.1%", want: Params{GE: &GilbertElliott{P: 0.01, R: 0.3, LossBad: 0.3, LossGood: 0.999}}},
		{in: "loss 120%", err: true},
		{in: "delay fast", err: true},
		{in: "rate 10", err: true},
		{in: "wobble 3", err: true},
		{in: "distribution cauchy", err: true},
	}
	for _, tc := range tests {
		got, err := ParseParams(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("ParseParams(%q) error = %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if tc.err {
			continue
		}
		if got.GE != nil || tc.want.GE != nil {
			if got.GE == nil || tc.want.GE == nil || math.Abs(got.GE.LossGood-tc.want.GE.LossGood) > 1e-9 ||
				math.Abs(got.GE.LossBad-tc.want.GE.LossBad) > 1e-9 || got.GE.P != tc.want.GE.P || got.GE.R != tc.want.GE.R {
				t.Errorf("ParseParams(%q).GE = %+v, want %+v", tc.in, got.GE, tc.want.GE)
			}
			got.GE, tc.want.GE = nil, nil
		}
		if got != tc.want {
			t.Errorf("ParseParams(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		// String must round-trip.
		if again, err := ParseParams(got.String()); err != nil || again.String() != got.String() {
			t.Errorf("round trip of %q: %q, %v", tc.in, got.String(), err)
		}
	}
}

func TestParseScript(t *testing.T) {
	s, err := ParseScript("# ramp down\nat 5s rate 1mbit delay 100ms\n\nat 2s a->b loss 5%\nat 9s b->a none\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 3 || s[0].At != 2*time.Second || !s[0].AB || s[0].BA || s[0].Params.Loss != 0.05 {
		t.Fatalf("step 0 = %+v", s[0])
	}
	if s[1].Params.Rate != 1_000_000 || !s[1].AB || !s[1].BA || s[2].AB || !s[2].BA {
		t.Fatalf("steps = %+v", s)
	}
	for _, bad := range []string{"rate 1mbit", "at soon delay 1ms", "at 1s delay"} {
		if _, err := ParseScript(bad); err == nil {
			t.Errorf("ParseScript(%q) succeeded", bad)
		}
	}
}

func TestProfiles(t *testing.T) {
	for _, n := range ProfileNames() {
		if _, err := LookupProfile(n); err != nil {
			t.Error(err)
		}
	}
	m, _ := LookupProfile("mobile")
	if m.Spec.AB.Jitter != 15*time.Millisecond || m.Spec.BA.Jitter != 0 || m.Spec.BA.Delay != 40*time.Millisecond {
		t.Errorf("mobile = %s", m.Spec)
	}
	if _, err := LookupProfile("wt-bw-0.1mbit"); err != nil {
		t.Error(err)
	}
}

func meanStd(xs []float64) (float64, float64) {
	var s, s2 float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	for _, x := range xs {
		s2 += (x - m) * (x - m)
	}
	return m, math.Sqrt(s2 / float64(len(xs)))
}

func TestDelayDistributions(t *testing.T) {
	const n = 200_000
	tests := []struct {
		p        Params
		wantMean float64 // ms
		wantStd  float64 // ms
		lo, hi   float64 // bounds every sample must respect, ms
	}{
		{Params{Delay: 40 * time.Millisecond}, 40, 0, 40, 40},
		{Params{Delay: 40 * time.Millisecond, Jitter: 10 * time.Millisecond}, 40, 10, 0, 1e9},
		{Params{Delay: 40 * time.Millisecond, Jitter: 10 * time.Millisecond, Dist: Uniform}, 40, 10 / math.Sqrt(3), 30, 50},
		// Pareto's variance converges slowly (shape 3): looser check below.
		{Params{Delay: 100 * time.Millisecond, Jitter: 10 * time.Millisecond, Dist: Pareto}, 100, 10, 100 - 5.78, 1e9},
	}
	for _, tc := range tests {
		l := newLink(42, 0)
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(l.delay(&tc.p)) / 1e6
			if xs[i] < tc.lo-1e-6 || xs[i] > tc.hi+1e-6 {
				t.Fatalf("%s: sample %.3f ms outside [%v, %v]", tc.p, xs[i], tc.lo, tc.hi)
			}
		}
		m, s := meanStd(xs)
		tolStd := 0.02
		if tc.p.Dist == Pareto {
			tolStd = 0.15
		}
		if math.Abs(m-tc.wantMean) > 0.01*tc.wantMean || math.Abs(s-tc.wantStd) > tolStd*tc.wantStd+1e-9 {
			t.Errorf("%s: mean %.3f ms std %.3f ms, want %.3f / %.3f", tc.p, m, s, tc.wantMean, tc.wantStd)
		}
	}
}

func TestLoss(t *testing.T) {
	const n = 2_000_000
	tests := []struct {
		name      string
		p         Params
		wantLoss  float64
		wantBurst float64 // mean length of loss runs; 0 = do not check
	}{
		{"none", Params{}, 0, 0},
		{"random 5%", Params{Loss: 0.05}, 0.05, 1 / 0.95},
		{"random 20%", Params{Loss: 0.20}, 0.20, 1 / 0.80},
		// Stationary bad-state share P/(P+R) = 1/31; bursts last 1/R packets.
		{"gemodel", Params{GE: &GilbertElliott{P: 0.01, R: 0.3, LossBad: 1}}, 0.01 / 0.31, 1 / 0.3},
		{"gemodel lossy good", Params{GE: &GilbertElliott{P: 0.02, R: 0.5, LossBad: 0.5, LossGood: 0.01}}, (0.02*0.5 + 0.5*0.01) / 0.52, 0},
	}
	for _, tc := range tests {
		l := newLink(7, 0)
		lost, runs, inRun := 0, 0, false
		for i := 0; i < n; i++ {
			if l.lose(&tc.p) {
				lost++
				if !inRun {
					runs++
				}
				inRun = true
			} else {
				inRun = false
			}
		}
		got := float64(lost) / n
		if math.Abs(got-tc.wantLoss) > 0.03*tc.wantLoss+1e-9 {
			t.Errorf("%s: loss %.4f, want %.4f", tc.name, got, tc.wantLoss)
		}
		if tc.wantBurst > 0 {
			burst := float64(lost) / float64(runs)
			if math.Abs(burst-tc.wantBurst) > 0.03*tc.wantBurst {
				t.Errorf("%s: mean burst %.3f, want %.3f", tc.name, burst, tc.wantBurst)
			}
		}
	}
}

// drive feeds packets of size bytes every gap ns for count packets and
// returns the delivered packets in delivery order (as send indices) with
// their delivery times.
func drive(l *link, p Params, count, size int, gap int64) (order []int, at []int64) {
	idx := map[*packet][]int{}
	now := int64(0)
	deliver := func(until int64) {
		for {
			due, ok := l.nextDue()
			if !ok || due > until {
				return
			}
			pkt := l.popDue(due)
			order = append(order, int(pkt.buf[0])|int(pkt.buf[1])<<8|int(pkt.buf[2])<<16)
			at = append(at, due)
			l.put(pkt)
		}
	}
	for i := 0; i < count; i++ {
		deliver(now)
		pkt := l.get()
		pkt.n = size
		pkt.buf[0], pkt.buf[1], pkt.buf[2] = byte(i), byte(i>>8), byte(i>>16)
		l.enqueue(pkt, now, &p)
		now += gap
	}
	_ = idx
	deliver(math.MaxInt64)
	return order, at
}

func TestRateQueue(t *testing.T) {
	tests := []struct {
		name     string
		p        Params
		gap      int64 // ns between 1000-byte arrivals
		wantRate float64
		wantDrop bool
	}{
		// 1000 bytes every 1 ms offered = 8 Mbit/s.
		{"under the rate", Params{Rate: 10_000_000}, 1e6, 8e6, false},
		{"twice the rate, small queue", Params{Rate: 4_000_000, Limit: 20}, 1e6, 4e6, true},
		{"twice the rate, delay after the queue", Params{Rate: 4_000_000, Limit: 20, Delay: 50 * time.Millisecond}, 1e6, 4e6, true},
	}
	for _, tc := range tests {
		l := newLink(1, 0)
		order, at := drive(l, tc.p, 5000, 1000, tc.gap)
		// Throughput over the second half, when the queue is in steady state.
		half := len(at) / 2
		rate := float64(len(at)-half-1) * 8000 / (float64(at[len(at)-1]-at[half]) / 1e9)
		if math.Abs(rate-tc.wantRate) > 0.01*tc.wantRate {
			t.Errorf("%s: rate %.0f bit/s, want %.0f", tc.name, rate, tc.wantRate)
		}
		if got := l.stats.QueueDrop > 0; got != tc.wantDrop {
			t.Errorf("%s: queue drops %d, want drops %v", tc.name, l.stats.QueueDrop, tc.wantDrop)
		}
		for i := 1; i < len(order); i++ {
			if order[i] < order[i-1] {
				t.Fatalf("%s: reordered without jitter at %d", tc.name, i)
			}
		}
		if l.stats.In != 5000 || l.stats.QueueDrop+uint64(len(order)) != 5000 {
			t.Errorf("%s: stats %+v, delivered %d", tc.name, l.stats, len(order))
		}
		// The queue bounds the sojourn: at most Limit packets ahead.
		if tc.p.Limit > 0 {
			maxWait := int64(tc.p.Limit+1) * 8000 * 1e9 / tc.p.Rate
			for i, a := range at {
				sent := int64(order[i]) * tc.gap
				if w := a - sent - int64(tc.p.Delay); w > maxWait {
					t.Fatalf("%s: packet %d waited %v > %v", tc.name, order[i], time.Duration(w), time.Duration(maxWait))
				}
			}
		}
	}
}

func TestJitterReordersLikeNetem(t *testing.T) {
	tests := []struct {
		p           Params
		wantReorder bool
	}{
		{Params{Delay: 40 * time.Millisecond}, false},
		{Params{Delay: 40 * time.Millisecond, Jitter: 15 * time.Millisecond}, true},
	}
	for _, tc := range tests {
		order, at := drive(newLink(3, 0), tc.p, 2000, 1200, 1e6)
		reordered := 0
		for i := 1; i < len(order); i++ {
			if order[i] < order[i-1] {
				reordered++
			}
			if at[i] < at[i-1] {
				t.Fatalf("%s: delivered out of due order", tc.p)
			}
		}
		if (reordered > 0) != tc.wantReorder {
			t.Errorf("%s: %d reorderings, want reordering %v", tc.p, reordered, tc.wantReorder)
		}
	}
}

func TestDuplicate(t *testing.T) {
	l := newLink(5, 0)
	order, _ := drive(l, Params{Duplicate: 0.1}, 20000, 100, 1e5)
	got := float64(len(order)-20000) / 20000
	if math.Abs(got-0.1) > 0.005 || l.stats.Dups != uint64(len(order)-20000) {
		t.Errorf("duplicated %.4f (stats %d), want 0.1", got, l.stats.Dups)
	}
}

func TestPoolBound(t *testing.T) {
	l := newLink(1, 300)
	var held []*packet
	for p := l.get(); p != nil; p = l.get() {
		held = append(held, p)
	}
	if len(held) != 300 {
		t.Fatalf("pool gave %d buffers, want 300", len(held))
	}
}

func TestPacketPathDoesNotAllocate(t *testing.T) {
	l := newLink(9, 4096)
	p := Params{Delay: 10 * time.Millisecond, Jitter: 3 * time.Millisecond, Loss: 0.01, Duplicate: 0.01, Rate: 100_000_000, Limit: 500}
	now := int64(0)
	step := func() {
		pkt := l.get()
		pkt.n = 1200
		l.enqueue(pkt, now, &p)
		for q := l.popDue(now); q != nil; q = l.popDue(now) {
			l.put(q)
		}
		now += 100_000
	}
	for range 5000 { // warm up: slabs, heap and ring reach their size
		step()
	}
	if a := testing.AllocsPerRun(10000, step); a != 0 {
		t.Errorf("%.2f allocations per packet, want 0", a)
	}
}

// BenchmarkLink is the model's cost per packet (enqueue and delivery) with
// every impairment on; the TUN read and write come on top.
func BenchmarkLink(b *testing.B) {
	l := newLink(9, 1<<15)
	p := Params{Delay: 20 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.01, Duplicate: 0.01, Rate: 1_000_000_000, Limit: 1000}
	now := int64(0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		pkt := l.get()
		if pkt == nil {
			b.Fatal("pool exhausted")
		}
		pkt.n = 1200
		l.enqueue(pkt, now, &p)
		for q := l.popDue(now); q != nil; q = l.popDue(now) {
			l.put(q)
		}
		now += 10_000 // 100k packets/s
	}
}
