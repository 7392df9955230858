package sfu

import (
	"sync"
	"testing"
	"time"

	"github.com/pion/rtcp"
)

type srRecorder struct {
	mu  sync.Mutex
	srs []rtcp.SenderReport
}

func (w *srRecorder) WriteRTCP(pkts []rtcp.Packet) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range pkts {
		if sr, ok := p.(*rtcp.SenderReport); ok {
			w.srs = append(w.srs, *sr)
		}
	}
	return nil
}

func (w *srRecorder) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.srs)
}

// The reporter sends each subscriber's sender reports once a second, forgets
// a participant once it has closed, and stops when it has none.
func TestReporterSendsSenderReportsUntilClose(t *testing.T) {
	pub, _ := testPub(1, false)
	d := pub.Subscribers()[0]
	var pkt Packet
	ms := int64(time.Millisecond)
	for i := uint16(0); i < 3; i++ {
		if !pub.layer(0).parse(&pkt, vp8Packet(100+i, 3000*uint32(i), i == 0, 0)) {
			t.Fatal("parse")
		}
		pkt.Arrival = int64(i) * 33 * ms
		pub.fanout(&pkt)
	}
	p := &Participant{sid: "PA_viewer", subs: map[string]*DownTrack{pub.sid: d}}
	d.sub = p
	w := &srRecorder{}
	var reports reporter
	reports.add(p, w)
	deadline := time.Now().Add(3 * time.Second)
	for w.count() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	w.mu.Lock()
	srs := append([]rtcp.SenderReport(nil), w.srs...)
	w.mu.Unlock()
	if len(srs) < 2 {
		t.Fatalf("%d sender reports in 3 s", len(srs))
	}
	if srs[0].SSRC != 1000 || srs[1].PacketCount != 3 {
		t.Errorf("sender reports %+v", srs)
	}
	ntp := func(v uint64) time.Duration {
		return time.Duration(v>>32)*time.Second + time.Duration((v&0xffffffff)*uint64(time.Second)>>32)
	}
	if gap := ntp(srs[1].NTPTime) - ntp(srs[0].NTPTime); gap < 900*time.Millisecond || gap > 1500*time.Millisecond {
		t.Errorf("sender reports %v apart, want one a second", gap)
	}

	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	time.Sleep(allocateInterval + 100*time.Millisecond)
	n := w.count()
	reports.mu.Lock()
	for _, s := range reports.slots {
		for _, x := range s {
			if x.p == p {
				t.Error("a closed participant is still in the reporter")
			}
		}
	}
	running := reports.running
	reports.mu.Unlock()
	if running {
		t.Error("the reporter's goroutine runs on with no participant")
	}
	time.Sleep(1100 * time.Millisecond)
	if w.count() != n {
		t.Errorf("%d sender reports after close", w.count()-n)
	}
}
