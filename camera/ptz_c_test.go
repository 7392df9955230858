package camera

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/camera/onvif"
)

func TestPTZValidation(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{`{"id":1,"op":"move","pan":0.5,"tilt":0,"zoom":0}`, ""},
		{`{"id":1,"op":"move","pan":0.5}`, ""}, // tilt defaults to 0
		{`{"id":1,"op":"move","pan":1.5,"tilt":0}`, "pan 1.5 out of"},
		{`{"id":1,"op":"move"}`, "needs pan/tilt"},
		{`{"id":1,"op":"move","pan":0.1,"tilt":0,"timeout":60}`, "timeout"},
		{`{"id":1,"op":"absolute","pan":0,"tilt":0,"zoom":-0.5}`, "zoom -0.5 out of"},
		{`{"id":1,"op":"relative","pan":-2,"tilt":2}`, ""},
		{`{"id":1,"op":"relative","pan":-2.1,"tilt":0}`, "out of"},
		{`{"id":1,"op":"preset.goto"}`, "preset token"},
		{`{"id":1,"op":"preset.goto","preset":"1"}`, ""},
		{`{"id":1,"op":"preset.set","name":""}`, "name must be"},
		{`{"id":1,"op":"preset.set","name":"a\u0001b"}`, "name must be"},
		{`{"id":1,"op":"preset.set","name":"Door"}`, ""},
		{`{"id":1,"op":"stop"}`, ""},
		{`{"id":1,"op":"status"}`, ""},
		{`{"id":1,"op":"preset.list"}`, ""},
		{`{"id":1,"op":"reboot"}`, "unknown op"},
		{`{"id":1}`, "op is required"},
		{`[1,2]`, "not a JSON object"},
		{`{"id":1,"op":"move","pan":"fast"}`, "not a JSON object"},
		{`{"id":1,"op":"move","pan":1e999,"tilt":0}`, "not a JSON object"},
		{`{"op":"stop","pad":"` + strings.Repeat("x", 5000) + `"}`, "too large"},
	} {
		_, err := parsePTZ([]byte(tc.in))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%.80s: got %v, want error containing %q", tc.in, err, tc.err)
		}
	}
}

type replies struct {
	mu  sync.Mutex
	got map[string][]map[string]any
	ch  chan struct{}
}

func newReplies() *replies {
	return &replies{got: map[string][]map[string]any{}, ch: make(chan struct{}, 1024)}
}

func (r *replies) add(to string, b []byte) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(fmt.Sprintf("reply is not JSON: %s", b))
	}
	r.mu.Lock()
	r.got[to] = append(r.got[to], m)
	r.mu.Unlock()
	r.ch <- struct{}{}
}

// wait until n replies in all arrived.
func (r *replies) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		total := 0
		for _, v := range r.got {
			total += len(v)
		}
		r.mu.Unlock()
		if total >= n {
			return
		}
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("%d of %d replies arrived", total, n)
		}
	}
}

func (r *replies) of(to string) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.got[to]...)
}

