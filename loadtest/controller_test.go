package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// ctl is a test controller: it sends requests and sorts what comes back into
// responses (by transaction) and events.
type ctl struct {
	t      *testing.T
	ws     *websocket.Conn
	n      int
	mu     sync.Mutex
	resp   map[string]chan map[string]any
	untx   chan map[string]any // responses without a transaction
	events chan map[string]any
}

func dialCtl(t *testing.T) *ctl {
	t.Helper()
	srv := httptest.NewServer(NewController(ControllerOptions{MediaIdle: 600 * time.Millisecond}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/load", nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(1 << 20)
	c := &ctl{t: t, ws: ws, resp: map[string]chan map[string]any{}, untx: make(chan map[string]any, 16), events: make(chan map[string]any, 1024)}
	t.Cleanup(func() { ws.CloseNow() })
	go func() {
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				return
			}
			var m map[string]any
			if json.Unmarshal(b, &m) != nil {
				continue
			}
			if _, ok := m["event"]; ok {
				c.events <- m
				continue
			}
			tx, _ := m["transaction"].(string)
			c.mu.Lock()
			ch := c.resp[tx]
			c.mu.Unlock()
			if ch == nil {
				c.untx <- m
				continue
			}
			ch <- m
		}
	}()
	return c
}

func (c *ctl) raw(b string) {
	c.t.Helper()
	if err := c.ws.Write(context.Background(), websocket.MessageText, []byte(b)); err != nil {
		c.t.Fatal(err)
	}
}

// do sends req with a fresh transaction and returns the response.
func (c *ctl) do(req map[string]any) map[string]any {
	c.t.Helper()
	c.n++
	tx := fmt.Sprintf("t%d", c.n)
	req["transaction"] = tx
	ch := make(chan map[string]any, 1)
	c.mu.Lock()
	c.resp[tx] = ch
	c.mu.Unlock()
	b, _ := json.Marshal(req)
	c.raw(string(b))
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		c.t.Fatalf("no response to %v", req)
	}
	return nil
}

func (c *ctl) ok(req map[string]any) map[string]any {
	c.t.Helper()
	m := c.do(req)
	if m["response"] != "success" {
		c.t.Fatalf("%v: %v", req["request"], m)
	}
	return m
}

func (c *ctl) fails(req map[string]any, code string) {
	c.t.Helper()
	m := c.do(req)
	e, _ := m["error"].(map[string]any)
	if m["response"] != "error" || e["code"] != code {
		c.t.Fatalf("%v: got %v, want error %s", req, m, code)
	}
	if m["transaction"] != req["transaction"] {
		c.t.Fatalf("error response transaction %v, want %v", m["transaction"], req["transaction"])
	}
}

