package session

import (
	"net"
	"strings"
	"testing"

	"github.com/pion/sdp/v3"
)

// A browser's offer: audio, video (VP8, H.264) and data, bundled.
const fuzzOffer = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1 2\r\n" +
	"a=fingerprint:sha-256 " + fuzzFP + "\r\na=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\na=setup:actpass\r\n" +
	"m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=recvonly\r\na=rtcp-mux\r\na=rtpmap:111 opus/48000/2\r\na=fmtp:111 minptime=10;useinbandfec=1\r\n" +
	"m=video 9 UDP/TLS/RTP/SAVPF 96 97 102\r\nc=IN IP4 0.0.0.0\r\na=mid:1\r\na=recvonly\r\na=rtcp-mux\r\na=rtcp-rsize\r\na=rtpmap:96 VP8/90000\r\na=rtcp-fb:96 nack\r\na=rtcp-fb:96 nack pli\r\n" +
	"a=rtpmap:97 rtx/90000\r\na=fmtp:97 apt=96\r\na=rtpmap:102 H264/90000\r\na=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r\n" +
	"a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n" +
	"m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:2\r\na=sctp-port:5000\r\na=max-message-size:262144\r\n"

const fuzzFP = "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89"

// FuzzOffer parses arbitrary offers as a WHEP viewer's, a data session's
// and a publisher's are: nothing panics, and an answer the server writes
// is SDP that parses.
func FuzzOffer(f *testing.F) {
	f.Add(fuzzOffer)
	f.Add(strings.ReplaceAll(fuzzOffer, "a=recvonly", "a=sendonly"))
	f.Add(strings.Replace(fuzzOffer, "a=mid:1", "a=bundle-only\r\na=mid:1", 1))
	f.Add("v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 /\r\na=fmtp:96 apt=\r\n")
	p := answerParams{ufrag: "uf", pwd: "pw", fingerprint: fuzzFP, ips: []net.IP{net.IPv4(127, 0, 0, 1)}, port: 9, cname: "c"}
	f.Fuzz(func(t *testing.T, text string) {
		o, err := parseOffer(text)
		if err != nil {
			return
		}
		_, _ = dataSection(o, "")
		answer, _, err := negotiate(o, testTracks, p, func() uint32 { return 1 })
		if err != nil {
			return
		}
		var s sdp.SessionDescription
		if err := s.UnmarshalString(answer); err != nil {
			t.Fatalf("the server's answer does not parse: %v\n%s", err, answer)
		}
	})
}

// A client's answer to the server's offer of a video and an audio section.
const fuzzAnswer = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n" +
	"a=fingerprint:sha-256 " + fuzzFP + "\r\na=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\na=setup:active\r\n" +
	"m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=recvonly\r\na=rtcp-mux\r\na=rtpmap:96 VP8/90000\r\n" +
	"a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n" +
	"m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:1\r\na=recvonly\r\na=rtcp-mux\r\na=rtpmap:111 opus/48000/2\r\n"

// FuzzAnswer applies arbitrary answers to a room subscriber's offer.
func FuzzAnswer(f *testing.F) {
	f.Add(fuzzAnswer)
	f.Add(strings.Replace(fuzzAnswer, "m=audio 9", "m=audio 0", 1))
	f.Add(strings.Replace(fuzzAnswer, "a=setup:active", "a=setup:actpass", 1))
	s := startServer(f)
	f.Fuzz(func(t *testing.T, text string) {
		v, err := s.NewSubscriber(newEvents())
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close("done")
		for _, tr := range testTracks {
			if _, err := v.AddTrack(tr); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := v.Offer(false); err != nil {
			t.Fatal(err)
		}
		acc, err := v.ApplyAnswer(text)
		if err == nil && len(acc) > len(testTracks) {
			t.Fatalf("%d sections accepted of %d offered", len(acc), len(testTracks))
		}
	})
}
