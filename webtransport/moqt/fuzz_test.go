package moqt

import (
	"bufio"
	"bytes"
	"testing"
	"time"
)

// FuzzControlMessage: control messages a peer sends on the control stream
// never panic the parser, and whatever parses encodes again.
func FuzzControlMessage(f *testing.F) {
	for _, m := range []Message{
		Setup{Params: Pairs{{Key: ParamPath, Bytes: []byte("/moq")}}},
		Subscribe{RequestID: 4, Namespace: []string{"petrel", "room", "alice"}, Track: "video", Params: Pairs{{Key: ParamForward, Int: 1}}},
		SubscribeOK{TrackAlias: 9, Params: Pairs{{Key: ParamGroupOrder, Int: 1}}, Extensions: Pairs{{Key: 0x2, Int: 1000}}},
		RequestError{Code: ErrCodeDoesNotExist, Reason: "no such track"},
		PublishDone{Status: 2, StreamCount: 3, Reason: "bye"},
		SubscribeNamespace{RequestID: 6, Prefix: []string{"petrel", "r"}},
		Publish{RequestID: 10, Namespace: []string{"petrel", "r", "a"}, Track: "now", TrackAlias: 77},
		Fetch{RequestID: 12, Type: FetchStandalone, Namespace: []string{"petrel", "r"}, Track: "v", Start: Location{1, 0}, End: Location{2, 0}},
		FetchOK{EndOfTrack: true, End: Location{3, 4}},
	} {
		if b, err := AppendMessage(nil, m); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte{0x20, 0x00, 0x00})
	f.Add([]byte{0x03, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReader(bytes.NewReader(b))
		for i := 0; i < 8; i++ {
			m, err := ReadMessage(br)
			if err != nil {
				return
			}
			if _, ok := m.(Unknown); ok {
				continue
			}
			if _, err := AppendMessage(nil, m); err != nil {
				t.Logf("parsed %T does not encode: %v", m, err)
			}
		}
	})
}

// FuzzDatagram: datagrams (Petrel's fragments, NACKs, keyframe requests and
// FEC, and MoQT OBJECT_DATAGRAMs) never panic the parsers, and what parses
// goes through reassembly without a panic either.
func FuzzDatagram(f *testing.F) {
	var seeds [][]byte
	_ = Split(1, 2, 3, bytes.Repeat([]byte("petrel"), 100), 200, nil, func(d []byte) { seeds = append(seeds, append([]byte(nil), d...)) })
	seeds = append(seeds,
		AppendNack(nil, &Nack{TrackAlias: 1, Group: 2, Object: 3, Missing: []int{0, 2}}),
		AppendKeyframeRequest(nil, &KeyframeRequest{TrackAlias: 1, GroupSeen: 7}),
		AppendFEC(nil, &FEC{TrackAlias: 1, Group: 2, Object: 3, First: 0, Count: 2, Parity: []byte("xor")}),
		AppendObjectDatagram(nil, &ObjectDatagram{TrackAlias: 1, Group: 2, Object: 5, Priority: 3, Payload: []byte("xy"), EndOfGroup: true}),
		AppendObjectDatagram(nil, &ObjectDatagram{TrackAlias: 9, Group: 1 << 40, Object: 1, Extensions: []byte{0x02, 0x05}, Payload: []byte("z")}),
		[]byte{0x04, 0x01, 0x1e, 0x7f, '1', '2'},
	)
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 0 && IsObjectDatagram(b[0]) {
			var d ObjectDatagram
			if ParseObjectDatagram(b, &d) == nil {
				var m Meta
				_ = ParseExtensions(d.Extensions, &m)
			}
			return
		}
		v, err := ParseDatagram(b)
		if err != nil {
			return
		}
		a := NewAssembler()
		now := time.Unix(0, 0)
		switch d := v.(type) {
		case *Fragment:
			_, _, _ = a.Add(d, now)
		case *FEC:
			_, _ = a.AddFEC(d, now)
		}
		a.Nacks(now.Add(time.Second), 10*time.Millisecond, 10*time.Millisecond, time.Second)
	})
}

// FuzzSubgroupStream: a subgroup stream's header and objects, as a peer
// writes them on a unidirectional stream.
func FuzzSubgroupStream(f *testing.F) {
	h := SubgroupHeader{TrackAlias: 3, Group: 12, Priority: 1}
	b := AppendSubgroupHeader(nil, h)
	b = AppendObject(b, -1, 0, &Meta{TimestampUs: 1000, Keyframe: true, Codec: "vp8", Width: 640, Height: 480, AudioLevel: -1}, []byte("key"))
	b = AppendObject(b, 0, 1, &Meta{TimestampUs: 34333, AudioLevel: -1}, []byte("delta"))
	f.Add(b)
	f.Add(AppendSubgroupHeader(nil, SubgroupHeader{Type: 0x35, TrackAlias: 1, Group: 2, Subgroup: 3, Priority: 4}))
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReader(bytes.NewReader(b))
		gh, err := ReadSubgroupHeader(br)
		if err != nil {
			return
		}
		or := NewObjectReader(br, gh, 1<<16)
		var o StreamObject
		for i := 0; i < 64 && or.Next(&o) == nil; i++ {
			var m Meta
			_ = ParseExtensions(o.Extensions, &m)
		}
	})
}
