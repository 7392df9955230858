package hostile

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
)

// The front door's attacks: floods of joins with bad tokens, slow and idle
// connections, many connections from one address, loopback-only endpoints
// reached through a rebinding name or a proxy, forwarded client addresses, and
// WHIP/WHEP session URLs for rooms whose names hold a slash.

// frontDialer dials from a chosen loopback source address, so that an
// attacker and a legitimate client are different addresses, as on the internet.
func frontDialer(from string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
}

func frontClient(from string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: frontDialer(from).DialContext}}
}

// frontJoin opens the signaling WebSocket from the address from, sends a join
// with token and returns the first answer's type and code.
func frontJoin(ctx context.Context, s *Server, from, token string, header http.Header) (typ, code string, err error) {
	c, _, err := websocket.Dial(ctx, s.WS, &websocket.DialOptions{HTTPClient: frontClient(from), HTTPHeader: header})
	if err != nil {
		return "", "", err
	}
	defer c.CloseNow()
	join, _ := json.Marshal(map[string]any{"type": "join", "id": 1, "protocol": 1, "token": token})
	if err := c.Write(ctx, websocket.MessageText, join); err != nil {
		return "", "", err
	}
	_, b, err := c.Read(ctx)
	if err != nil {
		return "", "", err
	}
	var m struct{ Type, Code string }
	if err := json.Unmarshal(b, &m); err != nil {
		return "", "", err
	}
	if m.Type == "joined" {
		leave, _ := json.Marshal(map[string]any{"type": "leave"})
		_ = c.Write(ctx, websocket.MessageText, leave)
		_ = c.Close(websocket.StatusNormalClosure, "")
	}
	return m.Type, m.Code, nil
}

// TestGarbageJoinFlood: 16 workers send joins with garbage tokens from one
// address while a client on another address joins another room about nine
// times a second, 50 times; at least 99% of those joins must complete
// within 1 s, and the refusals must not flood the log.
func TestGarbageJoinFlood(t *testing.T) {
	s := Start(t, Options{})
	// The flood lasts as long as the real joins (about 6 s), 20 s at most.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logBefore := len(s.Logs())
	var garbage atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				jctx, jcancel := context.WithTimeout(ctx, 2*time.Second)
				if typ, _, err := frontJoin(jctx, s, "127.0.0.2", fmt.Sprintf("garbage.%d.%d", w, i), nil); err == nil && typ == "error" {
					garbage.Add(1)
				}
				jcancel()
			}
		}(w)
	}
	var ok, total int
	var failures []string
	tick := time.NewTicker(110 * time.Millisecond)
	for i := 0; i < 50 && ctx.Err() == nil; i++ {
		<-tick.C
		tok := s.Token(t, "real", fmt.Sprintf("user-%d", i), auth.Grants{Publish: true, Subscribe: true})
		start := time.Now()
		jctx, jcancel := context.WithTimeout(context.Background(), 3*time.Second)
		typ, code, err := frontJoin(jctx, s, "127.0.0.3", tok, nil)
		jcancel()
		took := time.Since(start)
		total++
		if err == nil && typ == "joined" && took <= time.Second {
			ok++
		} else if len(failures) < 5 {
			failures = append(failures, fmt.Sprintf("%s %s %v after %s", typ, code, err, took.Round(time.Millisecond)))
		}
	}
	tick.Stop()
	cancel()
	wg.Wait()
	t.Logf("%d garbage joins refused; %d of %d real joins within 1 s", garbage.Load(), ok, total)
	if garbage.Load() < 100 {
		t.Fatalf("only %d garbage joins were answered: the flood did not happen", garbage.Load())
	}
	if total < 50 || ok*100 < total*99 {
		t.Fatalf("%d of %d real joins succeeded within 1 s (want 99%%); first failures: %q", ok, total, failures)
	}
	lines := 0
	for _, l := range strings.Split(s.Logs()[logBefore:], "\n") {
		if strings.Contains(l, "refused") {
			lines++
		}
	}
	if lines > 5 {
		t.Fatalf("%d log lines for a flood of %d refused joins: refusals must be summarized\n%s", lines, garbage.Load(), tail(s.Logs(), 2000))
	}
	s.Healthy(t)
}

// frontClosedWithin reads from c until the server closes it, and fails unless
// that happens within d.
func frontClosedWithin(t *testing.T, c net.Conn, d time.Duration, what string) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection is still open after %s", what, d)
	}
	t.Logf("%s: closed after %s", what, time.Since(start).Round(10*time.Millisecond))
}

