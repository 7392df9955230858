package sfu

import (
	"io"
	"log/slog"
	"testing"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

// A second session of an identity pushes the first out, unless the manager's
// handover keeps it (a cluster mirror of someone moving to this node) or the
// joiner asks to keep it (LocalOptions.KeepIdentity): then both are in the
// room until the old one leaves, and its leaving takes nothing of the new one.
func TestHandoverKeepsTheOldSession(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	in := func(m *Manager, sid string) bool {
		for _, p := range m.Room("r").Participants() {
			if p.Sid() == sid {
				return true
			}
		}
		return false
	}
	t.Run("without handover the old session is kicked", func(t *testing.T) {
		m := NewManager(config.Default(), nil, log)
		old, err := m.JoinLocal(LocalOptions{Room: "r", Identity: "alice", Grants: auth.Grants{Publish: true}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := m.JoinLocal(LocalOptions{Room: "r", Identity: "alice", Grants: auth.Grants{Publish: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close("done")
		if in(m, old.Sid()) {
			t.Fatal("the old session of alice is still in the room")
		}
	})
	for _, c := range []struct {
		name     string
		handover bool
		keep     bool
	}{{"handover keeps a mirror", true, false}, {"KeepIdentity keeps the holder", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			m := NewManager(config.Default(), nil, log)
			old, err := m.JoinLocal(LocalOptions{Room: "r", Identity: "alice", Grants: auth.Grants{Publish: true}})
			if err != nil {
				t.Fatal(err)
			}
			if c.handover {
				m.SetHandover(func(p *Participant) bool { return p == old })
			}
			p, err := m.JoinLocal(LocalOptions{Room: "r", Identity: "alice", KeepIdentity: c.keep, Grants: auth.Grants{Publish: true}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close("done")
			if _, err := p.PublishLocal(LocalTrackOptions{
				Info:  protocol.TrackInfo{Kind: "video", Source: "camera", SSRC: 0x1234},
				Codec: Codec{MimeType: "video/VP8", ClockRate: 90000, PayloadType: 96},
			}); err != nil {
				t.Fatal(err)
			}
			if !in(m, old.Sid()) || !in(m, p.Sid()) {
				t.Fatalf("want both sessions of alice in the room: old %v new %v", in(m, old.Sid()), in(m, p.Sid()))
			}
			old.Close("moved")
			if in(m, old.Sid()) || !in(m, p.Sid()) {
				t.Fatalf("after the old session left: old %v new %v, want only the new one", in(m, old.Sid()), in(m, p.Sid()))
			}
			if n := len(p.Publications()); n != 1 {
				t.Fatalf("the new session has %d tracks after the old one left, want 1", n)
			}
		})
	}
}
