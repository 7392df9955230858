package moqt

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestVIRoundTripAndForm(t *testing.T) {
	// 0x2F00 is SETUP's type; moq-transport's own test expects 0xAF 0x00.
	if got := AppendVI(nil, 0x2F00); !bytes.Equal(got, []byte{0xAF, 0x00}) {
		t.Fatalf("0x2F00 encodes as % x", got)
	}
	vals := []uint64{0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, 0x1FFFFF, 0x200000, 0x0FFFFFFF, 0x10000000,
		0x07FFFFFFFF, 0x0800000000, 0x03FFFFFFFFFF, 0x01FFFFFFFFFFFF, 0x00FFFFFFFFFFFFFF, 0x0100000000000000, MaxVI}
	for _, v := range vals {
		b := AppendVI(nil, v)
		if len(b) != SizeVI(v) {
			t.Fatalf("%x: %d bytes, SizeVI %d", v, len(b), SizeVI(v))
		}
		got, n, err := ParseVI(b)
		if err != nil || got != v || n != len(b) {
			t.Fatalf("%x: parsed %x n=%d err=%v from % x", v, got, n, err, b)
		}
		r, err := ReadVI(bytes.NewReader(b))
		if err != nil || r != v {
			t.Fatalf("%x: ReadVI %x %v", v, r, err)
		}
		if len(b) > 1 {
			if _, _, err := ParseVI(b[:len(b)-1]); err == nil {
				t.Fatalf("%x: truncated input accepted", v)
			}
		}
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	msgs := []Message{
		Setup{Params: Pairs{{Key: ParamPath, Bytes: []byte("/moq")}, {Key: ParamPetrel, Bytes: []byte(`{"ext":["dgram"]}`)}}},
		Subscribe{RequestID: 4, Namespace: []string{"petrel", "room", "alice"}, Track: "video",
			Params: Pairs{{Key: ParamForward, Int: 1}, {Key: ParamSubPriority, Int: 7}, {Key: ParamDelivery, Int: 1}}},
		SubscribeOK{TrackAlias: 9, Params: Pairs{{Key: ParamGroupOrder, Int: 1}}, Extensions: Pairs{{Key: 0x2, Int: 1000}}},
		RequestError{Code: ErrCodeDoesNotExist, RetryInterval: 0, Reason: "no such track"},
		RequestOK{},
		PublishNamespace{RequestID: 2, Namespace: []string{"petrel", "r", "bob"}},
		Unsubscribe{},
		PublishDone{Status: 2, StreamCount: 3, Reason: "bye"},
		GoAway{URI: "https://x/"},
		SubscribeNamespace{RequestID: 6, Prefix: []string{"petrel", "r"}},
		SubscribeNamespace{RequestID: 8, Prefix: []string{}},
		Namespace{Suffix: []string{"alice"}},
		NamespaceDone{Suffix: []string{"bob", "clock"}},
		PublishNamespaceDone{},
		Publish{RequestID: 10, Namespace: []string{"petrel", "r", "a"}, Track: "now", TrackAlias: 77,
			Params: Pairs{{Key: ParamForward, Int: 1}}, Extensions: Pairs{{Key: 0x4, Int: 5}}},
		PublishOK{Params: Pairs{{Key: ParamForward, Int: 1}}},
		Fetch{RequestID: 12, Type: FetchStandalone, Namespace: []string{"petrel", "r", "a"}, Track: "now",
			Start: Location{3, 0}, End: Location{5, 7}, Params: Pairs{{Key: ParamGroupOrder, Int: 1}}},
		Fetch{RequestID: 14, Type: FetchRelativeJoining, JoiningRequestID: 4, JoiningStart: 2},
		Fetch{RequestID: 16, Type: FetchAbsoluteJoining, JoiningRequestID: 4, JoiningStart: 1 << 40},
		FetchOK{EndOfTrack: true, End: Location{9, 3}, Params: Pairs{LargestObjectParam(Location{9, 2})}},
	}
	var wire []byte
	for _, m := range msgs {
		var err error
		if wire, err = AppendMessage(wire, m); err != nil {
			t.Fatal(err)
		}
	}
	br := bufio.NewReader(bytes.NewReader(wire))
	for _, want := range msgs {
		got, err := ReadMessage(br)
		if err != nil {
			t.Fatalf("%T: %v", want, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got, want)
		}
	}
}

func TestGarbageMessages(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 5000; i++ {
		b := make([]byte, rng.Intn(40))
		rng.Read(b)
		for _, typ := range []uint64{TypeSetup, TypeSubscribe, TypeSubscribeOK, TypeRequestError, TypeRequestOK, TypePublishNamespace, TypePublishDone,
			TypeSubscribeNamespace, TypeNamespace, TypeNamespaceDone, TypePublish, TypePublishOK, TypeFetch, TypeFetchOK} {
			_, _ = ParseMessage(typ, b) // must not panic
		}
		_, _ = ParseDatagram(b)
		_, _ = ReadMessage(bufio.NewReader(bytes.NewReader(b)))
	}
	bad := [][]byte{
		{},                       // empty subscribe
		{0x01, 0x00},             // namespace with 0 fields
		{0x01, 0x21},             // 33 fields
		{0x01, 0x01, 0x00, 0x00}, // empty field
	}
	for _, b := range bad {
		if _, err := ParseMessage(TypeSubscribe, b); err == nil {
			t.Errorf("subscribe % x accepted", b)
		}
	}
	// Trailing bytes after a complete message are an error.
	w, _ := AppendMessage(nil, PublishDone{Status: 1})
	if _, err := ParseMessage(TypePublishDone, append(w[3:], 0)); err == nil {
		t.Error("trailing byte accepted")
	}
}

func TestSubgroupStream(t *testing.T) {
	h := SubgroupHeader{TrackAlias: 3, Group: 12, Subgroup: 0, Priority: 1}
	b := AppendSubgroupHeader(nil, h)
	metas := []Meta{{TimestampUs: 1000, Keyframe: true, Codec: "vp8", Width: 640, Height: 480, AudioLevel: -1}, {TimestampUs: 34333, AudioLevel: -1}}
	b = AppendObject(b, -1, 0, &metas[0], []byte("key"))
	b = AppendObject(b, 0, 1, &metas[1], []byte("delta"))
	br := bufio.NewReader(bytes.NewReader(b))
	gh, err := ReadSubgroupHeader(br)
	if err != nil || gh.TrackAlias != 3 || gh.Group != 12 || gh.Priority != 1 || !gh.HasExtensions() {
		t.Fatalf("header %+v %v", gh, err)
	}
	or := NewObjectReader(br, gh, 1<<20)
	var o StreamObject
	for i, want := range []string{"key", "delta"} {
		if err := or.Next(&o); err != nil {
			t.Fatal(err)
		}
		var m Meta
		if err := ParseExtensions(o.Extensions, &m); err != nil {
			t.Fatal(err)
		}
		if o.ID != uint64(i) || string(o.Payload) != want || !reflect.DeepEqual(m, metas[i]) {
			t.Fatalf("object %d: id %d %q %+v", i, o.ID, o.Payload, m)
		}
	}
	if err := or.Next(&o); err == nil {
		t.Fatal("no EOF")
	}
	// Oversized object: refused by the reader, not allocated.
	b = AppendSubgroupHeader(nil, h)
	b = AppendVI(b, 0)
	b = AppendVI(b, 0)
	b = AppendVI(b, 100<<20)
	br = bufio.NewReader(bytes.NewReader(b))
	gh, _ = ReadSubgroupHeader(br)
	if err := NewObjectReader(br, gh, 1<<20).Next(&o); !errors.Is(err, ErrObjectTooLarge) {
		t.Fatalf("oversized object: %v", err)
	}
	// Every draft-18 subgroup type parses; FETCH (0x05) and others do not.
	for _, typ := range []uint64{0x10, 0x15, 0x1d, 0x35, 0x3d, 0x50, 0x55, 0x75, 0x7d} {
		b := AppendSubgroupHeader(nil, SubgroupHeader{Type: typ, TrackAlias: 1, Group: 2, Subgroup: 3, Priority: 4})
		if _, err := ReadSubgroupHeader(bufio.NewReader(bytes.NewReader(b))); err != nil {
			t.Errorf("type 0x%x: %v", typ, err)
		}
	}
	for _, typ := range []uint64{0x05, 0x16, 0x1e, 0x0f, 0x80} {
		if _, err := ReadSubgroupHeader(bufio.NewReader(bytes.NewReader(AppendVI(nil, typ)))); !errors.Is(err, ErrNotSubgroup) {
			t.Errorf("type 0x%x accepted", typ)
		}
	}
	if _, err := ReadSubgroupHeader(bufio.NewReader(bytes.NewReader([]byte{0x05, 1, 1}))); !errors.Is(err, ErrNotSubgroup) {
		t.Fatalf("fetch stream: %v", err)
	}
}

// fragments splits obj and returns the parsed fragments.
func fragments(t *testing.T, alias, group, object uint64, obj []byte, size int) []*Fragment {
	var out []*Fragment
	err := Split(alias, group, object, obj, size, nil, func(d []byte) {
		if len(d) > size {
			t.Fatalf("datagram of %d bytes > %d", len(d), size)
		}
		v, err := ParseDatagram(append([]byte(nil), d...))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v.(*Fragment))
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReassemblyLossDuplicationReorder(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	now := time.Unix(1000, 0)
	a := NewAssembler()
	objs := map[uint64][]byte{}
	var all []*Fragment
	for id := uint64(0); id < 20; id++ {
		obj := make([]byte, 500+rng.Intn(9000))
		rng.Read(obj)
		objs[id] = obj
		all = append(all, fragments(t, 1, 0, id, obj, 1215)...)
	}
	// Duplicate a quarter, shuffle, and lose 10%.
	for i := 0; i < len(all)/4; i++ {
		all = append(all, all[rng.Intn(len(all))])
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	lost := map[*Fragment]bool{}
	got := map[uint64][]byte{}
	for _, f := range all {
		if rng.Intn(10) == 0 {
			lost[f] = true
			continue
		}
		if obj, ok, err := a.Add(f, now); err != nil {
			t.Fatal(err)
		} else if ok {
			if _, dup := got[f.Object]; dup {
				t.Fatalf("object %d completed twice", f.Object)
			}
			got[f.Object] = obj
		}
	}
	// NACK round: the receiver asks, the sender answers from its copy.
	now = now.Add(20 * time.Millisecond)
	nacks, dropped := a.Nacks(now, 10*time.Millisecond, 50*time.Millisecond, time.Second)
	if len(dropped) != 0 {
		t.Fatalf("dropped %v before the deadline", dropped)
	}
	if len(got) < 20 && len(nacks) == 0 {
		t.Fatal("incomplete objects but no NACK")
	}
	for _, n := range nacks {
		resend := fragments(t, 1, 0, n.Object, objs[n.Object], 1215)
		for _, i := range n.Missing {
			if obj, ok, err := a.Add(resend[i], now); err != nil {
				t.Fatal(err)
			} else if ok {
				got[n.Object] = obj
			}
		}
	}
	for id, obj := range objs {
		if !bytes.Equal(got[id], obj) {
			t.Fatalf("object %d: %d bytes, want %d", id, len(got[id]), len(obj))
		}
	}
	if a.Pending() != 0 {
		t.Fatalf("%d objects left pending", a.Pending())
	}
}

func TestReassemblyFECAndDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	a := NewAssembler()
	obj := bytes.Repeat([]byte("keyframe-bytes."), 400)
	fr := fragments(t, 2, 5, 0, obj, 600)
	// XOR parity over all fragments.
	par := make([]byte, len(fr[0].Data))
	for _, f := range fr {
		for i, c := range f.Data {
			par[i] ^= c
		}
	}
	for i, f := range fr {
		if i == 3 {
			continue // lost
		}
		if _, ok, _ := a.Add(f, now); ok {
			t.Fatal("completed without fragment 3")
		}
	}
	got, ok := a.AddFEC(&FEC{TrackAlias: 2, Group: 5, Object: 0, First: 0, Count: len(fr), Parity: par}, now)
	if !ok || !bytes.Equal(got, obj) {
		t.Fatalf("FEC recovery failed: ok=%v", ok)
	}
	// An object that never completes is dropped at the deadline, not NACKed forever.
	fr = fragments(t, 2, 6, 0, obj, 600)
	a.Add(fr[0], now)
	_, dropped := a.Nacks(now.Add(2*time.Second), 10*time.Millisecond, 50*time.Millisecond, time.Second)
	if len(dropped) != 1 || dropped[0].Group != 6 {
		t.Fatalf("dropped %v", dropped)
	}
	// A fragment whose size disagrees with its header is refused.
	bad := *fr[1]
	bad.Data = bad.Data[:len(bad.Data)-1]
	if _, _, err := a.Add(&bad, now); err == nil {
		t.Fatal("short fragment accepted")
	}
}

// A small delta frame is one fragment: when it is lost whole, nothing of it is
// pending, and only the next object shows the gap. The receiver asks for its
// fragment 0, takes the answer, and gives up a gap nobody fills.
func TestReassemblyNacksSkippedObjects(t *testing.T) {
	now := time.Unix(1000, 0)
	a := NewAssembler()
	objs := map[uint64][]byte{}
	for id := uint64(0); id < 6; id++ {
		objs[id] = bytes.Repeat([]byte{byte(id)}, 300)
	}
	objs[4] = bytes.Repeat([]byte("big"), 1000) // three fragments, all lost
	for _, id := range []uint64{0, 1, 3, 5} {
		if _, ok, err := a.Add(fragments(t, 1, 3, id, objs[id], 1215)[0], now); err != nil || !ok {
			t.Fatalf("object %d: ok=%v err=%v", id, ok, err)
		}
	}
	nacks, _ := a.Nacks(now.Add(5*time.Millisecond), 10*time.Millisecond, 40*time.Millisecond, 400*time.Millisecond)
	if len(nacks) != 0 {
		t.Fatalf("NACKs within the reorder window: %v", nacks)
	}
	now = now.Add(20 * time.Millisecond)
	nacks, dropped := a.Nacks(now, 10*time.Millisecond, 40*time.Millisecond, 400*time.Millisecond)
	if len(dropped) != 0 || len(nacks) != 2 || nacks[0].Object != 2 || nacks[1].Object != 4 || len(nacks[0].Missing) != 1 || nacks[0].Missing[0] != 0 {
		t.Fatalf("nacks %+v dropped %v, want fragment 0 of objects 2 and 4", nacks, dropped)
	}
	// The sender answers object 2 with its one fragment, object 4 with fragment 0:
	// the rest of 4 is then NACKed as a partial object.
	if got, ok, _ := a.Add(fragments(t, 1, 3, 2, objs[2], 1215)[0], now); !ok || !bytes.Equal(got, objs[2]) {
		t.Fatal("object 2 not completed by its retransmission")
	}
	big := fragments(t, 1, 3, 4, objs[4], 1215)
	a.Add(big[0], now)
	now = now.Add(20 * time.Millisecond)
	nacks, _ = a.Nacks(now, 10*time.Millisecond, 40*time.Millisecond, 400*time.Millisecond)
	if len(nacks) != 1 || nacks[0].Object != 4 || len(nacks[0].Missing) != len(big)-1 {
		t.Fatalf("nacks %+v, want the rest of object 4", nacks)
	}
	for _, i := range nacks[0].Missing {
		if got, ok, _ := a.Add(big[i], now); ok && !bytes.Equal(got, objs[4]) {
			t.Fatal("object 4 corrupt")
		}
	}
	if a.Pending() != 0 {
		t.Fatalf("%d pending", a.Pending())
	}
	// A gap nobody fills is given up at the deadline, once.
	a.Add(fragments(t, 1, 3, 7, objs[0], 1215)[0], now) // skips 6
	_, dropped = a.Nacks(now.Add(time.Second), 10*time.Millisecond, 40*time.Millisecond, 400*time.Millisecond)
	if len(dropped) != 1 || dropped[0].Object != 6 {
		t.Fatalf("dropped %v, want object 6", dropped)
	}
	if nacks, dropped = a.Nacks(now.Add(2*time.Second), 10*time.Millisecond, 40*time.Millisecond, 400*time.Millisecond); len(nacks)+len(dropped) != 0 {
		t.Fatalf("after the deadline: nacks %v dropped %v", nacks, dropped)
	}
}

// The example bytes in docs/protocol.md, so the document stays exact.
func TestDocumentedExample(t *testing.T) {
	b, _ := AppendMessage(nil, Subscribe{RequestID: 0, Namespace: []string{"petrel", "r1", "alice"}, Track: "video"})
	want := append([]byte{0x03, 0x00, 0x19, 0x00, 0x03, 0x06}, "petrel"...)
	want = append(append(append(want, 0x02), "r1"...), 0x05)
	want = append(append(append(want, "alice"...), 0x05), "video"...)
	want = append(want, 0x00)
	if !bytes.Equal(b, want) {
		t.Fatalf("SUBSCRIBE example:\n got % x\nwant % x", b, want)
	}
	if b, _ := AppendMessage(nil, SubscribeOK{TrackAlias: 1}); !bytes.Equal(b, []byte{0x04, 0x00, 0x02, 0x01, 0x00}) {
		t.Fatalf("SUBSCRIBE_OK example: % x", b)
	}
}

// Every proper prefix of a request that starts a FETCH, PUBLISH or
// SUBSCRIBE_NAMESPACE is an error, never a panic or a shorter message.
func TestNewMessagesTruncated(t *testing.T) {
	for _, m := range []Message{
		SubscribeNamespace{RequestID: 6, Prefix: []string{"petrel", "r"}},
		Publish{RequestID: 10, Namespace: []string{"petrel", "r", "a"}, Track: "now", TrackAlias: 77},
		Fetch{RequestID: 12, Type: FetchStandalone, Namespace: []string{"petrel", "r"}, Track: "now", End: Location{5, 7}},
		Fetch{RequestID: 14, Type: FetchRelativeJoining, JoiningRequestID: 4, JoiningStart: 2},
		FetchOK{End: Location{9, 3}},
	} {
		b, _ := AppendMessage(nil, m)
		_, n, _ := ParseVI(b)
		payload := b[n+2:]
		for i := range payload {
			if _, err := ParseMessage(Type(m), payload[:i]); err == nil {
				t.Fatalf("%T cut to %d of %d bytes parsed", m, i, len(payload))
			}
		}
	}
	if _, err := ParseMessage(TypeFetch, []byte{0, 9, 0}); err == nil || !strings.Contains(err.Error(), "fetch type 0x9") {
		t.Fatalf("unknown fetch type: %v", err)
	}
	if _, err := ParseMessage(TypeFetchOK, []byte{2, 0, 0, 0}); err == nil {
		t.Fatal("end-of-track 2 accepted")
	}
}

// FETCH records: deltas across objects and groups, subgroups carried over or
// explicit, priorities carried over, extensions; the decoder reads back what
// the encoder wrote and refuses a truncated stream.
func TestFetchRecords(t *testing.T) {
	type rec struct {
		l    Location
		sub  uint64
		prio byte
		ext  []byte
		pl   string
	}
	recs := []rec{{Location{3, 0}, 0, 1, AppendExtensions(nil, &Meta{TimestampUs: 5, AudioLevel: -1})[1:], "a"},
		{Location{3, 1}, 0, 1, nil, "b"}, {Location{3, 4}, 0, 2, nil, "c"}, {Location{5, 0}, 7, 2, nil, "d"},
		{Location{5, 1}, 7, 2, nil, "e"}, {Location{5, 2}, 8, 2, nil, ""}, {Location{9, 3}, 2, 0, nil, "f"}}
	var enc FetchEncoder
	wire := AppendFetchHeader(nil, 42)
	boundary := map[int]bool{len(wire): true}
	for _, r := range recs {
		var err error
		if wire, err = enc.Append(wire, r.l, r.sub, r.prio, r.ext, []byte(r.pl)); err != nil {
			t.Fatal(err)
		}
		boundary[len(wire)] = true
	}
	if _, err := enc.Append(nil, Location{2, 0}, 0, 0, nil, nil); err == nil {
		t.Fatal("a record before the previous one was encoded")
	}
	br := bufio.NewReader(bytes.NewReader(wire))
	if typ, _ := ReadVI(br); typ != FetchHeaderType {
		t.Fatalf("type 0x%x", typ)
	}
	if id, err := ReadFetchHeader(br); err != nil || id != 42 {
		t.Fatalf("request id %d %v", id, err)
	}
	dec := NewFetchDecoder(br, 1<<20)
	for i, r := range recs {
		var o FetchObject
		if err := dec.Next(&o); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if o.Location != r.l || o.Subgroup != r.sub || o.Priority != r.prio || !bytes.Equal(o.Extensions, r.ext) || string(o.Payload) != r.pl {
			t.Fatalf("record %d: %+v, want %+v", i, o, r)
		}
	}
	var o FetchObject
	if err := dec.Next(&o); err != io.EOF {
		t.Fatalf("after the last record: %v", err)
	}
	for cut := 2; cut < len(wire); cut++ {
		br := bufio.NewReader(bytes.NewReader(wire[:cut]))
		_, _ = ReadVI(br)
		_, _ = ReadFetchHeader(br)
		dec := NewFetchDecoder(br, 1<<20)
		var err error
		for err == nil {
			err = dec.Next(&o)
		}
		// A cut at a record boundary is a clean end; anywhere else is not.
		if (err == io.EOF) != boundary[cut] {
			t.Fatalf("stream cut at %d of %d: %v", cut, len(wire), err)
		}
	}
}

// OBJECT_DATAGRAMs: the forms Petrel writes read back; every malformed form
// (bad type, empty extension block, no payload, trailing bytes after a status,
// truncation) is an error.
func TestObjectDatagrams(t *testing.T) {
	for _, d := range []ObjectDatagram{
		{TrackAlias: 1, Group: 2, Object: 0, Priority: 3, Payload: []byte("x")},
		{TrackAlias: 1, Group: 2, Object: 5, Priority: 3, Payload: []byte("xy"), EndOfGroup: true},
		{TrackAlias: 9, Group: 1 << 40, Object: 1, Priority: 0, Extensions: []byte{0x02, 0x05}, Payload: []byte("z")},
		{TrackAlias: 1, Group: 2, Object: 3, Priority: 3, HasStatus: true, Status: 3},
	} {
		b := AppendObjectDatagram(nil, &d)
		if !IsObjectDatagram(b[0]) {
			t.Fatalf("type 0x%x", b[0])
		}
		var got ObjectDatagram
		if err := ParseObjectDatagram(b, &got); err != nil || !reflect.DeepEqual(got, d) {
			t.Fatalf("%+v: got %+v %v", d, got, err)
		}
		for i := 1; i < len(b)-1; i++ {
			if err := ParseObjectDatagram(b[:i], &got); err == nil && !d.HasStatus && i < len(b)-len(d.Payload) {
				t.Fatalf("%+v cut to %d accepted", d, i)
			}
		}
	}
	// moq-clock's datagram: type 0x04 (object 0, priority given), priority 127.
	var got ObjectDatagram
	if err := ParseObjectDatagram([]byte{0x04, 0x01, 0x1e, 0x7f, '1', '2'}, &got); err != nil || got.Group != 30 || got.Priority != 127 || string(got.Payload) != "12" {
		t.Fatalf("moq-clock datagram: %+v %v", got, err)
	}
	for _, bad := range [][]byte{{0x01, 0x01, 0x00, 0x00, 0x80, 0x00, 'x'}, {0x00, 0x01, 0x00, 0x00, 0x80}, {0x20, 0x01, 0x00, 0x01, 0x80, 0x00, 0x00},
		{0x50, 0x01}, {0x22, 1, 1, 1, 1, 0}, {0x10, 1, 1, 1, 1, 'x'}} {
		if IsObjectDatagram(bad[0]) && ParseObjectDatagram(bad, &got) == nil {
			t.Fatalf("% x accepted", bad)
		}
	}
	for _, t2 := range []byte{0x50, 0x51, 0x52, 0x53, 0x10, 0x22, 0x30} {
		if IsObjectDatagram(t2) {
			t.Fatalf("0x%x taken for an OBJECT_DATAGRAM", t2)
		}
	}
}