func TestControllerBadRequests(t *testing.T) {
	c := dialCtl(t)
	// Not JSON, and a binary frame: an error without a transaction.
	c.raw("{nope")
	c.ws.Write(context.Background(), websocket.MessageBinary, []byte{1, 2, 3})
	for range 2 {
		select {
		case m := <-c.untx:
			if e, _ := m["error"].(map[string]any); m["response"] != "error" || e["code"] != ErrInvalidJSON {
				t.Fatalf("bad frame: %v", m)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no error for a bad frame")
		}
	}
	c.raw(`{"request":"register"}`) // no transaction
	select {
	case m := <-c.untx:
		if e, _ := m["error"].(map[string]any); e["code"] != ErrMissing {
			t.Fatalf("missing transaction: %v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no error for a missing transaction")
	}
	c.fails(map[string]any{}, ErrMissing)
	c.fails(map[string]any{"request": "get_state"}, ErrNotRegistered)
	c.fails(map[string]any{"request": "fly"}, ErrUnknown)
	c.ok(map[string]any{"request": "register", "name": "test"})
	c.fails(map[string]any{"request": "register"}, ErrAlreadyReg)
	c.fails(map[string]any{"request": "add_source"}, ErrMissing)
	c.fails(map[string]any{"request": "add_source", "source": map[string]any{"kind": "smell", "spec": "synthetic"}}, ErrBadSource)
	c.fails(map[string]any{"request": "add_source", "source": map[string]any{"kind": "video", "spec": "/nonexistent.ivf"}}, ErrBadSource)
	c.fails(map[string]any{"request": "add_source", "source": map[string]any{"kind": "audio", "spec": "testdata/clip.ivf"}}, ErrBadSource)
	c.fails(map[string]any{"request": "add_source", "source": map[string]any{"kind": "video", "spec": "rtp:8.8.8.8:5004"}}, ErrBadSource)
	c.fails(map[string]any{"request": "remove_source", "source_id": "src-x"}, ErrNoSuchSource)
	c.fails(map[string]any{"request": "create_session", "sources": []string{"src-x"}}, ErrNoSuchSource)
	c.fails(map[string]any{"request": "generate_offer"}, ErrMissing)
	c.fails(map[string]any{"request": "generate_offer", "session": "nope"}, ErrNoSuchSession)
	c.fails(map[string]any{"request": "get_state", "session": "nope"}, ErrNoSuchSession)
	s := c.ok(map[string]any{"request": "create_session", "receive": map[string]any{"video": 1}})["session"]
	c.fails(map[string]any{"request": "handle_offer", "session": s}, ErrMissing)
	c.fails(map[string]any{"request": "handle_offer", "session": s, "sdp": "v=0\r\ngarbage"}, ErrSDP)
	c.fails(map[string]any{"request": "handle_answer", "session": s, "sdp": "v=0\r\n"}, ErrSDP)
	c.fails(map[string]any{"request": "generate_answer", "session": s}, ErrState) // no remote offer
	c.fails(map[string]any{"request": "trickle", "session": s, "candidate": map[string]any{"candidate": "candidate:1 1 udp 1 127.0.0.1 9 typ host"}}, ErrSDP)
	c.ok(map[string]any{"request": "hangup", "session": s})
	c.fails(map[string]any{"request": "hangup", "session": s}, ErrState)
	c.fails(map[string]any{"request": "generate_offer", "session": s}, ErrState)
	c.ok(map[string]any{"request": "destroy_session", "session": s})
	c.fails(map[string]any{"request": "destroy_session", "session": s}, ErrNoSuchSession)
}

// TestControllerSessions connects two sessions of the generator to each other
// through the controller protocol, as a controller would connect a session to
// a server: every command and every event goes over the WebSocket.
func TestControllerSessions(t *testing.T) {
	c := dialCtl(t)
	if r := c.ok(map[string]any{"request": "register", "name": "test"}); r["id"] == "" || r["version"] != float64(1) {
		t.Fatalf("register: %v", r)
	}
	video := c.ok(map[string]any{"request": "add_source", "source": map[string]any{"kind": "video", "spec": "synthetic", "kbps": 300}})["source_id"].(string)
	audio := c.ok(map[string]any{"request": "add_source", "source": map[string]any{"kind": "audio", "spec": "testdata/tone.ogg"}})["source_id"].(string)
	a := c.ok(map[string]any{"request": "create_session", "sources": []string{video, audio}})["session"].(string)
	b := c.ok(map[string]any{"request": "create_session", "receive": map[string]any{"video": 1, "audio": 1}})["session"].(string)

	offer := c.ok(map[string]any{"request": "generate_offer", "session": a})["sdp"].(string)
	c.ok(map[string]any{"request": "handle_offer", "session": b, "sdp": offer})
	answer := c.ok(map[string]any{"request": "generate_answer", "session": b})["sdp"].(string)
	c.ok(map[string]any{"request": "handle_answer", "session": a, "sdp": answer})

	// Relay trickled candidates between the two, and collect events.
	other := map[string]string{a: b, b: a}
	seen := map[string]map[string]bool{a: {}, b: {}}
	mediaOn := map[string]bool{}
	deadline := time.After(20 * time.Second)
	for !(seen[a]["webrtcup"] && seen[b]["webrtcup"] && seen[a]["selected-pair"] && mediaOn["video"] && mediaOn["audio"]) {
		select {
		case ev := <-c.events:
			s, _ := ev["session"].(string)
			name := ev["event"].(string)
			if seen[s] == nil {
				t.Fatalf("event for unknown session: %v", ev)
			}
			seen[s][name] = true
			switch name {
			case "trickle":
				cand := ev["candidate"].(map[string]any)
				if cand["completed"] == true {
					c.ok(map[string]any{"request": "trickle", "session": other[s], "candidate": nil})
					continue
				}
				c.ok(map[string]any{"request": "trickle", "session": other[s], "candidate": cand})
			case "media":
				if s == b && ev["receiving"] == true {
					mediaOn[ev["kind"].(string)] = true
				}
			case "ice-state", "selected-pair", "webrtcup":
			default:
				t.Fatalf("unexpected event %v", ev)
			}
		case <-deadline:
			t.Fatalf("events so far: %v, media %v", seen, mediaOn)
		}
	}
	if !seen[a]["ice-state"] || !seen[a]["trickle"] {
		t.Fatalf("missing ice-state or trickle events: %v", seen)
	}
	st := c.ok(map[string]any{"request": "get_state", "session": b})
	sess := st["sessions"].([]any)[0].(map[string]any)
	if sess["connection_state"] != "connected" {
		t.Fatalf("state: %v", sess)
	}
	all := c.ok(map[string]any{"request": "get_state"})
	if n := len(all["sessions"].([]any)); n != 2 {
		t.Fatalf("get_state lists %d sessions, want 2", n)
	}
	if n := len(all["sources"].([]any)); n != 2 {
		t.Fatalf("get_state lists %d sources, want 2", n)
	}

	// Removing the video source stops the video: media stopped on b.
	c.ok(map[string]any{"request": "remove_source", "source_id": video})
	waitEvent(t, c, func(ev map[string]any) bool {
		return ev["event"] == "media" && ev["session"] == b && ev["kind"] == "video" && ev["receiving"] == false
	})
	c.ok(map[string]any{"request": "hangup", "session": a})
	waitEvent(t, c, func(ev map[string]any) bool { return ev["event"] == "hangup" && ev["session"] == a })
	c.ok(map[string]any{"request": "destroy_session", "session": b})
	waitEvent(t, c, func(ev map[string]any) bool { return ev["event"] == "destroyed" && ev["session"] == b })
	// b had media: its stats say so.
	stats := sess["stats"].(map[string]any)
	if stats["firstRtpMs"].(float64) <= 0 || stats["dtlsConnectedMs"].(float64) <= 0 {
		t.Fatalf("stats: %v", stats)
	}
}

func waitEvent(t *testing.T, c *ctl, match func(map[string]any) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-c.events:
			if match(ev) {
				return
			}
		case <-deadline:
			t.Fatal("event did not come")
		}
	}
}

