package sfu

import (
	"io"
	"log/slog"
	"testing"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

// Rooms named in rtc.audio_mix_rooms open mixed; in a mixed room a visible
// participant's audio is withheld from DownTracks and not auto-subscribed,
// while a hidden participant's (the mixer's own tracks) is not.
func TestAudioMixRooms(t *testing.T) {
	cfg := config.Default()
	cfg.RTC.AudioMixRooms = []string{"town*", "choir"}
	m := NewManager(cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer m.Shutdown()
	for name, want := range map[string]bool{"townhall": true, "choir": true, "choirs": false, "lobby": false, "camera/town": false} {
		r, err := m.getOrCreate(name)
		if err != nil {
			t.Fatal(err)
		}
		if r.AudioMix() != want || r.Info().AudioMix != want {
			t.Errorf("room %q mixed: %v, want %v", name, r.AudioMix(), want)
		}
	}
	opus := Codec{MimeType: "audio/opus", ClockRate: 48000, Channels: 2, PayloadType: 111}
	publish := func(opt LocalOptions) *Publication {
		opt.Room, opt.Grants = "lobby", auth.Grants{Publish: true}
		p, err := m.JoinLocal(opt)
		if err != nil {
			t.Fatal(err)
		}
		lt, err := p.PublishLocal(LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio", Source: "microphone"}, Codec: opus})
		if err != nil {
			t.Fatal(err)
		}
		return lt.Publication()
	}
	before := publish(LocalOptions{Identity: "early"})
	room := m.Room("lobby")
	room.SetAudioMix(true)
	if !before.audioWithheld.Load() {
		t.Error("a track published before the room was mixed is still forwarded")
	}
	if after := publish(LocalOptions{Identity: "late"}); !after.audioWithheld.Load() || !room.mixed(after.owner, after) {
		t.Error("a track published in a mixed room is forwarded")
	}
	if mixOut := publish(LocalOptions{Identity: "audiomix-early", Audience: []string{"early"}, Origin: Server}); room.mixed(mixOut.owner, mixOut) || mixOut.audioWithheld.Load() {
		t.Error("the mixer's own track (a hidden participant's) is withheld")
	}
}
