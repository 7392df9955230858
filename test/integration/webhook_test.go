package integration

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/webhook"
)

// hookReceiver is a webhook endpoint that checks every signature with the
// API secret alone, answers the first request with 500, and keeps the events
// it accepted in the order they came.
type hookReceiver struct {
	t        *testing.T
	mu       sync.Mutex
	requests int
	failedID string
	accepted []webhook.Event
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var c struct {
		SHA256 string `json:"sha256"`
		jwt.RegisteredClaims
	}
	_, err := jwt.ParseWithClaims(r.Header.Get("Authorization"), &c, func(*jwt.Token) (any, error) { return []byte(apiSecret), nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithIssuer(apiKey))
	sum := sha256.Sum256(body)
	if err != nil || c.SHA256 != base64.StdEncoding.EncodeToString(sum[:]) {
		h.t.Errorf("notification not signed with the API secret (%v) or its sha256 %q is not the body's", err, c.SHA256)
		w.WriteHeader(401)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != webhook.ContentType {
		h.t.Errorf("content type %q", ct)
	}
	var ev webhook.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		h.t.Errorf("body %s: %v", body, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
	if h.requests == 1 {
		h.failedID = ev.ID
		w.WriteHeader(500)
		return
	}
	h.accepted = append(h.accepted, ev)
}

func (h *hookReceiver) events() []webhook.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.accepted)
}

// A real room run, seen by a webhook receiver: every event signed, the first
// delivery refused and retried, and the room's events in the order they
// happened.
func TestWebhooksOfARoom(t *testing.T) {
	recv := &hookReceiver{t: t}
	hooks := httptest.NewServer(recv)
	defer hooks.Close()
	e := start(t, func(c *config.Config) {
		c.Webhook.URLs = []string{hooks.URL + "/petrel"}
		c.Webhook.Backoff = 50 * time.Millisecond
	})
	ctx := ctxT(t, 30*time.Second)
	alice := e.join("w", "alice")
	bob := e.join("w", "bob")
	v, a := newVideo("cam"), newAudio("mic")
	vsid, _, err := alice.Publish(ctx, v.track, "camera")
	if err != nil {
		t.Fatal(err)
	}
	v.run(t)
	asid, _, err := alice.Publish(ctx, a.track, "microphone")
	if err != nil {
		t.Fatal(err)
	}
	a.run(t)
	waitTrack(t, bob, 10*time.Second)
	waitTrack(t, bob, 10*time.Second)
	// A WHEP viewer is hidden from the room, and so from the receiver.
	_, offer := pcOffer(t, func(pc *webrtc.PeerConnection) {
		for _, k := range []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo, webrtc.RTPCodecTypeAudio} {
			_, _ = pc.AddTransceiverFromKind(k, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly})
		}
	})
	if resp, body := post(t, e.url+"/whep/w", "application/sdp", e.token("w", "viewer", auth.Grants{Subscribe: true}, time.Hour), offer); resp.StatusCode != http.StatusCreated {
		t.Fatalf("WHEP: %d %s", resp.StatusCode, body)
	}
	bob.Close()
	if _, err := alice.WaitEvent(ctx, "participantLeft"); err != nil {
		t.Fatal(err)
	}
	alice.Close()
	waitFor(t, 10*time.Second, "room_finished at the receiver", func() bool {
		evs := recv.events()
		return len(evs) > 0 && evs[len(evs)-1].Event == "room_finished"
	})

	var got []string
	ids := map[string]bool{}
	for _, ev := range recv.events() {
		if ids[ev.ID] {
			t.Fatalf("event %s accepted twice", ev.ID)
		}
		ids[ev.ID] = true
		if ev.Room == nil || ev.Room.Name != "w" || ev.CreatedAt == 0 {
			t.Fatalf("event without its room or time: %+v", ev)
		}
		s := ev.Event
		if ev.Participant != nil {
			s += " " + ev.Participant.Identity
		}
		if ev.Track != nil {
			s += " " + map[string]string{vsid: "video", asid: "audio"}[ev.Track.Sid]
		}
		got = append(got, s)
	}
	// Within a group the order is the media's (which track's first packet
	// came first); the groups are in the order the test made them happen.
	groups := [][]string{
		{"room_started"},
		{"participant_joined alice"},
		{"participant_joined bob"},
		{"track_published alice audio", "track_published alice video"},
		{"participant_left bob"},
		{"track_unpublished alice audio", "track_unpublished alice video"},
		{"participant_left alice"},
		{"room_finished"},
	}
	var want []string
	i := 0
	for _, g := range groups {
		if i+len(g) <= len(got) {
			slices.Sort(got[i : i+len(g)])
		}
		i += len(g)
		want = append(want, g...)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	recv.mu.Lock()
	failed, requests := recv.failedID, recv.requests
	recv.mu.Unlock()
	if !ids[failed] || requests != len(got)+1 {
		t.Fatalf("the refused event %s was not delivered again (%d requests for %d events)", failed, requests, len(got))
	}
}