// TestControllerAgainstPetrelWHEP is the docs/load.md example: a controller
// creates a receive-only session, gathers its candidates, does the WHEP POST
// itself, hands the answer back, and sees media start.
func TestControllerAgainstPetrelWHEP(t *testing.T) {
	url := startPetrel(t)
	tp := &Petrel{Base: url, APIKey: testKey, APISecret: testSecret}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lean, err := NewLean(APIOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, a := Synthetic(false, 300, 30, 30), Synthetic(true, 0, 0, 0)
	v.Start()
	a.Start()
	defer v.Stop()
	defer a.Stop()
	tok, _ := tp.Token(ctx, "c", "pub", true)
	pub := NewPeer("pub", "publisher", &Counters{})
	defer pub.Close()
	if err := WHIP(ctx, lean, url+"/whip/c", tok, pub, v, a); err != nil {
		t.Fatal(err)
	}
	if err := waitMedia(ctx, pub); err != nil {
		t.Fatal(err)
	}

	c := dialCtl(t)
	c.ok(map[string]any{"request": "register"})
	s := c.ok(map[string]any{"request": "create_session", "receive": map[string]any{"video": 1, "audio": 1}})["session"].(string)
	c.ok(map[string]any{"request": "generate_offer", "session": s})
	waitEvent(t, c, func(ev map[string]any) bool {
		cand, _ := ev["candidate"].(map[string]any)
		return ev["event"] == "trickle" && cand["completed"] == true
	})
	// A non-trickle server (WHEP here) wants the offer with its candidates:
	// get_state has the local description as it is after gathering.
	st := c.ok(map[string]any{"request": "get_state", "session": s})
	sdp, _ := st["sessions"].([]any)[0].(map[string]any)["local_sdp"].(string)
	if !strings.Contains(sdp, "a=candidate:") {
		t.Fatalf("local_sdp has no candidates: %q", sdp)
	}
	tok2, _ := tp.Token(ctx, "c", "viewer", false)
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/whep/c", strings.NewReader(sdp))
	req.Header.Set("Content-Type", "application/sdp")
	req.Header.Set("Authorization", "Bearer "+tok2)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("WHEP: %s %s", resp.Status, body)
	}
	c.ok(map[string]any{"request": "handle_answer", "session": s, "sdp": string(body)})
	got := map[string]bool{}
	waitEvent(t, c, func(ev map[string]any) bool {
		if ev["event"] == "media" && ev["receiving"] == true {
			got[ev["kind"].(string)] = true
		}
		return got["video"] && got["audio"]
	})
}