func startPTZ(t *testing.T) (*emulator.ONVIF, *ptzWorker, *replies) {
	t.Helper()
	emu := emulator.NewONVIF("admin", "pw")
	u, err := emu.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emu.Close() })
	cl, err := onvif.New(onvif.Config{URL: u, User: "admin", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	rs := newReplies()
	w := newPTZWorker(cl, rs.add, slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go w.run(ctx)
	return emu, w, rs
}

func must(t *testing.T, s string) *PTZRequest {
	t.Helper()
	r, err := parsePTZ([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPTZForwardedToCamera(t *testing.T) {
	emu, w, rs := startPTZ(t)
	w.submit("v", must(t, `{"id":1,"op":"absolute","pan":0.5,"tilt":0.25,"zoom":0.5}`))
	w.submit("v", must(t, `{"id":2,"op":"preset.set","name":"Here"}`))
	w.submit("v", must(t, `{"id":3,"op":"preset.list"}`))
	w.submit("v", must(t, `{"id":"s","op":"status"}`))
	w.submit("v", must(t, `{"id":5,"op":"preset.goto","preset":"99"}`))
	rs.wait(t, 5)
	got := rs.of("v")
	if got[0]["id"] != 1.0 || got[0]["error"] != nil {
		t.Fatalf("absolute: %v", got[0])
	}
	if tok := got[1]["result"].(map[string]any)["preset"]; tok != "3" {
		t.Fatalf("preset.set: %v", got[1])
	}
	if ps := got[2]["result"].(map[string]any)["presets"].([]any); len(ps) != 3 || ps[2].(map[string]any)["name"] != "Here" {
		t.Fatalf("preset.list: %v", got[2])
	}
	st := got[3]["result"].(map[string]any)
	if got[3]["id"] != "s" || st["pan"] != 0.5 || st["tilt"] != 0.25 || st["zoom"] != 0.5 {
		t.Fatalf("status: %v", got[3])
	}
	if e, _ := got[4]["error"].(string); !strings.Contains(e, "NoToken") {
		t.Fatalf("preset.goto of an unknown preset: %v", got[4])
	}
	c, ok := emu.WaitCommand("AbsoluteMove", 0)
	if !ok || *c.Pan != 0.5 || *c.Tilt != 0.25 || *c.Zoom != 0.5 || c.Profile != emulator.ProfilePTZ {
		t.Fatalf("emulator got %+v", c)
	}
}

// A joystick's burst of moves reaches the camera coalesced: fewer commands,
// the last velocity wins, every request is answered.
func TestPTZMovesCoalesce(t *testing.T) {
	emu, w, rs := startPTZ(t)
	const n = 60
	for i := 1; i <= n; i++ {
		w.submit("v", must(t, fmt.Sprintf(`{"id":%d,"op":"move","pan":%g,"tilt":0}`, i, float64(i)/100)))
	}
	rs.wait(t, n)
	var moves []emulator.Command
	for _, c := range emu.Commands() {
		if c.Op == "ContinuousMove" {
			moves = append(moves, c)
		}
	}
	if len(moves) == 0 || len(moves) > n/2 {
		t.Fatalf("%d moves of %d reached the camera: not coalesced", len(moves), n)
	}
	if last := moves[len(moves)-1]; *last.Pan != float64(n)/100 || last.Timeout != "PT2S" {
		t.Fatalf("last move %+v: the newest velocity must win", last)
	}
	superseded, ok := 0, 0
	for _, r := range rs.of("v") {
		if res, _ := r["result"].(map[string]any); res != nil && res["superseded"] == true {
			superseded++
		} else if res != nil {
			ok++
		}
	}
	if ok != len(moves) || superseded != n-len(moves) {
		t.Fatalf("%d ok + %d superseded replies for %d moves sent and %d forwarded", ok, superseded, n, len(moves))
	}
	// A stop overrides a move still waiting.
	w.submit("v", must(t, `{"id":100,"op":"move","pan":-1,"tilt":0}`))
	w.submit("v", must(t, `{"id":101,"op":"stop"}`))
	rs.wait(t, n+2)
	cmds := emu.Commands()
	if last := cmds[len(cmds)-1]; last.Op != "Stop" {
		t.Fatalf("last command %s, want Stop", last.Op)
	}
	if _, _, _ = emu.Position(); strings.Contains(fmt.Sprint(emu.Commands()), "Pan:-1") {
		t.Fatal("a move sent after the stop")
	}
}

func TestPTZRateLimitPerViewer(t *testing.T) {
	emu, w, rs := startPTZ(t)
	const n = 30
	for i := 0; i < n; i++ {
		w.submit("greedy", must(t, fmt.Sprintf(`{"id":%d,"op":"status"}`, i)))
	}
	w.submit("other", must(t, `{"id":1,"op":"status"}`))
	rs.wait(t, n+1)
	limited := 0
	for _, r := range rs.of("greedy") {
		if e, _ := r["error"].(string); strings.HasPrefix(e, "rate limited") {
			limited++
		}
	}
	if limited < n-ptzBurst-5 {
		t.Fatalf("only %d of %d requests rate limited", limited, n)
	}
	if o := rs.of("other"); len(o) != 1 || o[0]["error"] != nil {
		t.Fatalf("another viewer was limited too: %v", o)
	}
	statuses := 0
	for _, c := range emu.Commands() {
		if c.Op == "GetStatus" {
			statuses++
		}
	}
	if statuses != n-limited+1 {
		t.Fatalf("camera got %d GetStatus, want %d", statuses, n-limited+1)
	}
}

func TestPTZCameraErrorsReachViewer(t *testing.T) {
	emu := emulator.NewONVIF("admin", "pw")
	u, err := emu.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	cl, _ := onvif.New(onvif.Config{URL: u, User: "admin", Password: "wrong"})
	rs := newReplies()
	w := newPTZWorker(cl, rs.add, slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.run(ctx)
	w.submit("v", must(t, `{"id":7,"op":"stop"}`))
	rs.wait(t, 1)
	r := rs.of("v")[0]
	if e, _ := r["error"].(string); r["id"] != 7.0 || !strings.Contains(e, "not authorized") {
		t.Fatalf("reply %v", r)
	}
}
