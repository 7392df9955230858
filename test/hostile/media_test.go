package hostile

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/test/redistest"
)

// loopbackAPI is a Pion client that gathers only loopback UDP candidates.
func loopbackAPI() *webrtc.API {
	se := webrtc.SettingEngine{}
	se.SetIncludeLoopbackCandidate(true)
	se.SetICEMulticastDNSMode(0)
	se.SetInterfaceFilter(func(name string) bool { return name == "lo" })
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	m := &webrtc.MediaEngine{}
	if err := m.RegisterDefaultCodecs(); err != nil {
		panic(err)
	}
	return webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithSettingEngine(se))
}

// manySections is a publisher offer of n video sections, each as short as
// a parser takes it, so that 500 fit in the server's SDP size limit.
func manySections(t *testing.T, n int) string {
	t.Helper()
	pc, err := loopbackAPI().NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly}); err != nil {
		t.Fatal(err)
	}
	o, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	var ufrag, pwd, fp string
	for _, l := range strings.Split(o.SDP, "\r\n") {
		switch {
		case strings.HasPrefix(l, "a=ice-ufrag:"):
			ufrag = l
		case strings.HasPrefix(l, "a=ice-pwd:"):
			pwd = l
		case strings.HasPrefix(l, "a=fingerprint:"):
			fp = l
		}
	}
	var b strings.Builder
	b.WriteString("v=0\no=- 1 1 IN IP4 0.0.0.0\ns=-\nt=0 0\na=setup:actpass\n" + fp + "\n" + ufrag + "\n" + pwd + "\na=group:BUNDLE")
	for i := 0; i < n; i++ {
		b.WriteString(" " + strconv.Itoa(i))
	}
	b.WriteString("\n")
	for i := 0; i < n; i++ {
		b.WriteString("m=video 9 UDP/TLS/RTP/SAVPF 96\nc=IN IP4 0.0.0.0\na=mid:" + strconv.Itoa(i) + "\na=sendonly\na=rtpmap:96 VP8/90000\n")
	}
	return b.String()
}

// postSDP sends an offer to a WHIP or WHEP endpoint and returns the status
// and the body.
func postSDP(t *testing.T, url, token, offer string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(offer))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/sdp")
	req.Header.Set("Authorization", "Bearer "+token)
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func codeOf(body []byte) string {
	var e struct{ Code string }
	_ = json.Unmarshal(body, &e)
	return e.Code
}

// wsOffer joins room over the WebSocket protocol, sends offer and returns
// the first answer or error the server sends back.
func wsOffer(t *testing.T, s *Server, token, offer string) protocol.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, s.WS, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	send := func(m protocol.Msg) {
		b, _ := json.Marshal(m)
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	send(protocol.Msg{"type": "join", "protocol": 1, "token": token})
	joined := false
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("websocket read: %v", err)
		}
		var m protocol.Msg
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		switch m["type"] {
		case "joined":
			if !joined {
				joined = true
				send(protocol.Msg{"type": "offer", "sdp": offer, "id": 1})
			}
		case "answer", "error":
			if !joined {
				t.Fatalf("join: %v", m)
			}
			c.Close(websocket.StatusNormalClosure, "")
			return m
		}
	}
}

// settle waits for the server's goroutines to come back to at most want,
// and returns the last count.
func settle(t *testing.T, s *Server, want int, within time.Duration) int {
	t.Helper()
	g := s.Goroutines(t)
	for deadline := time.Now().Add(within); g > want && time.Now().Before(deadline); g = s.Goroutines(t) {
		time.Sleep(200 * time.Millisecond)
	}
	return g
}

