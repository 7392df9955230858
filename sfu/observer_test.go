package sfu

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

// The observer hears a room's life in order, with the participant's origin;
// a revoked publish grant unpublishes at once.
func TestObserverSeesRoomLifeAndGrantChanges(t *testing.T) {
	m := NewManager(config.Default(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var mu sync.Mutex
	var got []string
	m.SetObserver(func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		s := ev.Kind + ":" + ev.Room.Name
		if ev.Participant != nil {
			s += ":" + ev.Participant.Identity + ":" + ev.Origin.String()
		}
		if ev.Track != nil {
			s += ":" + ev.Track.Kind
		}
		got = append(got, s)
	})
	p, err := m.JoinLocal(LocalOptions{Room: "r", Identity: "alice", Grants: auth.Grants{Publish: true}})
	if err != nil {
		t.Fatal(err)
	}
	mirror, err := m.JoinLocal(LocalOptions{Room: "r", Identity: "bob", Origin: Mirror})
	if err != nil {
		t.Fatal(err)
	}
	opus := Codec{MimeType: "audio/opus", ClockRate: 48000, Channels: 2, PayloadType: 111}
	if _, err := p.PublishLocal(LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio"}, Codec: opus}); err != nil {
		t.Fatal(err)
	}
	p.SetGrants(auth.Grants{Subscribe: true})
	if len(p.Publications()) != 0 {
		t.Fatal("a revoked publish grant left the track published")
	}
	if _, err := p.PublishLocal(LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio"}, Codec: opus}); protocol.CodeOf(err) != protocol.CodeForbidden {
		t.Fatalf("publish after the grant was revoked: %v", err)
	}
	if g := p.Info().Permissions; g.Publish || !g.Subscribe {
		t.Fatalf("permissions after the change: %+v", g)
	}
	mirror.Close("gone")
	p.Close("left")
	m.Emit(Event{Kind: "recording_started", Room: protocol.RoomInfo{Name: "r"}})
	want := []string{
		"room_started:r",
		"participant_joined:r:alice:client",
		"participant_joined:r:bob:mirror",
		"track_published:r:alice:client:audio",
		"track_unpublished:r:alice:client:audio",
		"participant_left:r:bob:mirror",
		"participant_left:r:alice:client",
		"room_finished:r",
		"recording_started:r",
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
