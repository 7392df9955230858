// Package webhook notifies configured URLs of room events, signed as
// LiveKit's webhooks are, in order per room, retried with backoff
// (docs/webhooks.md).
package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/lograte"
	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// Event kinds of features that attach to rooms, reserved here so that a
// receiver's list is complete; those features emit them through
// sfu.Manager.Emit with their description in Event.Info.
const (
	RecordingStarted  = "recording_started"
	RecordingFinished = "recording_finished"
	EgressStarted     = "egress_started"
	EgressUpdated     = "egress_updated"
	EgressEnded       = "egress_ended"
	IngressStarted    = "ingress_started"
	IngressEnded      = "ingress_ended"
)

// Kinds lists every event a receiver may get.
var Kinds = []string{
	sfu.EventRoomStarted, sfu.EventRoomFinished, sfu.EventParticipantJoined, sfu.EventParticipantLeft,
	sfu.EventTrackPublished, sfu.EventTrackUnpublished,
	RecordingStarted, RecordingFinished, EgressStarted, EgressUpdated, EgressEnded, IngressStarted, IngressEnded,
}

// Event is the JSON body of one notification.
type Event struct {
	Event       string                    `json:"event"`
	ID          string                    `json:"id"`
	CreatedAt   int64                     `json:"createdAt"` // Unix seconds
	Room        *protocol.RoomInfo        `json:"room,omitempty"`
	Participant *protocol.ParticipantInfo `json:"participant,omitempty"`
	Track       *protocol.TrackInfo       `json:"track,omitempty"`
	// Reason is why a participant left or a track was unpublished.
	Reason      string `json:"reason,omitempty"`
	EgressInfo  any    `json:"egressInfo,omitempty"`  // recording_* and egress_*
	IngressInfo any    `json:"ingressInfo,omitempty"` // ingress_*
}

// ContentType is the notifications' media type, as LiveKit's.
const ContentType = "application/webhook+json"

// tokenLifetime is how long a notification's signature stays valid: long
// enough for a receiver's clock skew, short enough that a captured request
// cannot be replayed for long.
const tokenLifetime = 5 * time.Minute

// maxBackoff caps the doubling wait between attempts.
const maxBackoff = 30 * time.Second

// Notifier delivers events to every URL. Each URL has one queue per room,
// worked by its own goroutine while it holds events, so that a room's events
// arrive in order and a slow room holds up no other.
type Notifier struct {
	cfg    config.Webhook
	key    string
	secret []byte
	log    *slog.Logger
	client *http.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	targets []*target
	// rooms holds, by room name, a room's room_started until something in it
	// is reported (then it is sent first), and whether it was.
	rooms   map[string]*roomState
	dropLog lograte.Limit
}

type roomState struct {
	start []byte // room_started, not sent yet
	sent  bool
}

type target struct {
	url    string
	queued int
	rooms  map[string]*queue // by room name
}

type queue struct{ items []item }

type item struct {
	kind, room string
	body       []byte
}

// New makes a notifier that signs with key's secret. It sends nothing until
// Emit is called.
func New(cfg config.Webhook, key, secret string, log *slog.Logger) *Notifier {
	ctx, cancel := context.WithCancel(context.Background())
	n := &Notifier{cfg: cfg, key: key, secret: []byte(secret), log: log, ctx: ctx, cancel: cancel, rooms: map[string]*roomState{},
		// No redirects: a receiver answers where it was configured.
		client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	for _, u := range cfg.URLs {
		n.targets = append(n.targets, &target{url: u, rooms: map[string]*queue{}})
	}
	return n
}

// reported says whether a receiver hears of ev. Participants that are not
// this node's to report are left out, with their tracks: another node's
// client mirrored here (that node reports it) and hidden participants (WHEP
// viewers, recorders, recordings played back), which no one in the room sees.
func reported(ev sfu.Event) bool {
	if ev.Participant == nil {
		return true
	}
	return !ev.Hidden && ev.Origin != sfu.Mirror
}

// Emit queues ev for every URL. It never blocks (sfu.Manager.SetObserver).
func (n *Notifier) Emit(ev sfu.Event) {
	if !slices.Contains(Kinds, ev.Kind) {
		n.log.Warn("webhook event of unknown kind not sent", "event", ev.Kind)
		return
	}
	if !reported(ev) {
		return
	}
	body, err := n.body(ev)
	if err != nil {
		n.log.Warn("webhook event not encodable", "event", ev.Kind, "err", err)
		return
	}
	name := ev.Room.Name
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	// A room is reported from its first reported event on: a node where it
	// holds only mirrors or hidden participants says nothing of it.
	switch ev.Kind {
	case sfu.EventRoomStarted:
		n.rooms[name] = &roomState{start: body}
		return
	case sfu.EventRoomFinished:
		st := n.rooms[name]
		delete(n.rooms, name)
		if st == nil || !st.sent {
			return
		}
	default:
		if st := n.rooms[name]; st != nil && !st.sent {
			st.sent = true
			n.enqueue(item{kind: sfu.EventRoomStarted, room: name, body: st.start})
			st.start = nil
		}
	}
	n.enqueue(item{kind: ev.Kind, room: name, body: body})
}

func (n *Notifier) body(ev sfu.Event) ([]byte, error) {
	out := Event{Event: ev.Kind, ID: newID(), CreatedAt: time.Now().Unix(), Participant: ev.Participant, Track: ev.Track, Reason: ev.Reason}
	if ev.Room.Name != "" {
		room := ev.Room
		out.Room = &room
	}
	switch {
	case strings.HasPrefix(ev.Kind, "egress_"), strings.HasPrefix(ev.Kind, "recording_"):
		out.EgressInfo = ev.Info
	case strings.HasPrefix(ev.Kind, "ingress_"):
		out.IngressInfo = ev.Info
	}
	return json.Marshal(out)
}

// enqueue adds it to every URL's queue of its room. Under n.mu.
func (n *Notifier) enqueue(it item) {
	for _, t := range n.targets {
		if t.queued >= n.cfg.Queue {
			n.dropped(t.url, it, "queue_full")
			continue
		}
		t.queued++
		metrics.WebhookQueued.Inc()
		q := t.rooms[it.room]
		if q == nil {
			q = &queue{}
			t.rooms[it.room] = q
			n.wg.Add(1)
			go n.work(t, it.room, q)
		}
		q.items = append(q.items, it)
	}
}

// dropped counts and logs an event given up on, one line a second at most (a
// dead receiver drops every event).
func (n *Notifier) dropped(url string, it item, why string) {
	metrics.WebhookEvents.WithLabelValues(why).Inc()
	if held, ok := n.dropLog.Allow(time.Second); ok {
		n.log.Warn("webhook event dropped", "url", url, "event", it.kind, "room", it.room, "why", why, "unlogged", held)
	}
}

// work delivers a room's events to one URL in order, and ends when the
// queue is empty.
func (n *Notifier) work(t *target, room string, q *queue) {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		if len(q.items) == 0 {
			delete(t.rooms, room)
			n.mu.Unlock()
			return
		}
		it := q.items[0]
		n.mu.Unlock()
		why := n.deliver(t.url, it)
		n.mu.Lock()
		q.items[0] = item{}
		q.items = q.items[1:]
		t.queued--
		metrics.WebhookQueued.Dec()
		if why != "" {
			n.dropped(t.url, it, why)
		} else {
			metrics.WebhookEvents.WithLabelValues("delivered").Inc()
		}
		n.mu.Unlock()
	}
}

