package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

const key, secret = "hookkey", "0123456789abcdef0123456789abcdef"

// syncBuffer is a log destination the notifier's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newNotifier(t *testing.T, url string, mod func(*config.Webhook)) (*Notifier, *syncBuffer) {
	cfg := config.Default().Webhook
	cfg.URLs = []string{url}
	cfg.Backoff = 10 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	logs := &syncBuffer{}
	n := New(cfg, key, secret, slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n.Close(ctx)
	})
	return n, logs
}

// verify checks a notification as a receiver with only the secret would,
// without this package's Receive.
func verify(t *testing.T, r *http.Request, body []byte) {
	t.Helper()
	var c struct {
		SHA256 string `json:"sha256"`
		jwt.RegisteredClaims
	}
	_, err := jwt.ParseWithClaims(r.Header.Get("Authorization"), &c, func(*jwt.Token) (any, error) { return []byte(secret), nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithIssuer(key))
	if err != nil {
		t.Errorf("signature: %v", err)
		return
	}
	sum := sha256.Sum256(body)
	if c.SHA256 != base64.StdEncoding.EncodeToString(sum[:]) {
		t.Errorf("sha256 claim %q does not match the body", c.SHA256)
	}
}

func joined(room, identity string, origin sfu.Origin, hidden bool) sfu.Event {
	return sfu.Event{Kind: sfu.EventParticipantJoined, Room: protocol.RoomInfo{Name: room},
		Participant: &protocol.ParticipantInfo{Identity: identity}, Origin: origin, Hidden: hidden}
}

// A room is reported from its first reported participant on; mirrors and
// hidden participants are not reported, nor a room that had only them. A
// failed delivery is retried, and the room's events still arrive in order.
func TestOrderRetryAndWhomToReport(t *testing.T) {
	var mu sync.Mutex
	var got []string
	failed := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		verify(t, r, body)
		var ev Event
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("body: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !failed {
			failed = true
			w.WriteHeader(500)
			return
		}
		s := ev.Event + ":" + ev.Room.Name
		if ev.Participant != nil {
			s += ":" + ev.Participant.Identity
		}
		got = append(got, s)
	}))
	defer srv.Close()
	n, _ := newNotifier(t, srv.URL, nil)
	before := value(metrics.WebhookFailures)
	for _, ev := range []sfu.Event{
		{Kind: sfu.EventRoomStarted, Room: protocol.RoomInfo{Name: "mirrors-only"}},
		joined("mirrors-only", "far", sfu.Mirror, false),
		{Kind: sfu.EventRoomFinished, Room: protocol.RoomInfo{Name: "mirrors-only"}},
		{Kind: sfu.EventRoomStarted, Room: protocol.RoomInfo{Name: "r"}},
		joined("r", "viewer", sfu.Client, true),
		joined("r", "alice", sfu.Client, false),
		{Kind: sfu.EventTrackPublished, Room: protocol.RoomInfo{Name: "r"}, Participant: &protocol.ParticipantInfo{Identity: "alice"}, Track: &protocol.TrackInfo{Kind: "audio"}},
		joined("r", "bob", sfu.Client, false),
		{Kind: RecordingStarted, Room: protocol.RoomInfo{Name: "r"}, Info: map[string]string{"id": "REC_1"}},
		{Kind: "no_such_event", Room: protocol.RoomInfo{Name: "r"}},
		{Kind: sfu.EventRoomFinished, Room: protocol.RoomInfo{Name: "r"}},
	} {
		n.Emit(ev)
	}
	want := "room_started:r participant_joined:r:alice track_published:r:alice participant_joined:r:bob recording_started:r room_finished:r"
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		s := strings.Join(got, " ")
		mu.Unlock()
		if s == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %q\nwant     %q", s, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := value(metrics.WebhookFailures) - before; d != 1 {
		t.Fatalf("%v failed attempts counted, want 1", d)
	}
}

// An event every attempt of which fails is dropped after the last one, with
// a log line and the metric; so is one that finds its URL's queue full.
func TestDropAfterAttemptsAndFullQueue(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		if r.URL.Path == "/slow" {
			<-release
		}
		w.WriteHeader(503)
	}))
	defer srv.Close()
	defer close(release)

	exhausted := metrics.WebhookEvents.WithLabelValues("attempts_exhausted")
	before := value(exhausted)
	n, logs := newNotifier(t, srv.URL+"/down", func(c *config.Webhook) { c.Attempts = 3 })
	n.Emit(joined("r", "alice", sfu.Client, false))
	waitFor(t, "the drop after the last attempt", func() bool { return value(exhausted)-before == 1 })
	mu.Lock()
	if calls != 3 {
		t.Errorf("%d attempts, want 3", calls)
	}
	mu.Unlock()
	if l := logs.String(); !strings.Contains(l, "webhook event dropped") || !strings.Contains(l, "why=attempts_exhausted") || !strings.Contains(l, "event=participant_joined") {
		t.Fatalf("log: %s", l)
	}

	full := metrics.WebhookEvents.WithLabelValues("queue_full")
	before = value(full)
	n2, logs2 := newNotifier(t, srv.URL+"/slow", func(c *config.Webhook) { c.Queue = 2 })
	for i := 0; i < 5; i++ {
		n2.Emit(joined("r", "alice", sfu.Client, false))
	}
	if d := value(full) - before; d != 3 {
		t.Fatalf("%v events dropped for a full queue, want 3", d)
	}
	if l := logs2.String(); !strings.Contains(l, "why=queue_full") {
		t.Fatalf("log: %s", l)
	}
}

// Receive accepts what Sign made and refuses a changed body or another secret.
func TestReceive(t *testing.T) {
	body := []byte(`{"event":"room_started","id":"EV_x","createdAt":1,"room":{"name":"r"}}`)
	tok, err := Sign(key, []byte(secret), body, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req := func(b []byte) *http.Request {
		r := httptest.NewRequest("POST", "/", bytes.NewReader(b))
		r.Header.Set("Authorization", tok)
		return r
	}
	ev, err := Receive(req(body), map[string]string{key: secret})
	if err != nil || ev.Event != "room_started" || ev.Room.Name != "r" {
		t.Fatalf("receive: %+v %v", ev, err)
	}
	if _, err := Receive(req(append(body[:len(body):len(body)], ' ')), map[string]string{key: secret}); err == nil {
		t.Fatal("a changed body was accepted")
	}
	if _, err := Receive(req(body), map[string]string{key: strings.Repeat("x", 32)}); err == nil {
		t.Fatal("another secret was accepted")
	}
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !f(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// value reads a counter.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
