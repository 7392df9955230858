package signal

import (
	"strings"
	"testing"
)

func TestParseFrag(t *testing.T) {
	f := parseFrag("a=ice-ufrag:abc\r\na=ice-pwd:secret\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\na=candidate:1 1 udp 1 127.0.0.1 5000 typ host\r\na=end-of-candidates\r\n")
	if f.ufrag != "abc" || f.pwd != "secret" || f.mid != "0" || len(f.candidates) != 1 || !strings.HasPrefix(f.candidates[0], "candidate:1 ") {
		t.Fatalf("%+v", f)
	}
	many := strings.Repeat("a=candidate:1 1 udp 1 127.0.0.1 5000 typ host\r\n", 1000)
	if n := len(parseFrag(many).candidates); n != 64 {
		t.Fatalf("kept %d candidates, want the cap of 64", n)
	}
}

func TestReplaceICEAndAnswerFrag(t *testing.T) {
	sdp := "v=0\r\na=ice-ufrag:old\r\na=ice-pwd:oldpwd\r\nm=video 9 x\r\na=ice-ufrag:old\r\na=candidate:1 1 udp 1 127.0.0.1 5 typ host\r\n"
	got := replaceICE(sdp, "new", "newpwd")
	if strings.Contains(got, "old") || strings.Count(got, "a=ice-ufrag:new") != 2 {
		t.Fatalf("%q", got)
	}
	frag := answerFrag(got)
	if strings.Count(frag, "a=ice-ufrag:new") != 1 || !strings.Contains(frag, "a=candidate:") || strings.Contains(frag, "m=video") {
		t.Fatalf("frag %q", frag)
	}
}

func FuzzParseFrag(f *testing.F) {
	f.Add("a=ice-ufrag:abc\r\na=ice-pwd:x\r\na=mid:0\r\na=candidate:1 1 udp 1 127.0.0.1 5000 typ host\r\n")
	f.Fuzz(func(t *testing.T, s string) {
		fr := parseFrag(s)
		if len(fr.candidates) > 64 {
			t.Fatal("candidate cap exceeded")
		}
		_ = answerFrag(replaceICE(s, "u", "p"))
	})
}
