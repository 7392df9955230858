package protocol

import (
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

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"type":"join","token":"t","protocol":1}`, `{"type":"publishTrack","cid":"c","kind":"video","source":"camera"}`, `{"type":"trickle","target":"publisher","candidate":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err == nil && r.Type == "" {
			t.Fatal("valid request without a type")
		}
		if err != nil && CodeOf(err) == CodeInternal {
			t.Fatalf("parse error without a protocol code: %v", err)
		}
	})
}
