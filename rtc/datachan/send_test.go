package datachan

import (
	"encoding/binary"
	"testing"
	"time"
)

// sackOf builds a SACK chunk's value: the cumulative TSN and gap blocks
// (start and end offsets from it).
func sackOf(cum uint32, blocks ...[2]uint16) []byte {
	v := binary.BigEndian.AppendUint32(nil, cum)
	v = binary.BigEndian.AppendUint32(v, 1<<24)
	v = binary.BigEndian.AppendUint16(v, uint16(len(blocks)))
	v = binary.BigEndian.AppendUint16(v, 0)
	for _, b := range blocks {
		v = binary.BigEndian.AppendUint16(v, b[0])
		v = binary.BigEndian.AppendUint16(v, b[1])
	}
	return v
}

// flying gives a sender n chunks of 1000 bytes in flight, TSNs 1001 to
// 1000+n, sent 300 ms ago in TSN order, but for the first, resent 85 ms
// ago (and so sent last).
func flying(t testing.TB, n int) *sender {
	s := newTestSender()
	t.Cleanup(s.stop)
	ms := int64(time.Millisecond)
	now := s.a.now() + 1000*ms
	s.a.epoch = s.a.epoch.Add(-1000 * time.Millisecond)
	s.srtt, s.minRTT, s.rttvar, s.rto = 80*ms, 80*ms, 5*ms, 300*ms
	s.cwnd, s.ssthresh, s.rwnd = 1<<20, 1<<20, 1<<24
	s.cumAck, s.nextTSN = 1000, 1001+uint32(n)
	m := &outMsg{maxRtx: -1}
	for i := range n {
		c := &outChunk{msg: m, tsn: 1001 + uint32(i), data: make([]byte, 1000), sentAt: now - 300*ms, seq: uint64(i + 1), nSent: 1, flying: true}
		s.inflight = append(s.inflight, c)
		s.flight += 1000
	}
	s.inflight[0].seq, s.inflight[0].nSent, s.inflight[0].sentAt = uint64(n+1), 2, now-85*ms
	s.seq = uint64(n + 1)
	return s
}

// everyOther is n gap blocks reporting every other TSN after the
// cumulative one: 2, 4, 6, ... received, 1, 3, 5, ... missing.
func everyOther(n int) [][2]uint16 {
	var b [][2]uint16
	for i := range n {
		b = append(b, [2]uint16{uint16(2 + 2*i), uint16(2 + 2*i)})
	}
	return b
}

// TestTruncatedSack: a SACK with as many gap blocks as the peer ever sends
// (dcSCTP reports 20 at most) says nothing of the chunks past its last
// block. The resent chunk acknowledged in it was sent after all of them,
// but RACK must not find them lost (they came, most likely, and the
// report stopped short): the holes it reports are resent, the chunks past
// it leave the flight without being resent, and when a later report
// acknowledges them that is no reordering. A report with fewer blocks
// than the peer has sent is whole, and RACK finds the chunks past it lost.
func TestTruncatedSack(t *testing.T) {
	s := flying(t, 300)
	// Chunk 1001 (resent) acknowledged; 1002, 1004, ..., 1040 missing,
	// 1003, ..., 1041 received, in 20 blocks; 1042-1300 not reported.
	s.peerGaps = 20
	if err := s.handleSack(sackOf(1001, everyOther(20)...)); err != nil {
		t.Fatal(err)
	}
	lost, past := 0, 0
	for _, c := range s.inflight {
		if c.lost {
			lost++
		}
		if tsnLess(1041, c.tsn) && (c.lost || c.flying) {
			past++
		}
	}
	if lost != 20 || past != 0 || s.a.stats.Presumed != 259 {
		t.Fatalf("after a truncated SACK: %d chunks lost (want the 20 holes), %d past the report lost or in flight (want 0), %d presumed (want 259)", lost, past, s.a.stats.Presumed)
	}
	if !s.probe {
		t.Fatalf("the first retransmission of the recovery may not exceed cwnd")
	}
	// The next report reaches past 1041: 1042-1300 acknowledged.
	if err := s.handleSack(sackOf(1001, append(everyOther(20), [2]uint16{41, 299})...)); err != nil {
		t.Fatal(err)
	}
	if s.rack.reorder {
		t.Fatalf("chunks a truncated report left out, acknowledged later, taken for reordering")
	}

	// A whole report: the peer has sent 40 blocks before.
	s = flying(t, 300)
	s.peerGaps = 40
	if err := s.handleSack(sackOf(1001, everyOther(20)...)); err != nil {
		t.Fatal(err)
	}
	lost = 0
	for _, c := range s.inflight {
		if c.lost {
			lost++
		}
	}
	if lost != 279 || s.a.stats.Presumed != 0 {
		t.Fatalf("after a whole SACK: %d chunks lost, %d presumed; want 279 (the holes and all past the report) and 0", lost, s.a.stats.Presumed)
	}
}

// BenchmarkPresume: the loss scan on a SACK that leaves 3000 chunks
// unreported, all of them already presumed (the scan passes over them
// each time).
func BenchmarkPresume(b *testing.B) {
	s := flying(b, 3020)
	s.peerGaps = 20
	if err := s.handleSack(sackOf(1001, everyOther(20)...)); err != nil {
		b.Fatal(err)
	}
	now := s.a.now()
	b.ResetTimer()
	for range b.N {
		s.detectLoss(now)
	}
}

// TestTimeoutRetransmissionMovesRack: after a timeout the earliest chunk
// goes again alone. Its acknowledgment, sooner than the minimum RTT (which
// a loaded host measured high), is the retransmission's, since the original
// went a timeout ago: RACK finds the rest of the flight lost at once rather
// than one chunk per timeout.
func TestTimeoutRetransmissionMovesRack(t *testing.T) {
	s := flying(t, 50)
	s.inflight[0].seq, s.inflight[0].nSent, s.inflight[0].sentAt = 1, 1, s.inflight[1].sentAt
	s.seq = 50
	l, _ := newLinks()
	t.Cleanup(func() { l.Close() })
	s.a.cfg.Conn, s.a.state = l, stateEstablished
	s.onT3()
	if first := s.inflight[0]; first.nSent != 2 || s.t3Seq != first.seq {
		t.Fatalf("after the timeout: first chunk sent %d times, seq %d, t3Seq %d", first.nSent, first.seq, s.t3Seq)
	}
	if err := s.handleSack(sackOf(1001)); err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, c := range s.inflight {
		if c.lost || c.nSent > 1 {
			lost++
		}
	}
	if lost != 49 {
		t.Fatalf("%d of the 49 chunks left found lost, want all", lost)
	}
}