// deliver posts it until a 2xx answer, at most cfg.Attempts times with a
// doubling wait between, and says why it gave up ("": delivered).
func (n *Notifier) deliver(url string, it item) string {
	wait := n.cfg.Backoff
	for attempt := 1; ; attempt++ {
		err := n.post(url, it.body)
		if err == nil {
			return ""
		}
		metrics.WebhookFailures.Inc()
		if n.ctx.Err() != nil {
			return "shutdown"
		}
		if attempt >= n.cfg.Attempts {
			return "attempts_exhausted"
		}
		n.log.Debug("webhook delivery failed, retrying", "url", url, "event", it.kind, "attempt", attempt, "in", wait, "err", err)
		select {
		case <-time.After(wait):
		case <-n.ctx.Done():
			return "shutdown"
		}
		wait = min(2*wait, maxBackoff)
	}
}

func (n *Notifier) post(url string, body []byte) error {
	tok, err := Sign(n.key, n.secret, body, time.Now())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("Authorization", tok)
	resp, err := n.client.Do(req)
	if err != nil {
		return err
	}
	// Read a little of the answer so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// Close waits until every queued event is delivered or ctx ends, then
// gives up on the rest.
func (n *Notifier) Close(ctx context.Context) {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		n.cancel()
		<-done
	}
	n.cancel()
}

func newID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "EV_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// Claims are a notification's signature: the body's SHA-256 (base64), issued
// by the API key whose secret signed them.
type Claims struct {
	SHA256 string `json:"sha256"`
	jwt.RegisteredClaims
}

// Sign makes the Authorization value of a notification of body: an HS256 JWT
// with the key as issuer (and kid) and the body's SHA-256 in claim sha256.
func Sign(key string, secret, body []byte, now time.Time) (string, error) {
	sum := sha256.Sum256(body)
	c := Claims{SHA256: base64.StdEncoding.EncodeToString(sum[:]), RegisteredClaims: jwt.RegisteredClaims{
		Issuer: key, IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-10 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(tokenLifetime)),
	}}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, &c)
	t.Header["kid"] = key
	return t.SignedString(secret)
}

// ErrSignature is a notification whose signature does not verify.
var ErrSignature = errors.New("webhook signature invalid")

// maxBody bounds what Receive reads of a notification.
const maxBody = 1 << 20

// Receive reads and verifies a notification for a Go receiver: the token in
// Authorization must be signed by the secret of one of keys (its issuer),
// unexpired, and carry the SHA-256 of the body.
func Receive(r *http.Request, secrets map[string]string) (*Event, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("webhook body over %d bytes", maxBody)
	}
	var c Claims
	_, err = jwt.ParseWithClaims(r.Header.Get("Authorization"), &c, func(t *jwt.Token) (any, error) {
		iss, _ := t.Claims.GetIssuer()
		secret, ok := secrets[iss]
		if !ok {
			return nil, fmt.Errorf("unknown api key %q", iss)
		}
		return []byte(secret), nil
	}, jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithLeeway(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	sum := sha256.Sum256(body)
	if c.SHA256 != base64.StdEncoding.EncodeToString(sum[:]) {
		return nil, fmt.Errorf("%w: the body's SHA-256 differs from the signed one", ErrSignature)
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, fmt.Errorf("webhook body: %w", err)
	}
	return &ev, nil
}
