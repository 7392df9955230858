package sfu

import (
	"io"
	"log/slog"
	"testing"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

// A client never takes the identity of the server's own participant, not even
// with the camera grant; the server's own replaces a client holding it.
func TestServerOwnIdentityStays(t *testing.T) {
	m := NewManager(config.Default(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	cam, err := m.JoinLocal(LocalOptions{Room: "camera/x", Identity: "camera", Grants: auth.Grants{Publish: true}, Origin: Server})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []auth.Grants{{Publish: true}, {Publish: true, Camera: true}} {
		_, err := m.JoinLocal(LocalOptions{Room: "camera/x", Identity: "camera", Grants: g})
		if protocol.CodeOf(err) != protocol.CodeIdentityReserved {
			t.Errorf("client with %+v: %v", g, err)
		}
	}
	if _, err := m.JoinLocal(LocalOptions{Room: "camera/x", Identity: "playback-bob", Grants: auth.Grants{Publish: true}}); protocol.CodeOf(err) != protocol.CodeIdentityReserved {
		t.Errorf("client as playback-bob: %v", err)
	}
	if m.Room("camera/x").ByIdentity("camera") != cam {
		t.Fatal("the server's camera was replaced")
	}
	// A WebRTC camera's token holds the identity where the server has none.
	peer, err := m.JoinLocal(LocalOptions{Room: "camera/y", Identity: "camera", Grants: auth.Grants{Publish: true, Camera: true}})
	if err != nil {
		t.Fatal(err)
	}
	own, err := m.JoinLocal(LocalOptions{Room: "camera/y", Identity: "camera", Grants: auth.Grants{Publish: true}, Origin: Server})
	if err != nil {
		t.Fatal(err)
	}
	if m.Room("camera/y").ByIdentity("camera") != own || m.Room("camera/y").BySid(peer.Sid()) != nil {
		t.Fatal("the server's own did not replace the client")
	}
}

// Grants, not being inside the server, decide: a local participant without
// publish cannot publish, one without publishData sends nothing.
func TestLocalParticipantGrants(t *testing.T) {
	m := NewManager(config.Default(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p, err := m.JoinLocal(LocalOptions{Room: "r", Identity: "viewer", Grants: auth.Grants{Subscribe: true}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.PublishLocal(LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio"},
		Codec: Codec{MimeType: "audio/opus", ClockRate: 48000, Channels: 2, PayloadType: 111}})
	if protocol.CodeOf(err) != protocol.CodeForbidden {
		t.Fatalf("publish without the grant: %v", err)
	}
	got := make(chan string, 4)
	q, err := m.JoinLocal(LocalOptions{Room: "r", Identity: "other", Grants: auth.Grants{PublishData: true}})
	if err != nil {
		t.Fatal(err)
	}
	q.OnData(func(_ bool, h DataHeader, _ []byte) { got <- h.From })
	p.PublishData(true, "chat", nil, []byte("hi"))
	if err := q.Relay(p.Sid(), []byte(`{}`)); protocol.CodeOf(err) != protocol.CodeForbidden {
		t.Errorf("relay without subscribe: %v", err)
	}
	p.SetGrants(auth.Grants{PublishData: true})
	p.PublishData(true, "chat", nil, []byte("hi"))
	if from := <-got; from != "viewer" || len(got) != 0 {
		t.Fatalf("delivered from %q, %d more", from, len(got))
	}
}

// Every client session takes a place in the room, hidden ones included; the
// server's own take none; one identity holds at most max_sessions_per_identity.
func TestRoomCountsSessions(t *testing.T) {
	cfg := config.Default()
	cfg.Limits.MaxParticipantsPerRoom = 4
	cfg.Limits.MaxSessionsPerIdentity = 2
	m := NewManager(cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	join := func(id string, hidden bool, o Origin) error {
		_, err := m.JoinLocal(LocalOptions{Room: "r", Identity: id, Hidden: hidden, Origin: o})
		return err
	}
	for i := 0; i < 3; i++ {
		if err := join("server-"+string(rune('a'+i)), false, Server); err != nil {
			t.Fatal(err)
		}
	}
	if err := join("kiosk", true, Client); err != nil {
		t.Fatal(err)
	}
	if err := join("kiosk", true, Client); err != nil {
		t.Fatal(err)
	}
	if err := join("kiosk", true, Client); protocol.CodeOf(err) != protocol.CodeTooManySessions {
		t.Fatalf("third session of one identity: %v", err)
	}
	if err := join("bob", true, Client); err != nil {
		t.Fatal(err)
	}
	if err := join("carol", false, Mirror); err != nil {
		t.Fatal(err)
	}
	if err := join("dave", true, Client); protocol.CodeOf(err) != protocol.CodeRoomFull {
		t.Fatalf("fifth client session in a room of 4: %v", err)
	}
	if err := join("server-z", false, Server); err != nil {
		t.Fatalf("the server's own in a full room: %v", err)
	}
}
