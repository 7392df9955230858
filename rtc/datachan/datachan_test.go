package datachan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// pair starts two associations on an in-memory link.
func pair(t *testing.T, impair func(ab, ba *link)) (*Association, *Association) {
	t.Helper()
	return pairWith(t, Config{}, impair)
}

// pairWith is pair with both ends configured as cfg (Conn and Client set
// here) and path MTU probes timing out after 20 ms, not a second.
func pairWith(t *testing.T, cfg Config, impair func(ab, ba *link)) (*Association, *Association) {
	t.Helper()
	la, lb := newLinks()
	if impair != nil {
		impair(la, lb)
	}
	ca, cb := cfg, cfg
	ca.Conn, ca.Client, cb.Conn = la, true, lb
	a := New(ca)
	b := New(cb)
	for _, x := range []*Association{a, b} {
		x.mu.Lock()
		x.pm.timeout = 20 * time.Millisecond
		x.mu.Unlock()
	}
	t.Cleanup(func() { a.Close(); b.Close(); la.Close() })
	for _, x := range []*Association{a, b} {
		select {
		case <-x.Ready():
		case <-time.After(10 * time.Second):
			t.Fatal("no association within 10 s")
		}
	}
	return a, b
}

// transfer opens a channel from a to b, has sendAll send n messages on it
// and checks they all come.
func transfer(t *testing.T, a, b *Association, n int, sendAll func(*Channel)) {
	t.Helper()
	ca, err := a.Open("bulk", Options{})
	if err != nil {
		t.Fatal(err)
	}
	cb := accept(t, b)
	done := make(chan error, 1)
	go func() { done <- receive(cb, n) }()
	sendAll(ca)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the transfer did not finish within 20 s; sender %+v", a.Stats())
	}
}

// message i of a transfer: its number, then a pattern derived from it.
func message(i int, size int) []byte {
	b := make([]byte, max(size, 4))
	binary.BigEndian.PutUint32(b, uint32(i))
	for j := 4; j < len(b); j++ {
		b[j] = byte(i*7 + j)
	}
	return b
}

// send writes n messages of random sizes up to maxSize, keeping at most
// 1 MiB buffered, and returns the bytes sent.
func send(t *testing.T, c *Channel, n, maxSize int) int {
	low := make(chan struct{}, 1)
	c.OnBufferedAmountLow(512<<10, func() {
		select {
		case low <- struct{}{}:
		default:
		}
	})
	r := rand.New(rand.NewPCG(5, 6))
	total := 0
	for i := 0; i < n; i++ {
		for c.BufferedAmount() > 1<<20 {
			select {
			case <-low:
			case <-time.After(30 * time.Second):
				t.Errorf("the buffered amount stayed at %d for 30 s", c.BufferedAmount())
				return total
			}
		}
		m := message(i, 1+r.IntN(maxSize))
		if err := c.Send(m, false); err != nil {
			t.Errorf("send %d: %v", i, err)
			return total
		}
		total += len(m)
	}
	return total
}

// receive reads n messages and checks each is the next one, whole.
func receive(c *Channel, n int) error {
	buf := make([]byte, 1<<20)
	for i := 0; i < n; i++ {
		k, err := c.Read(buf)
		if err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		got := int(binary.BigEndian.Uint32(buf))
		if got != i || !bytes.Equal(buf[:k], message(i, k)) {
			return fmt.Errorf("message %d: got message %d (%d bytes)", i, got, k)
		}
	}
	return nil
}

func accept(t *testing.T, a *Association) *Channel {
	t.Helper()
	ch := make(chan *Channel, 1)
	go func() {
		c, err := a.Accept()
		if err != nil {
			t.Error(err)
		}
		ch <- c
	}()
	select {
	case c := <-ch:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no channel within 10 s")
		return nil
	}
}

