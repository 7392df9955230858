package integration

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/serverapi"
)

func ptr[T any](v T) *T { return &v }

// wantAPIError checks a refused call's status and code.
func wantAPIError(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var e *serverapi.Error
	if !errors.As(err, &e) || e.Status != status || e.Code != code {
		t.Fatalf("%s: %v, want %d %s", what, err, status, code)
	}
}

// The server API through its Go client: listing, a live metadata change that
// the others see, a revoked publish grant that unpublishes and refuses the
// next publish, data from the server to the room and to one participant,
// removal; and the errors of each call.
func TestServerAPI(t *testing.T) {
	e := start(t)
	api := serverapi.New(e.url, apiKey, apiSecret)
	ctx := ctxT(t, 30*time.Second)
	alice := e.join("s", "alice")
	bob := e.join("s", "bob")
	carol := e.join("s", "carol")

	rooms, err := api.ListRooms(ctx)
	if err != nil || len(rooms) != 1 || rooms[0].Name != "s" || rooms[0].NumParticipants != 3 {
		t.Fatalf("rooms: %+v %v", rooms, err)
	}
	ps, err := api.ListParticipants(ctx, "s")
	if err != nil || len(ps) != 3 {
		t.Fatalf("participants: %+v %v", ps, err)
	}
	_, err = api.ListParticipants(ctx, "nowhere")
	wantAPIError(t, "participants of an unknown room", err, 404, protocol.CodeNotFound)

	// Metadata, live: bob sees alice's new metadata.
	info, err := api.UpdateParticipant(ctx, "s", "alice", protocol.UpdateParticipant{Metadata: ptr(`{"role":"host"}`), Name: ptr("Alice")})
	if err != nil || info.Metadata != `{"role":"host"}` || info.Name != "Alice" {
		t.Fatalf("update: %+v %v", info, err)
	}
	ev, err := bob.WaitEvent(ctx, "participantUpdated")
	if err != nil {
		t.Fatal(err)
	}
	if p := ev["participant"].(map[string]any); p["identity"] != "alice" || p["metadata"] != `{"role":"host"}` || p["name"] != "Alice" {
		t.Fatalf("bob saw %v", p)
	}

	// Publish, revoked live: the track goes, the next publish is refused.
	v := newVideo("cam")
	sid, _, err := alice.Publish(ctx, v.track, "camera")
	if err != nil {
		t.Fatal(err)
	}
	v.run(t)
	waitTrack(t, bob, 10*time.Second)
	info, err = api.UpdateParticipant(ctx, "s", "alice", protocol.UpdateParticipant{Permissions: &protocol.Permissions{Publish: ptr(false)}})
	if err != nil || info.Permissions.Publish || !info.Permissions.Subscribe || len(info.Tracks) != 0 {
		t.Fatalf("revoke publish: %+v %v", info, err)
	}
	if ev, err := bob.WaitEvent(ctx, "trackUnpublished"); err != nil || ev["trackSid"] != sid {
		t.Fatalf("bob not told of the unpublished track: %v %v", ev, err)
	}
	// Alice hears of her own change (after the metadata one).
	for {
		ev, err := alice.WaitEvent(ctx, "participantUpdated")
		if err != nil {
			t.Fatalf("alice not told her publish grant went: %v", err)
		}
		if perm := ev["participant"].(map[string]any)["permissions"].(map[string]any); perm["publish"] == false {
			break
		}
	}
	a := newAudio("mic")
	if _, _, err := alice.Publish(ctx, a.track, "microphone"); err == nil || !strings.Contains(err.Error(), protocol.CodeForbidden) {
		t.Fatalf("publish after the revoke: %v", err)
	}

	// Data from the server: to the room (text), then to carol only (binary).
	n, err := api.SendData(ctx, "s", protocol.SendData{Data: "hello from the server", Topic: "news"})
	if err != nil || n != 3 {
		t.Fatalf("data to the room: %d %v", n, err)
	}
	for name, c := range map[string]*client.Client{"alice": alice, "bob": bob, "carol": carol} {
		select {
		case d := <-c.DataIn:
			if string(d.Payload) != "hello from the server" || d.Header.Topic != "news" || d.Header.From != "" || !d.Header.Text || !d.Reliable {
				t.Fatalf("%s got %+v %q", name, d.Header, d.Payload)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s got no data from the server", name)
		}
	}
	bin := []byte{0, 1, 2, 255}
	n, err = api.SendData(ctx, "s", protocol.SendData{Data: base64.StdEncoding.EncodeToString(bin), Encoding: "base64", To: []string{"carol"}, Reliable: ptr(false)})
	if err != nil || n != 1 {
		t.Fatalf("data to carol: %d %v", n, err)
	}
	select {
	case d := <-carol.DataIn:
		if string(d.Payload) != string(bin) || d.Header.Text || d.Reliable {
			t.Fatalf("carol got %+v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("carol got no data")
	}
	select {
	case d := <-bob.DataIn:
		t.Fatalf("data for carol reached bob: %+v", d)
	case <-time.After(200 * time.Millisecond):
	}

	// Errors: unknown room or participant 404, malformed 400, non-admin 403.
	_, err = api.UpdateParticipant(ctx, "s", "nobody", protocol.UpdateParticipant{Metadata: ptr("x")})
	wantAPIError(t, "update of an unknown participant", err, 404, protocol.CodeNotFound)
	_, err = api.UpdateParticipant(ctx, "nowhere", "alice", protocol.UpdateParticipant{Metadata: ptr("x")})
	wantAPIError(t, "update in an unknown room", err, 404, protocol.CodeNotFound)
	_, err = api.UpdateParticipant(ctx, "s", "alice", protocol.UpdateParticipant{})
	wantAPIError(t, "empty update", err, 400, protocol.CodeBadRequest)
	_, err = api.UpdateParticipant(ctx, "s", "alice", protocol.UpdateParticipant{Metadata: ptr(strings.Repeat("m", 17<<10))})
	wantAPIError(t, "oversize metadata", err, 400, protocol.CodeBadRequest)
	_, err = api.SendData(ctx, "s", protocol.SendData{Data: "x", To: []string{"nobody"}})
	wantAPIError(t, "data to an unknown participant", err, 404, protocol.CodeNotFound)
	_, err = api.SendData(ctx, "nowhere", protocol.SendData{Data: "x"})
	wantAPIError(t, "data to an unknown room", err, 404, protocol.CodeNotFound)
	_, err = api.SendData(ctx, "s", protocol.SendData{Data: "***", Encoding: "base64"})
	wantAPIError(t, "bad base64", err, 400, protocol.CodeBadRequest)
	_, err = api.SendData(ctx, "s", protocol.SendData{Data: "x", Encoding: "rot13"})
	wantAPIError(t, "unknown encoding", err, 400, protocol.CodeBadRequest)
	admin := e.token("", "ops", auth.Grants{Admin: true}, time.Hour)
	for _, c := range []struct{ method, path, token, body, code string }{
		{"PATCH", "/v1/admin/rooms/s/participants/alice", admin, `{"permissions":{"camera":true}}`, protocol.CodeBadRequest},
		{"PATCH", "/v1/admin/rooms/s/participants/alice", admin, `{"metadata":`, protocol.CodeBadRequest},
		{"POST", "/v1/admin/rooms/s/data", admin, `[1,2]`, protocol.CodeBadRequest},
		{"PATCH", "/v1/admin/rooms/s/participants/alice", e.token("s", "u", all, time.Hour), `{"metadata":"x"}`, protocol.CodeForbidden},
	} {
		req, _ := http.NewRequest(c.method, e.url+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 512)
		k, _ := resp.Body.Read(b)
		resp.Body.Close()
		if errCode(t, string(b[:k])) != c.code {
			t.Fatalf("%s %s %s: %d %s, want %s", c.method, c.path, c.body, resp.StatusCode, b[:k], c.code)
		}
	}

	// Removal.
	if err := api.RemoveParticipant(ctx, "s", "bob"); err != nil {
		t.Fatal(err)
	}
	if ev, err := bob.WaitEvent(ctx, "leave"); err != nil || ev["reason"] != "kicked" {
		t.Fatalf("removed client got %v %v", ev, err)
	}
	wantAPIError(t, "removal of one gone", api.RemoveParticipant(ctx, "s", "bob"), 404, protocol.CodeNotFound)
}

// A move: the client is handed a token for the other room and leaves this
// one; joining with that token, it is there as who it was, with its grants.
func TestServerAPIMove(t *testing.T) {
	e := start(t)
	api := serverapi.New(e.url, apiKey, apiSecret)
	ctx := ctxT(t, 20*time.Second)
	c, err := client.Join(ctx, e.ws, e.token("m1", "alice", auth.Grants{Subscribe: true, PublishData: true}, time.Hour), client.Options{Name: "Alice"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	bob := e.join("m1", "bob")
	carol := e.join("m2", "carol")

	wantAPIError(t, "move to the same room", api.MoveParticipant(ctx, "m1", "alice", "m1"), 400, protocol.CodeBadRequest)
	wantAPIError(t, "move to no room", api.MoveParticipant(ctx, "m1", "alice", ""), 400, protocol.CodeBadRequest)
	wantAPIError(t, "move of an unknown participant", api.MoveParticipant(ctx, "m1", "nobody", "m2"), 404, protocol.CodeNotFound)
	wantAPIError(t, "move from an unknown room", api.MoveParticipant(ctx, "m9", "alice", "m2"), 404, protocol.CodeNotFound)

	if err := api.MoveParticipant(ctx, "m1", "alice", "m2"); err != nil {
		t.Fatal(err)
	}
	mv, err := c.WaitEvent(ctx, "move")
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := mv["token"].(string)
	if mv["room"] != "m2" || tok == "" {
		t.Fatalf("move message %v", mv)
	}
	if ev, err := bob.WaitEvent(ctx, "participantLeft"); err != nil || ev["identity"] != "alice" || ev["reason"] != "moved" {
		t.Fatalf("bob saw %v %v", ev, err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the moved client's signaling stayed open")
	}
	moved, err := client.Join(ctx, e.ws, tok, client.Options{})
	if err != nil {
		t.Fatalf("join with the move's token: %v", err)
	}
	t.Cleanup(moved.Close)
	ev, err := carol.WaitEvent(ctx, "participantJoined")
	if err != nil {
		t.Fatal(err)
	}
	p := ev["participant"].(map[string]any)
	perm := p["permissions"].(map[string]any)
	if p["identity"] != "alice" || p["name"] != "Alice" || perm["publish"] != false || perm["subscribe"] != true || perm["publishData"] != true {
		t.Fatalf("carol saw %v", p)
	}
	if r := e.srv.Manager.Room("m1"); r == nil || r.ByIdentity("alice") != nil {
		t.Fatal("alice is still in m1")
	}
}
