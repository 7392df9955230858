package protocol

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		code string // "" = valid
	}{
		{`{"type":"join","token":"t","protocol":1}`, ""},
		{`{"type":"join"}`, CodeUnauthorized},
		{`{"type":"join","token":"t","resume":{"participantSid":"PA_x"}}`, CodeBadRequest},
		{`  {"type":"ping","id":3}  `, ""},
		{`{"type":"ping"} {"type":"ping"}`, CodeInvalidJSON},
		{`[]`, CodeInvalidJSON},
		{``, CodeInvalidJSON},
		{`{"type":`, CodeInvalidJSON},
		{`{"type":5}`, CodeBadRequest},
		{`{"id":"x","type":"ping"}`, CodeBadRequest},
		{`{}`, CodeBadRequest},
		{`{"type":"teleport"}`, CodeUnknownType},
		{`{"type":"offer"}`, CodeBadRequest},
		{`{"type":"offer","sdp":"v=0"}`, ""},
		{`{"type":"trickle","target":"both"}`, CodeBadRequest},
		{`{"type":"trickle","target":"publisher","candidate":{"candidate":"candidate:1 1 udp 1 127.0.0.1 9 typ host"}}`, ""},
		{`{"type":"publishTrack","cid":"c","kind":"video","source":"camera"}`, ""},
		{`{"type":"publishTrack","cid":"c","kind":"smell","source":"camera"}`, CodeBadRequest},
		{`{"type":"publishTrack","cid":"c","kind":"video","source":"nose"}`, CodeBadRequest},
		{`{"type":"publishTrack","cid":"","kind":"video"}`, CodeBadRequest},
		{`{"type":"publishTrack","cid":"c","kind":"video","width":-1}`, CodeBadRequest},
		{`{"type":"muteTrack","trackSid":"TR_1"}`, CodeBadRequest},
		{`{"type":"muteTrack","trackSid":"TR_1","muted":false}`, ""},
		{`{"type":"subscribe","trackSids":[],"subscribe":true}`, CodeBadRequest},
		{`{"type":"subscribe","trackSids":["a"],"subscribe":true}`, ""},
		{`{"type":"updateMetadata","metadata":"` + strings.Repeat("m", 20000) + `"}`, CodeBadRequest},
		{`{"type":"updateMetadata","name":"ok"}`, ""},
		{`{"type":"muteTrack","trackSid":"TR_1","muted":"yes"}`, CodeBadRequest},
		{`{"type":"setLastN","n":1.5}`, CodeBadRequest},
		{`{"type":"setLastN","n":2}`, ""},
		{`{"type":"publishTrack","cid":"c","kind":"video","name":"` + strings.Repeat("n", 300) + `"}`, CodeBadRequest},
		{`{"type":"join","token":"t","protocol":1,"name":"` + strings.Repeat("n", 300) + `"}`, CodeBadRequest},
		{`{"type":"relay","to":"PA_1","data":{"x":[1,2]}}`, ""},
		{`{"type":"relay","to":"PA_1"}`, CodeBadRequest},
		{`{"type":"ping","t":"now"}`, CodeBadRequest},
	} {
		_, err := Parse([]byte(tc.in))
		got := ""
		if err != nil {
			got = CodeOf(err)
		}
		if got != tc.code {
			t.Errorf("%.60s: got %q (%v), want %q", tc.in, got, err, tc.code)
		}
	}
}

// A request refused after its envelope parsed keeps its id, so the error
// answers it.
func TestParseKeepsID(t *testing.T) {
	r, err := Parse([]byte(`{"type":"muteTrack","id":9,"trackSid":"TR_1"}`))
	if CodeOf(err) != CodeBadRequest || r == nil || r.ID == nil || *r.ID != 9 {
		t.Fatalf("got %+v, %v", r, err)
	}
	if r, err := Parse([]byte(`{"type":"teleport","id":4}`)); CodeOf(err) != CodeUnknownType || r == nil || *r.ID != 4 {
		t.Fatalf("unknown type: %+v, %v", r, err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"type":"join","token":"t","protocol":1}`, `{"type":"publishTrack","cid":"c","kind":"video","source":"camera"}`, `{"type":"trickle","target":"publisher","candidate":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err == nil && (r.Type == "" || r.Msg == nil || r.Msg.MsgType() != r.Type) {
			t.Fatalf("valid request %+v without its message", r)
		}
		if err != nil && CodeOf(err) == CodeInternal {
			t.Fatalf("parse error without a protocol code: %v", err)
		}
	})
}

// Every message marshals flat with its type first, and a client message
// parses back into the same value.
func TestMessagesRoundTrip(t *testing.T) {
	for _, m := range append(append([]Message{}, ClientMessages...), ServerMessages...) {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !strings.HasPrefix(string(b), `{"type":"`+m.MsgType()+`"`) || !json.Valid(b) {
			t.Errorf("%T marshals as %s", m, b)
		}
	}
	muted, name := true, "cam"
	for _, m := range []Message{
		PublishTrack{Cid: "c", Kind: KindVideo, Source: SourceCamera, Name: &name, Muted: &muted, Width: 640, Height: 360,
			Layers: []LayerInfo{{RID: "q", Width: 160, Height: 90}}},
		MuteTrack{TrackSid: "TR_1", Muted: &muted},
		Relay{To: "PA_1", Data: json.RawMessage(`{"a":1}`)},
		Leave{},
	} {
		b, _ := json.Marshal(m)
		r, err := Parse(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(r.Msg, m) || r.Type != m.MsgType() {
			t.Errorf("%s parsed as %#v", b, r.Msg)
		}
	}
}

// The wire of a server message is what it was as a map: same keys, same values.
func TestServerWire(t *testing.T) {
	id := int64(7)
	for _, tc := range []struct {
		m    Message
		want string
	}{
		{ErrorMsg(&id, Errorf(CodeNotFound, "no track")), `{"type":"error","id":7,"code":"not_found","message":"no track"}`},
		{ErrorMsg(nil, Errorf(CodeBadRequest, "x")), `{"type":"error","code":"bad_request","message":"x"}`},
		{Reply(&id, nil), `{"type":"response","id":7}`},
		{TrackDemand{TrackSid: "TR_1", Active: true, Layers: []bool{true, false, false}}, `{"type":"trackDemand","trackSid":"TR_1","active":true,"layers":[true,false,false]}`},
		{Relayed{From: "PA_1", Data: json.RawMessage(`[1]`)}, `{"type":"relay","from":"PA_1","data":[1]}`},
		{LeaveNotice{Reason: "kicked", Message: "bye"}, `{"type":"leave","reason":"kicked","message":"bye"}`},
	} {
		b, err := json.Marshal(tc.m)
		if err != nil || string(b) != tc.want {
			t.Errorf("got %s (%v), want %s", b, err, tc.want)
		}
	}
	if Reply(nil, nil) != nil {
		t.Error("a request without an id got a reply")
	}
}