// TestTransfer: a reliable ordered channel delivers every message whole and
// in order over a clean link, a lossy one, a reordering one and both, and
// recovers loss without waiting for the timeout.
func TestTransfer(t *testing.T) {
	normal := func(mean, sd time.Duration) func(r *rand.Rand) time.Duration {
		return func(r *rand.Rand) time.Duration { return max(0, mean+time.Duration(r.NormFloat64()*float64(sd))) }
	}
	cases := []struct {
		name   string
		n      int
		impair func(ab, ba *link)
	}{
		{"clean", 2000, nil},
		{"loss", 400, func(ab, ba *link) { ab.loss, ba.loss = 0.03, 0.01 }},
		{"reorder", 400, func(ab, ba *link) {
			ab.delay, ba.delay = normal(20*time.Millisecond, 6*time.Millisecond), normal(20*time.Millisecond, 0)
		}},
		{"blackout", 400, func(ab, ba *link) {
			// Nothing gets through for a second, from 30 ms after the
			// first DATA: the retransmission timeout, then RACK, recover it.
			var first time.Time
			ab.filter = func(b []byte) bool {
				if first.IsZero() && len(b) > headerSize && b[headerSize] == ctData {
					first = time.Now()
				}
				d := time.Since(first)
				return first.IsZero() || d < 30*time.Millisecond || d > 1030*time.Millisecond
			}
			ab.delay = func(*rand.Rand) time.Duration { return 10 * time.Millisecond }
		}},
		{"loss-reorder", 400, func(ab, ba *link) {
			ab.loss, ab.delay, ba.delay = 0.02, normal(20*time.Millisecond, 6*time.Millisecond), normal(20*time.Millisecond, 0)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, tc.impair)
			c, err := a.Open("bulk", Options{})
			if err != nil {
				t.Fatal(err)
			}
			r := accept(t, b)
			if r.Label() != "bulk" {
				t.Fatalf("label %q", r.Label())
			}
			done := make(chan error, 1)
			go func() { done <- receive(r, tc.n) }()
			start := time.Now()
			total := send(t, c, tc.n, 8000)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("not all received in 60 s: %+v", a.Stats())
			}
			s := a.Stats()
			t.Logf("%d bytes in %v; sender %+v", total, time.Since(start).Round(time.Millisecond), s)
			if tc.impair != nil && tc.name != "reorder" && tc.name != "blackout" && s.FastRetransmits == 0 {
				t.Error("no chunk was declared lost on a lossy link")
			}
			if tc.name == "blackout" && s.Timeouts == 0 {
				t.Error("no retransmission timeout in a blackout")
			}
			if s.Timeouts > 4 {
				t.Errorf("%d retransmission timeouts", s.Timeouts)
			}
			if tc.name == "reorder" && s.Cwnd < 64*1200 {
				t.Errorf("cwnd %d on a link that only reorders", s.Cwnd)
			}
		})
	}
}

