package webtransport_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	wt "github.com/quic-go/webtransport-go"

	"github.com/petrel-sfu/petrel/webtransport"
	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

// expectClosed waits for c's session to end with code and a reason containing
// substr, as the server closes it for a protocol violation.
func expectClosed(t *testing.T, c *webtransport.Client, code uint64, substr string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the session was not closed (%s)", substr)
	}
	var se *wtSessionError
	err := c.Err()
	if !errors.As(err, &se) || uint64(se.ErrorCode) != code || !strings.Contains(se.Message, substr) {
		t.Fatalf("session ended with %v, want code 0x%x and %q", err, code, substr)
	}
}

type wtSessionError = wt.SessionError

// rawRequest opens a request stream and writes b on it as it is.
func rawRequest(t *testing.T, c *webtransport.Client, b []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Session.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = st.Write(b)
}

func message(t *testing.T, m moqt.Message) []byte {
	t.Helper()
	b, err := moqt.AppendMessage(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func requestCode(err error) uint64 {
	var re *webtransport.RequestError
	if errors.As(err, &re) {
		return re.Code
	}
	return 1 << 62
}

// clockPublisher writes groups of perGroup objects ("g/o" payloads) every
// 20 ms until the test ends.
func clockPublisher(t *testing.T, tr *webtransport.PubTrack, perGroup int) {
	every(t, 20*time.Millisecond, func(n int) {
		g, o := n/perGroup, n%perGroup
		_ = tr.WriteFrame(&moqt.Meta{TimestampUs: uint64(n) * 20000, Keyframe: o == 0, AudioLevel: -1}, o == 0, []byte(fmt.Sprintf("%d/%d", g, o)))
	})
}

// FETCH from the relay's cache: a late subscriber with the Largest Object
// filter learns where it joins (SUBSCRIBE_OK's LARGEST_OBJECT), a joining FETCH
// gives it the current group up to there and live objects follow without a
// gap; a standalone FETCH gives a past group. Bad requests get the draft's
// error codes; a malformed FETCH ends only its own session.
func TestRelayFetch(t *testing.T) {
	e := start(t)
	pub := e.dial("fetch", "pub")
	tr := pub.AddTrack("ticks", false)
	ns := []string{"petrel", "fetch", "pub"}
	if err := pub.Announce(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	clockPublisher(t, tr, 10)
	first, got := subscribeWhenPublished(t, e.dial("fetch", "first"), ns, "ticks")
	waitFor(t, "objects through the relay", 30*time.Second, func() bool { return got.Load() >= 25 })

	late := e.dial("fetch", "late")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := late.SubscribeWith(ctx, ns, "ticks", webtransport.SubscribeOptions{Filter: moqt.FilterLargestObject})
	if err != nil {
		t.Fatal(err)
	}
	if !s.HasLargest {
		t.Fatal("SUBSCRIBE_OK without LARGEST_OBJECT although the relay has objects")
	}
	j := s.Largest
	r, err := late.Fetch(ctx, moqt.Fetch{Type: moqt.FetchRelativeJoining, JoiningRequestID: s.RequestID, JoiningStart: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Objects) != int(j.Object)+1 || r.OK.End != (moqt.Location{Group: j.Group, Object: j.Object + 1}) {
		t.Fatalf("joining FETCH up to %v: %d objects, FETCH_OK end %v", j, len(r.Objects), r.OK.End)
	}
	for i, o := range r.Objects {
		if o.Group != j.Group || o.ID != uint64(i) || string(o.Payload) != fmt.Sprintf("%d/%d", o.Group, o.ID) {
			t.Fatalf("fetched object %d is %d/%d %q", i, o.Group, o.ID, o.Payload)
		}
	}
	select {
	case o := <-s.Objects:
		next := moqt.Location{Group: j.Group, Object: j.Object + 1}
		if j.Object == 9 {
			next = moqt.Location{Group: j.Group + 1}
		}
		if (moqt.Location{Group: o.Group, Object: o.ID}) != next {
			t.Fatalf("live objects resume at %d/%d after joining at %v", o.Group, o.ID, j)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no live object after the joining FETCH")
	}

	// A standalone FETCH of the previous group, whole (end object 0: the whole group).
	prev := j.Group - 1
	r, err = late.Fetch(ctx, moqt.Fetch{Type: moqt.FetchStandalone, Namespace: ns, Track: "ticks",
		Start: moqt.Location{Group: prev}, End: moqt.Location{Group: prev}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Objects) != 10 || r.Objects[9].ID != 9 || string(r.Objects[0].Payload) != fmt.Sprintf("%d/0", prev) {
		t.Fatalf("standalone FETCH of group %d: %d objects", prev, len(r.Objects))
	}

	// Refused requests: the draft's codes, the session goes on.
	if _, err := late.Fetch(ctx, moqt.Fetch{Type: moqt.FetchRelativeJoining, JoiningRequestID: 1000}); requestCode(err) != moqt.ErrCodeInvalidJoiningRequest {
		t.Fatalf("joining an unknown subscription: %v", err)
	}
	if _, err := late.Fetch(ctx, moqt.Fetch{Type: moqt.FetchStandalone, Namespace: ns, Track: "ticks",
		Start: moqt.Location{Group: j.Group, Object: 5}, End: moqt.Location{Group: j.Group, Object: 2}}); requestCode(err) != moqt.ErrCodeInvalidRange {
		t.Fatalf("a range ending before its start: %v", err)
	}
	if _, err := late.Fetch(ctx, moqt.Fetch{Type: moqt.FetchStandalone, Namespace: ns, Track: "ticks",
		Start: moqt.Location{Group: 1 << 40}, End: moqt.Location{Group: 1 << 40}}); requestCode(err) != moqt.ErrCodeDoesNotExist {
		t.Fatalf("a range nothing is cached in: %v", err)
	}
	if _, err := late.Fetch(ctx, moqt.Fetch{Type: moqt.FetchStandalone, Namespace: []string{"petrel", "fetch", "nobody"}, Track: "x",
		End: moqt.Location{Group: 1}}); requestCode(err) != moqt.ErrCodeDoesNotExist {
		t.Fatalf("an unknown track: %v", err)
	}

	// A FETCH of an unknown fetch type is malformed: that session ends with
	// PROTOCOL_VIOLATION and a log line; the others keep receiving.
	bad := e.dial("fetch", "bad")
	raw := moqt.AppendVI(nil, moqt.TypeFetch)
	rawRequest(t, bad, append(raw, 0x00, 0x03, 0x00, 0x09, 0x00)) // request 0, fetch type 9, no parameters
	expectClosed(t, bad, moqt.CloseProtocolViolation, "fetch type")
	waitFor(t, "the log line", 10*time.Second, func() bool { return e.logs.has("fetch type 0x9") })
	n := got.Load()
	waitFor(t, "objects still flowing to the first subscriber", 10*time.Second, func() bool { return got.Load() > n+3 })
	_ = first
}

// SUBSCRIBE_NAMESPACE: a client learns which participants publish in the room
// (a WebRTC publisher, a WebTransport announcer) and when they go.
func TestSubscribeNamespace(t *testing.T) {
	e := start(t)
	watcher := e.dial("ns", "watcher")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := watcher.SubscribeNamespace(ctx, []string{"petrel", "ns"})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want []string, done bool) {
		t.Helper()
		for {
			select {
			case ev, ok := <-n.Events:
				if !ok {
					t.Fatalf("namespace events ended waiting for %v", want)
				}
				if slices.Equal(ev.Suffix, want) && ev.Done == done {
					return
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("no NAMESPACE%s for %v", map[bool]string{true: "_DONE"}[done], want)
			}
		}
	}
	rtc := e.rtcPublisher("ns", "rtcpub", webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000},
		func(n int) []byte { return vp8Frame(n, n%15 == 0) })
	next([]string{"rtcpub"}, false)
	wtpub := e.dial("ns", "wtpub")
	if err := wtpub.Announce(ctx, []string{"petrel", "ns", "wtpub", "clock"}); err != nil {
		t.Fatal(err)
	}
	next([]string{"wtpub", "clock"}, false)
	rtc.Close()
	next([]string{"rtcpub"}, true)
	wtpub.Close()
	next([]string{"wtpub", "clock"}, true)

	// A late SUBSCRIBE_NAMESPACE gets what is there at once.
	wt2 := e.dial("ns", "wt2")
	if err := wt2.Announce(ctx, []string{"petrel", "ns", "wt2"}); err != nil {
		t.Fatal(err)
	}
	n.Close()
	if n, err = watcher.SubscribeNamespace(ctx, []string{"petrel"}); err != nil {
		t.Fatal(err)
	}
	next([]string{"ns", "wt2"}, false)

	if _, err := watcher.SubscribeNamespace(ctx, []string{"petrel", "other-room"}); requestCode(err) != moqt.ErrCodeDoesNotExist {
		t.Fatalf("another room's namespaces: %v", err)
	}
	// A prefix of 33 fields is malformed.
	raw := moqt.AppendVI(nil, 0) // request id
	raw = moqt.AppendVI(raw, 33)
	for range 33 {
		raw = moqt.AppendBytes(raw, []byte("x"))
	}
	raw = moqt.AppendVI(raw, 0)
	msg := append(moqt.AppendVI(nil, moqt.TypeSubscribeNamespace), byte(len(raw)>>8), byte(len(raw)))
	bad := e.dial("ns", "bad")
	rawRequest(t, bad, append(msg, raw...))
	expectClosed(t, bad, moqt.CloseProtocolViolation, "namespace with 33 fields")
	if _, err := watcher.SubscribeNamespace(ctx, []string{"petrel", "ns"}); err != nil {
		t.Fatalf("another session after the bad one: %v", err)
	}
}

// PUBLISH: a client offers a track with an alias of its choosing and sends it
// as MoQT OBJECT_DATAGRAMs; a subscriber receives it (forwarded as datagrams)
// and learns its end from PUBLISH_DONE. Publishing in someone else's namespace
// is refused, a reused alias ends the session, and malformed OBJECT_DATAGRAMs
// are dropped with a log line.
func TestPublishObjectDatagrams(t *testing.T) {
	e := start(t)
	pub := e.dial("pb", "pub")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := []string{"petrel", "pb", "pub", "sensors"}
	tr, err := pub.Publish(ctx, ns, "temp", true)
	if err != nil {
		t.Fatal(err)
	}
	sub := e.dial("pb", "sub")
	s, err := sub.Subscribe(ctx, ns, "temp", false)
	if err != nil {
		t.Fatal(err)
	}
	var ended atomic.Bool
	every(t, 20*time.Millisecond, func(i int) {
		if !ended.Load() {
			_ = tr.WriteFrame(&moqt.Meta{TimestampUs: uint64(i), AudioLevel: -1}, true, []byte(fmt.Sprintf("t%d", i)))
		}
	})
	for got := 0; got < 10; {
		select {
		case o := <-s.Objects:
			if !strings.HasPrefix(string(o.Payload), "t") || o.ID != 0 {
				t.Fatalf("object %d/%d %q", o.Group, o.ID, o.Payload)
			}
			got++
		case <-time.After(20 * time.Second):
			t.Fatalf("%d objects of a PUBLISHed track", got)
		}
	}
	ended.Store(true)
	if err := tr.End("done"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done:
		if !strings.Contains(s.Reason, "publisher ended") {
			t.Fatalf("subscription ended: %q", s.Reason)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no PUBLISH_DONE after the publisher ended its track")
	}

	if _, err := pub.Publish(ctx, []string{"petrel", "pb", "sub"}, "x", false); requestCode(err) != moqt.ErrCodeUnauthorized {
		t.Fatalf("PUBLISH in another participant's namespace: %v", err)
	}
	// Malformed OBJECT_DATAGRAMs: an extension flag with no extensions, no payload.
	_ = pub.Session.SendDatagram([]byte{0x01, 0x01, 0x00, 0x00, 0x80, 0x00, 'x'})
	_ = pub.Session.SendDatagram([]byte{0x00, 0x01, 0x00, 0x00, 0x80})
	waitFor(t, "a log line for the malformed datagram", 10*time.Second, func() bool { return e.logs.has("malformed datagram dropped") })
	if _, err := pub.Publish(ctx, ns, "humidity", true); err != nil {
		t.Fatalf("PUBLISH after the malformed datagrams: %v", err)
	}
	// A PUBLISH reusing a live alias ends the session (DUPLICATE_TRACK_ALIAS).
	rawRequest(t, pub, message(t, moqt.Publish{RequestID: 100, Namespace: ns, Track: "wind", TrackAlias: pub.NextAlias() - 1}))
	expectClosed(t, pub, moqt.CloseDuplicateTrackAlias, "alias")
}

// A request stream reset before its request is whole, or after, ends that
// request only: the session goes on.
func TestRequestStreamReset(t *testing.T) {
	e := start(t)
	c := e.dial("rst", "c")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.Session.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	full := message(t, moqt.Subscribe{RequestID: 0, Namespace: []string{"petrel", "rst"}, Track: "events"})
	_, _ = st.Write(full[:4])
	time.Sleep(50 * time.Millisecond)
	st.CancelWrite(7)
	waitFor(t, "the log line", 10*time.Second, func() bool { return e.logs.has("request stream ended before its request") })
	s, err := c.Subscribe(ctx, []string{"petrel", "rst"}, "events", false)
	if err != nil {
		t.Fatalf("a request after the reset one: %v", err)
	}
	select {
	case <-s.Objects: // the joined event
	case <-time.After(10 * time.Second):
		t.Fatal("no event after the reset request")
	}
	s.Reset()
	time.Sleep(100 * time.Millisecond)
	if _, err := c.Subscribe(ctx, []string{"petrel", "rst"}, "events", false); err != nil {
		t.Fatalf("a request after a reset subscription: %v", err)
	}
	select {
	case <-c.Done():
		t.Fatalf("the session ended: %v", c.Err())
	default:
	}
}