// TestOfferWith500Sections: offers of 500 media sections, over WHIP, WHEP
// and the room protocol, are refused with too_many_tracks before the server
// builds anything of them, again and again, and the server's goroutines and
// memory stay where they were.
func TestOfferWith500Sections(t *testing.T) {
	// 48 joins from one address in a second: the per-address join limit is
	// another test's subject.
	s := Start(t, Options{Args: []string{"--joins-per-ip", "0"}})
	big := manySections(t, 500)
	pub := auth.Grants{Publish: true, Subscribe: true, PublishData: true}
	attack := func(i int) {
		st, body := postSDP(t, s.URL+"/whip/sections", s.Token(t, "sections", "whip", pub), big)
		if st != http.StatusTooManyRequests || codeOf(body) != protocol.CodeTooManyTracks {
			t.Fatalf("WHIP offer of 500 sections: %d %s, want 429 %s", st, body, protocol.CodeTooManyTracks)
		}
		st, body = postSDP(t, s.URL+"/whep/sections", s.Token(t, "sections", "whep", auth.Grants{Subscribe: true}), big)
		if st != http.StatusTooManyRequests || codeOf(body) != protocol.CodeTooManyTracks {
			t.Fatalf("WHEP offer of 500 sections: %d %s, want 429 %s", st, body, protocol.CodeTooManyTracks)
		}
		m := wsOffer(t, s, s.Token(t, "sections", "ws", pub), big)
		if m["type"] != "error" || m["code"] != protocol.CodeTooManyTracks || m["message"] == "" {
			t.Fatalf("room offer of 500 sections: %v, want error %s", m, protocol.CodeTooManyTracks)
		}
	}
	attack(0) // the first refusal loads what a refusal uses
	g0 := settle(t, s, 0, 2*time.Second)
	rss0 := s.RSS(t)
	for i := 1; i <= 15; i++ {
		attack(i)
	}
	s.Healthy(t)
	if g := settle(t, s, g0+5, 10*time.Second); g > g0+5 {
		t.Errorf("goroutines %d after the attack, %d before", g, g0)
	}
	if rss := s.RSS(t); rss > rss0+24<<20 {
		t.Errorf("RSS %d MiB after the attack, %d MiB before", rss>>20, rss0>>20)
	}
	// An offer within the limit is still answered.
	if m := wsOffer(t, s, s.Token(t, "sections", "fine", pub), manySections(t, 3)); m["type"] != "answer" {
		t.Fatalf("an offer of 3 sections: %v", m)
	}
}

// publishWHIP connects a Pion WHIP publisher with n video tracks and
// returns them.
func publishWHIP(t *testing.T, s *Server, token string, n int) []*webrtc.TrackLocalStaticRTP {
	t.Helper()
	pc, err := loopbackAPI().NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	var tracks []*webrtc.TrackLocalStaticRTP
	for i := 0; i < n; i++ {
		id := string(rune('a' + i))
		tr, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, "v"+id, "s"+id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pc.AddTransceiverFromTrack(tr, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly}); err != nil {
			t.Fatal(err)
		}
		tracks = append(tracks, tr)
	}
	connected := make(chan struct{})
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		if st == webrtc.PeerConnectionStateConnected {
			close(connected)
		}
	})
	st, body := postSDP(t, s.URL+"/whip/extra", token, localOffer(t, pc))
	if st != http.StatusCreated {
		t.Fatalf("WHIP: %d %s", st, body)
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(body)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-connected:
	case <-time.After(10 * time.Second):
		t.Fatal("the WHIP publisher did not connect")
	}
	return tracks
}

// sendTracks adds n VP8 tracks to pc, sent only.
func sendTracks(t *testing.T, pc *webrtc.PeerConnection, n int) []*webrtc.TrackLocalStaticRTP {
	t.Helper()
	var tracks []*webrtc.TrackLocalStaticRTP
	for i := 0; i < n; i++ {
		id := strconv.Itoa(i)
		tr, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, "v"+id, "s"+id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pc.AddTransceiverFromTrack(tr, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly}); err != nil {
			t.Fatal(err)
		}
		tracks = append(tracks, tr)
	}
	return tracks
}

func waitConnected(t *testing.T, pc *webrtc.PeerConnection) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); pc.ConnectionState() != webrtc.PeerConnectionStateConnected; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the publisher did not connect: %s", pc.ConnectionState())
		}
	}
}

// flood writes about 500 packets a second on each track for d.
func flood(d time.Duration, tracks []*webrtc.TrackLocalStaticRTP) {
	payload := bytes.Repeat([]byte{0x10, 0, 0, 0x9d, 0x01, 0x2a}, 200)
	seq := uint16(0)
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		seq++
		for _, tr := range tracks {
			_ = tr.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: uint32(seq) * 3000, Marker: true}, Payload: payload})
		}
	}
}