// TestPartialReliability: an unordered channel without retransmissions over
// a lossy link loses messages but never repeats one, and the association
// goes on (FORWARD-TSN moves the receiver past what was given up).
func TestPartialReliability(t *testing.T) {
	a, b := pair(t, func(ab, ba *link) { ab.loss = 0.1 })
	zero := uint32(0)
	c, err := a.Open("lossy", Options{Unordered: true, MaxRetransmits: &zero})
	if err != nil {
		t.Fatal(err)
	}
	r := accept(t, b)
	if o := r.Options(); !o.Unordered || o.MaxRetransmits == nil || *o.MaxRetransmits != 0 {
		t.Fatalf("options %+v", o)
	}
	// A reliable transfer beside it loses nothing: the FORWARD-TSNs skip
	// its chunks too, which must still be delivered.
	bulk, err := a.Open("bulk", Options{})
	if err != nil {
		t.Fatal(err)
	}
	rb := accept(t, b)
	bulkDone := make(chan error, 1)
	go func() { bulkDone <- receive(rb, 1000) }()
	go func() {
		// Spread over the probes' half second, so their chunks interleave.
		for i := 0; i < 1000; i++ {
			if err := bulk.Send(message(i, 3000), false); err != nil {
				return
			}
			time.Sleep(500 * time.Microsecond)
		}
	}()
	const n = 500
	got := map[int]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			k, err := r.Read(buf)
			if err != nil {
				return
			}
			i := int(binary.BigEndian.Uint32(buf[:k]))
			if got[i] {
				t.Errorf("message %d twice", i)
			}
			got[i] = true
			if i == n-1 {
				return
			}
		}
	}()
	// Wait for the channel's ACK, so the messages go unordered.
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < n; i++ {
		if err := c.Send(message(i, 2000), false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	rel, err := a.Open("reliable", Options{})
	if err != nil {
		t.Fatal(err)
	}
	rr := accept(t, b)
	if err := rel.Send(message(0, 100), false); err != nil {
		t.Fatal(err)
	}
	if err := receive(rr, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	select {
	case err := <-bulkDone:
		if err != nil {
			t.Fatalf("the reliable channel beside: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reliable channel beside did not deliver everything")
	}
	s := a.Stats()
	t.Logf("%d of %d messages arrived; sender %+v", len(got), n, s)
	if len(got) < n/2 || len(got) == n && s.Abandoned == 0 {
		t.Errorf("%d of %d arrived, %d chunks abandoned", len(got), n, s.Abandoned)
	}
}

// TestForwardBehindLoss: a message abandoned behind a reliable chunk that
// was lost too is skipped once that chunk is acknowledged. The sender's
// advanced peer ack point stopped at the lost reliable chunk when the
// message was abandoned and did not move on when it was acknowledged, so no
// FORWARD-TSN went out and the reliable message after it never came (CI,
// 2026-11-27: TestPartialReliability, about 1 run in 10).
func TestForwardBehindLoss(t *testing.T) {
	var mu sync.Mutex
	drop := map[uint32]bool{} // TSNs whose first copy is lost
	armed, first := false, uint32(0)
	a, b := pair(t, func(ab, ba *link) {
		ab.delay = func(*rand.Rand) time.Duration { return 5 * time.Millisecond }
		ba.delay = ab.delay
		ab.filter = func(p []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			if !armed {
				return true
			}
			keep := true
			it := chunkIter{b: p[headerSize:]}
			for {
				typ, _, v, ok := it.next()
				if !ok {
					return keep
				}
				if typ != ctData {
					continue
				}
				tsn := binary.BigEndian.Uint32(v)
				if first == 0 {
					first = tsn
				}
				if tsn-first < 2 && !drop[tsn] {
					drop[tsn], keep = true, false // the reliable chunk and the lossy one after it
				}
			}
		}
	})
	zero := uint32(0)
	lossy, err := a.Open("lossy", Options{Unordered: true, MaxRetransmits: &zero})
	if err != nil {
		t.Fatal(err)
	}
	accept(t, b)
	rel, err := a.Open("reliable", Options{})
	if err != nil {
		t.Fatal(err)
	}
	rr := accept(t, b)
	time.Sleep(50 * time.Millisecond) // the channels' ACKs are in
	mu.Lock()
	armed = true
	mu.Unlock()
	for _, send := range []func() error{
		func() error { return rel.Send(message(0, 100), false) },
		func() error { return lossy.Send(message(0, 100), false) },
		func() error { return rel.Send(message(1, 100), false) },
	} {
		if err := send(); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- receive(rr, 2) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("the reliable message after the abandoned one did not come: %+v", a.Stats())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(drop) != 2 {
		t.Fatalf("%d chunks lost, want 2", len(drop))
	}
	if s := a.Stats(); s.Abandoned != 1 {
		t.Fatalf("%d chunks abandoned, want 1", s.Abandoned)
	}
}

// TestClose: closing a channel resets its stream: the peer reads what was
// sent, then io.EOF, and neither side can send on it.
func TestClose(t *testing.T) {
	a, b := pair(t, nil)
	c, err := a.Open("x", Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := accept(t, b)
	if err := c.Send([]byte("last"), true); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(nil, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	c.Close()
	buf := make([]byte, 64)
	n, str, err := r.ReadMessage(buf)
	if err != nil || !str || string(buf[:n]) != "last" {
		t.Fatalf("read %q %v %v", buf[:n], str, err)
	}
	if n, str, err := r.ReadMessage(buf); err != nil || n != 0 || !str {
		t.Fatalf("empty string: %d %v %v", n, str, err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.Read(buf); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("read after close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the peer's channel did not close")
	}
	if err := r.Send([]byte("x"), false); err == nil {
		t.Error("sent on a closed channel")
	}
	// The stream can be opened again.
	c2, err := a.Open("y", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r2 := accept(t, b); r2.Label() != "y" || c2.ID() == c.ID() && r2.ID() != c2.ID() {
		t.Fatalf("reopened %q on %d", r2.Label(), r2.ID())
	}
}

// TestUndoLateProof: two reductions of cwnd, both spurious (two packets
// held back 400 ms on a link of 20 ms RTT, longer than the receiver hides
// a hole), the second before the first's duplicates come back. Both are undone: the proof of the first must not
// be lost to the second, or the window is left at a few packets.
func TestUndoLateProof(t *testing.T) {
	a, b := pair(t, func(ab, ba *link) {
		ab.delay = func(*rand.Rand) time.Duration { return 10 * time.Millisecond }
		ba.delay = ab.delay
		// The 30th full DATA packet, and the first sent 200 ms after it:
		// the second reduction comes well over two RTTs after the first,
		// and before the first one's proof.
		n, first := 0, time.Time{}
		ab.hold = func(p []byte) time.Duration {
			if len(p) < 1000 || p[headerSize] != ctData {
				return 0
			}
			n++
			if n == 30 || n > 30 && !first.IsZero() && time.Since(first) > 200*time.Millisecond {
				if n == 30 {
					first = time.Now()
				} else {
					first = time.Time{}
				}
				return 400 * time.Millisecond
			}
			return 0
		}
	})
	transfer(t, a, b, 100, func(c *Channel) { send(t, c, 100, 8000) })
	deadline := time.Now().Add(time.Second)
	for {
		s := a.Stats()
		if s.Ssthresh >= 1<<20 && s.SpuriousRetransmits > 0 {
			t.Logf("undone: %+v", s)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a spurious reduction was not undone: %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGapHoldback: a hole goes unreported (the chunks above it are not
// acknowledged yet) while it is younger than holdInit, then longer once a
// resent chunk shows that an older hole was only reordering; a SACK goes
// out when a hidden hole comes of age; and on a link that loses without
// reordering the hold goes away.
func TestGapHoldback(t *testing.T) {
	a := &Association{epoch: time.Now(), cfg: Config{ReceiveWindow: 1 << 20, MaxMessage: 1 << 16}, log: slog.New(slog.DiscardHandler)}
	r := &a.rcv
	r.init(a)
	r.start(initChunk{tsn: 100, outStreams: 16})
	data := func(tsn uint32) {
		t.Helper()
		a.mu.Lock()
		defer a.mu.Unlock()
		if err := r.handleData(flagBegin|flagEnd, dataValue(tsn, 1, ppidBinary, []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	blocks := func() []uint16 {
		a.mu.Lock()
		defer a.mu.Unlock()
		r.sackSize()
		return slices.Clone(r.blocks)
	}
	comesOfAge := func(want []uint16) {
		t.Helper()
		a.mu.Lock()
		armed, hold := r.holdArmed, r.hold
		a.mu.Unlock()
		if !armed {
			t.Fatal("no SACK planned for when the hole comes of age")
		}
		time.Sleep(time.Duration(hold))
		for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
			a.mu.Lock()
			armed, now := r.holdArmed, r.sackNow
			a.mu.Unlock()
			if !armed && now {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the hole came of age and no SACK was due (armed %v, sackNow %v)", armed, now)
			}
		}
		if b := blocks(); !slices.Equal(b, want) {
			t.Fatalf("an old hole: gap blocks %v, want %v", b, want)
		}
	}
	data(100)
	opened := time.Now()
	data(102)
	if b := blocks(); len(b) != 0 && time.Since(opened) < time.Duration(holdInit) {
		t.Fatalf("a hole younger than holdInit was reported: gap blocks %v", b)
	}
	comesOfAge([]uint16{2, 2})
	data(101)
	late := time.Since(opened)
	data(101) // resent: 101 was late, not lost
	if time.Duration(r.hold) < min(late, time.Duration(maxHold))-time.Millisecond {
		t.Fatalf("hold %v after a chunk %v late", time.Duration(r.hold), late)
	}
	opened = time.Now()
	data(104)
	data(105)
	if b := blocks(); len(b) != 0 && time.Since(opened) < late {
		t.Fatalf("a hole younger than the reordering seen was reported: gap blocks %v", b)
	}
	comesOfAge([]uint16{2, 3})
	// Losses: holes filled after they were reported, never a duplicate.
	data(103)
	r.hold = 2 * int64(time.Millisecond)
	for tsn := uint32(106); r.hold > 0; tsn += 2 {
		if tsn > 200 {
			t.Fatalf("hold still %v after 50 losses", time.Duration(r.hold))
		}
		data(tsn + 1)
		time.Sleep(3 * time.Millisecond)
		data(tsn)
	}
}

// TestStretchSack: a receiver that keeps up acknowledges every second
// packet, one with packets waiting to be read every stretch packets, and a
// hole is reported at once either way.
func TestStretchSack(t *testing.T) {
	a := &Association{epoch: time.Now(), cfg: Config{ReceiveWindow: 1 << 20, MaxMessage: 1 << 16}, log: slog.New(slog.DiscardHandler)}
	r := &a.rcv
	r.init(a)
	r.start(initChunk{tsn: 100, outStreams: 16})
	r.hold = 0
	a.mu.Lock()
	defer a.mu.Unlock()
	defer r.stop()
	tsn := uint32(100)
	// packets reads n packets of one chunk each (skipping skip TSNs first)
	// and returns after how many a SACK was due, 0 if none was.
	packets := func(n int, behind bool, skip uint32) int {
		t.Helper()
		tsn += skip
		for i := 1; i <= n; i++ {
			r.behind = behind && i < n
			if err := r.handleData(flagBegin|flagEnd, dataValue(tsn, 1, ppidBinary, []byte("x"))); err != nil {
				t.Fatal(err)
			}
			tsn++
			r.afterPacket()
			if r.sackNow {
				var w packetWriter
				w.start(nil, 1)
				r.appendSack(&w)
				return i
			}
		}
		return 0
	}
	if got := packets(10, false, 0); got != 2 {
		t.Fatalf("keeping up: a SACK after %d packets, want 2", got)
	}
	if got := packets(40, true, 0); got != stretch {
		t.Fatalf("behind by 39 packets: a SACK after %d, want %d", got, stretch)
	}
	if got := packets(40, true, 1); got != 1 {
		t.Fatalf("behind, after a hole: a SACK after %d packets, want 1", got)
	}
}

// TestDuplicateInit: each end's INIT arrives twice (a network that
// duplicates, or an INIT resent while the INIT-ACK was on its way), the copy
// up to 30 ms after the original. The association still forms: both
// INIT-ACKs carry the same cookie. (Each copy got a new cookie before, the
// peer echoed the first, and both ends resent COOKIE-ECHO forever.)
func TestDuplicateInit(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond} {
		la, lb := newLinks()
		for _, l := range []*link{la, lb} {
			l.delay = func(*rand.Rand) time.Duration { return time.Millisecond }
			l.filter = func(p []byte) bool {
				if len(p) > headerSize && p[headerSize] == ctInit {
					c := append([]byte(nil), p...)
					time.AfterFunc(d+time.Millisecond, func() { l.peer.in <- c })
				}
				return true
			}
		}
		a := New(Config{Conn: la, Client: true})
		b := New(Config{Conn: lb})
		for _, x := range []*Association{a, b} {
			select {
			case <-x.Ready():
			case <-time.After(5 * time.Second):
				t.Errorf("copy %v later: no association within 5 s", d)
			}
		}
		a.Close()
		b.Close()
		la.Close()
	}
}

// TestSackFillsPacket: after a burst that lost every other chunk, a SACK
// reports as many gaps as fit in one packet beside its duplicates (with 64,
// Chromium's sender learned of the first 128 TSNs only and resent one
// chunk a round trip), and still fits in the MTU.
func TestSackFillsPacket(t *testing.T) {
	a := &Association{epoch: time.Now(), cfg: Config{ReceiveWindow: 1 << 20, MaxMessage: 1 << 16, MTU: 1200}, log: slog.New(slog.DiscardHandler)}
	r := &a.rcv
	r.init(a)
	r.start(initChunk{tsn: 100, outStreams: 16})
	r.hold = 0 // report at once
	a.mu.Lock()
	defer a.mu.Unlock()
	for tsn := uint32(101); tsn < 101+2*1000; tsn += 2 {
		if err := r.handleData(flagBegin|flagEnd, dataValue(tsn, 1, ppidBinary, []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < maxDups; i++ {
		r.handleData(flagBegin|flagEnd, dataValue(101, 1, ppidBinary, []byte("x"))) // duplicates
	}
	n := r.sackSize()
	if got := len(r.blocks) / 2; got < 250 {
		t.Fatalf("%d gap blocks reported of 1000, want as many as fit (over 250)", got)
	}
	var w packetWriter
	w.start(nil, 1)
	r.appendSack(&w)
	if p := w.finish(); len(p) > 1200 || len(p) != headerSize+n {
		t.Fatalf("SACK packet of %d bytes (chunk said %d), MTU 1200", len(p), n)
	}
}