// TestSlowAndIdleConnections: trickled request headers, a trickled WHIP body
// and an idle keep-alive connection are each closed within their timeout,
// while a joined signaling WebSocket, which is long-lived by design, stays up.
func TestSlowAndIdleConnections(t *testing.T) {
	s := Start(t, Options{YAML: "limits:\n  http_header_timeout: 1s\n  http_body_timeout: 2s\n  http_idle_timeout: 2s\n  http_write_timeout: 2s\n"})
	addr := strings.TrimPrefix(s.URL, "http://")
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	// A joined WebSocket outlives every one of those timeouts.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, s.WS, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	join, _ := json.Marshal(map[string]any{"type": "join", "id": 1, "protocol": 1, "token": s.Token(t, "slow", "ws", auth.Grants{Subscribe: true})})
	if err := ws.Write(ctx, websocket.MessageText, join); err != nil {
		t.Fatal(err)
	}
	if _, b, err := ws.Read(ctx); err != nil || !strings.Contains(string(b), `"joined"`) {
		t.Fatalf("join: %v %s", err, b)
	}

	var wg sync.WaitGroup
	run := func(name string, f func(t *testing.T)) {
		wg.Add(1)
		go func() { defer wg.Done(); t.Run(name, f) }()
	}
	run("trickled headers", func(t *testing.T) {
		c := dial()
		go func() {
			for _, b := range []byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + strings.Repeat("a", 40)) {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		frontClosedWithin(t, c, 4*time.Second, "trickled headers")
	})
	run("trickled WHIP body", func(t *testing.T) {
		c := dial()
		tok := s.Token(t, "slow", "pub", auth.Grants{Publish: true})
		head := "POST /whip/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + tok +
			"\r\nContent-Type: application/sdp\r\nContent-Length: 20000\r\n\r\nv=0\r\n"
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
		go func() {
			for i := 0; i < 100; i++ {
				if _, err := c.Write([]byte("a=x\r\n")); err != nil {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		_ = c.SetReadDeadline(time.Now().Add(6 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to the trickled body: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("trickled body answered %s, want 408", resp.Status)
		}
		frontClosedWithin(t, c, 2*time.Second, "trickled WHIP body")
	})
	run("idle keep-alive", func(t *testing.T) {
		c := dial()
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		frontClosedWithin(t, c, 5*time.Second, "idle keep-alive")
	})
	wg.Wait()
	time.Sleep(time.Second) // past every HTTP timeout since the join

	ping, _ := json.Marshal(map[string]any{"type": "ping", "id": 2})
	if err := ws.Write(ctx, websocket.MessageText, ping); err != nil {
		t.Fatalf("the joined WebSocket was closed: %v", err)
	}
	if _, b, err := ws.Read(ctx); err != nil || !strings.Contains(string(b), `"pong"`) {
		t.Fatalf("the joined WebSocket no longer answers: %v %s", err, b)
	}
	s.Healthy(t)
}

// TestConnectionsPerAddress: one address opening far more connections than
// the per-address cap gets the surplus closed at once, while another address
// is still served.
func TestConnectionsPerAddress(t *testing.T) {
	s := Start(t, Options{YAML: "limits:\n  max_conns_per_ip: 20\n"})
	addr := strings.TrimPrefix(s.URL, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 40; i++ {
		c, err := frontDialer("127.0.0.2").Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond)
	open := 0
	for _, c := range conns {
		// Half a request: a connection the server keeps open waits for the rest.
		_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			open++
		}
	}
	if open != 20 {
		t.Fatalf("%d of 40 connections from one address are open, want the cap of 20", open)
	}
	resp, err := frontClient("127.0.0.3").Get(s.URL + "/healthz")
	if err != nil {
		t.Fatalf("another address is not served: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("another address: %s", resp.Status)
	}
}

func frontGet(t *testing.T, method, u string, header http.Header, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if h := header.Get("Host"); h != "" {
		req.Host = h
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func frontCode(body string) string {
	var e struct{ Code string }
	_ = json.Unmarshal([]byte(body), &e)
	return e.Code
}

// TestLoopbackOnlyEndpoints: /metrics and, in development mode,
// /v1/dev/token answer a loopback client that names a loopback host, and
// refuse one that names another host (DNS rebinding) or comes through a
// proxy (forwarding headers).
func TestLoopbackOnlyEndpoints(t *testing.T) {
	// Development mode: no API key.
	s := Start(t, Options{Args: []string{"--api-key="}, Env: []string{"PETREL_API_SECRET="}})
	dev := `{"room":"r","identity":"me"}`
	ctype := http.Header{"Content-Type": {"application/json"}}
	for _, tc := range []struct {
		name   string
		header http.Header
		want   int
	}{
		{"loopback address", nil, 200},
		{"localhost", http.Header{"Host": {"localhost:" + strconv.Itoa(s.HTTPPort)}}, 200},
		{"rebinding name", http.Header{"Host": {"evil.example:" + strconv.Itoa(s.HTTPPort)}}, 403},
		{"rebinding name without port", http.Header{"Host": {"evil.example"}}, 403},
		{"X-Forwarded-For", http.Header{"X-Forwarded-For": {"203.0.113.7"}}, 403},
		{"Forwarded", http.Header{"Forwarded": {"for=203.0.113.7"}}, 403},
		{"X-Real-IP", http.Header{"X-Real-Ip": {"203.0.113.7"}}, 403},
	} {
		resp, body := frontGet(t, "GET", s.URL+"/metrics", tc.header, "")
		if resp.StatusCode != tc.want || (tc.want == 403 && frontCode(body) != "forbidden") {
			t.Errorf("/metrics, %s: %s %.200s", tc.name, resp.Status, body)
		}
		h := http.Header{}
		for k, v := range tc.header {
			h[k] = v
		}
		h.Set("Content-Type", ctype.Get("Content-Type"))
		resp, body = frontGet(t, "POST", s.URL+"/v1/dev/token", h, dev)
		if resp.StatusCode != tc.want || (tc.want == 403 && frontCode(body) != "forbidden") || (tc.want == 200 && !strings.Contains(body, "token")) {
			t.Errorf("/v1/dev/token, %s: %s %.200s", tc.name, resp.Status, body)
		}
	}
	s.Healthy(t)
}

// TestForwardedClientAddress: the per-address join limit counts a client
// behind a trusted proxy by the address the proxy forwards, and ignores the
// same header from any other peer (a client cannot pick its own address).
func TestForwardedClientAddress(t *testing.T) {
	s := Start(t, Options{YAML: "trusted_proxies: [\"127.0.0.9/32\"]\nlimits:\n  joins_per_ip_per_second: 1\n"})
	joins := func(from string) (ok, limited int) {
		for i := 0; i < 6; i++ {
			tok := s.Token(t, "fwd", fmt.Sprintf("%s-%d", from, i), auth.Grants{Subscribe: true})
			h := http.Header{"X-Forwarded-For": {fmt.Sprintf("198.51.100.%d", i+1)}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			typ, code, err := frontJoin(ctx, s, from, tok, h)
			cancel()
			switch {
			case err != nil:
				t.Fatalf("join from %s: %v", from, err)
			case typ == "joined":
				ok++
			case code == "rate_limited":
				limited++
			default:
				t.Fatalf("join from %s: %s %s", from, typ, code)
			}
		}
		return
	}
	if ok, limited := joins("127.0.0.5"); limited == 0 || ok > 3 {
		t.Fatalf("an untrusted peer's X-Forwarded-For was believed: %d joined, %d limited", ok, limited)
	}
	if ok, limited := joins("127.0.0.9"); limited != 0 {
		t.Fatalf("a trusted proxy's clients were limited as one address: %d joined, %d limited", ok, limited)
	}
	if !strings.Contains(s.Logs(), "127.0.0.5") {
		t.Fatalf("the refusals of the untrusted peer are not logged with its address\n%s", tail(s.Logs(), 2000))
	}
	s.Healthy(t)
}

// frontSession posts offer to /kind/room and then PATCHes and DELETEs the
// Location exactly as the server returned it, as a standard client does.
func frontSession(t *testing.T, s *Server, kind, room, token, offer string) {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/sdp"}}
	resp, body := frontGet(t, "POST", s.URL+"/"+kind+"/"+url.PathEscape(room), h, offer)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("%s %s: %s %.300s", kind, room, resp.Status, body)
	}
	loc := resp.Header.Get("Location")
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	target, err := u.Parse(loc)
	if err != nil {
		t.Fatalf("Location %q: %v", loc, err)
	}
	var ufrag string
	for _, l := range strings.Split(offer, "\r\n") {
		if v, ok := strings.CutPrefix(l, "a=ice-ufrag:"); ok {
			ufrag = v
			break
		}
	}
	frag := "a=ice-ufrag:" + ufrag + "\r\na=mid:0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 9 typ host\r\n"
	ph := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/trickle-ice-sdpfrag"}}
	resp, body = frontGet(t, "PATCH", target.String(), ph, frag)
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: PATCH %s: %s %.300s", kind, room, loc, resp.Status, body)
	}
	resp, body = frontGet(t, "DELETE", target.String(), http.Header{"Authorization": {"Bearer " + token}}, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: DELETE %s: %s %.300s", kind, room, loc, resp.Status, body)
	}
	resp, _ = frontGet(t, "DELETE", target.String(), http.Header{"Authorization": {"Bearer " + token}}, "")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("%s %s: a second DELETE %s answered %s, want 404: the session did not end", kind, room, loc, resp.Status)
	}
}

// TestSessionLocation: PATCH and DELETE on the WHIP/WHEP Location exactly as
// returned work for a plain room, a room whose name has a slash, and a camera
// room (camera/<id>).
func TestSessionLocation(t *testing.T) {
	s := Start(t, Options{YAML: "cameras:\n  - id: door\n    rtp:\n      port: " + strconv.Itoa(freeBoth(t)) + "\n"})
	video, recv := sendTrack(t, webrtc.MimeTypeH264), func(pc *webrtc.PeerConnection) {
		if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
			t.Fatal(err)
		}
	}
	frontSession(t, s, "whip", "lobby", s.Token(t, "lobby", "pub", auth.Grants{Publish: true}), pcOffer(t, video))
	frontSession(t, s, "whip", "team/a", s.Token(t, "team/a", "pub", auth.Grants{Publish: true}), pcOffer(t, video))
	frontSession(t, s, "whep", "camera/door", s.Token(t, "camera/door", "viewer", auth.Grants{Subscribe: true}), pcOffer(t, recv))
	s.Healthy(t)
}