// TestExtraTracksStopped: publishers at the track limit that send more
// tracks (within the offer's allowance) have them refused and stopped, on
// the lean publisher side: none of the refused tracks' packets wait in a
// queue, so flooding them costs the server no memory and no goroutines.
// (Through a PeerConnection, Pion's receive buffer per stream is capped at
// 256 KB by rtc's buffer factory, and the section limit bounds the streams.)
func TestExtraTracksStopped(t *testing.T) {
	s := Start(t, Options{Args: []string{"--max-tracks", "1"}})
	const publishers, perPublisher = 3, 5
	var all [][]*webrtc.TrackLocalStaticRTP
	for i := 0; i < publishers; i++ {
		pc, err := loopbackAPI().NewPeerConnection(webrtc.Configuration{})
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		tracks := sendTracks(t, pc, perPublisher)
		st, body := postSDP(t, s.URL+"/whip/extra", s.Token(t, "extra", "pub"+strconv.Itoa(i), auth.Grants{Publish: true}), localOffer(t, pc))
		if st != http.StatusCreated {
			t.Fatalf("WHIP: %d %s", st, body)
		}
		if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(body)}); err != nil {
			t.Fatal(err)
		}
		waitConnected(t, pc)
		all = append(all, tracks)
	}
	heap := func() int64 {
		v, ok := s.Metric(t, "go_memstats_heap_inuse_bytes")
		if !ok {
			t.Fatal("no go_memstats_heap_inuse_bytes in /metrics")
		}
		return int64(v)
	}
	var allowed, extra []*webrtc.TrackLocalStaticRTP
	for _, trs := range all {
		allowed, extra = append(allowed, trs[0]), append(extra, trs[1:]...)
	}
	flood(2*time.Second, allowed) // the allowed tracks' caches fill
	heap0, g0 := heap(), s.Goroutines(t)
	flood(3*time.Second, append(allowed, extra...))
	s.WaitLog(t, "track refused: too many tracks", 5*time.Second)
	h := heap()
	t.Logf("heap %d KiB before the extra tracks, %d KiB after flooding them", heap0>>10, h>>10)
	if g := settle(t, s, g0+2, 5*time.Second); g > g0+2 {
		t.Errorf("goroutines %d after flooding refused tracks, %d before", g, g0)
	}
	// Queued, each refused track would hold a full queue (about 1 MB here).
	if grown := h - heap0; grown > int64(len(extra))<<20/4 {
		t.Errorf("heap grew by %d KiB while %d refused tracks were flooded", grown>>10, len(extra))
	}
	s.Healthy(t)
}

// startRedis runs redis-server on a free loopback port for the test.
func startRedis(t *testing.T) string {
	t.Helper()
	return redistest.Start(t, "127.0.0.1", func(port int) []string { return []string{"--port", strconv.Itoa(port)} })
}

type captured struct {
	auth string
	body []byte
}

// TestNodeLinkReplay: a node-to-node link request captured on the wire (a
// proxy sits in front of node b) cannot be sent again, nor sent with
// another body: the token was made for that one request.
func TestNodeLinkReplay(t *testing.T) {
	redis := startRedis(t)
	var target atomic.Value // node b's URL, once it runs
	got := make(chan captured, 4)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/cluster/link" {
			select {
			case got <- captured{auth: r.Header.Get("Authorization"), body: body}:
			default:
			}
		}
		req, _ := http.NewRequest(r.Method, target.Load().(string)+r.URL.RequestURI(), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	defer proxy.Close()
	cluster := []string{"--redis", redis, "--cluster-heartbeat", "200ms", "--cluster-node-ttl", "1500ms", "--turn=false"}
	b := Start(t, Options{Args: append([]string{"--node-id", "b", "--node-url", proxy.URL}, cluster...)})
	target.Store(b.URL)
	a := Start(t, Options{Args: append([]string{"--node-id", "a"}, cluster...)})
	// A participant on each node in one room makes the nodes link (a dials b).
	for _, s := range []*Server{a, b} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, s.WS, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		msg, _ := json.Marshal(protocol.Msg{"type": "join", "protocol": 1, "token": s.Token(t, "linked", "p-"+s.URL, auth.Grants{Subscribe: true})})
		if err := c.Write(context.Background(), websocket.MessageText, msg); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					return
				}
			}
		}()
	}
	var req captured
	select {
	case req = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("no node link request in 15 s")
	}
	b.WaitLog(t, "node link accepted", 5*time.Second)
	send := func(body []byte) (int, string) {
		r, _ := http.NewRequest(http.MethodPost, b.URL+"/v1/cluster/link", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", req.auth)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	if st, body := send(req.body); st != http.StatusUnauthorized || !strings.Contains(body, "already used") {
		t.Errorf("the captured link request sent again: %d %s, want 401 already used", st, body)
	}
	altered := bytes.Replace(req.body, []byte(`"from":"a"`), []byte(`"from":"a","x":1`), 1)
	if st, body := send(altered); st != http.StatusUnauthorized || !strings.Contains(body, "another request") {
		t.Errorf("the captured token with another body: %d %s, want 401", st, body)
	}
	a.Healthy(t)
	b.Healthy(t)
}
