package sfu

import (
	"slices"

	"github.com/petrel-sfu/petrel/auth"
)

// An audio-mixed room (like Janus's AudioBridge): the server's mixer (package
// audio/mix) hears every visible participant's audio through sinks and sends
// each participant one mixed track from a hidden participant whose audience is
// that participant. The room's part is only to keep the mixed tracks from the
// other clients: they are not auto-subscribed and never forwarded (withheld as
// audio Last-N withholds), while the mixer's sinks still get every packet.

// SetAudioMix makes the room's audio mixed (on) or forwarded (off). Turning it
// off lets the next audio decision (within audioDecisionInterval) forward the
// tracks to those who subscribe.
func (r *Room) SetAudioMix(on bool) {
	r.audioMix.Store(on)
	if on {
		for _, p := range r.all() {
			for _, t := range p.publications() {
				if r.mixed(p, t) {
					t.audioWithheld.Store(true)
				}
			}
		}
	}
}

// AudioMix reports whether the room's audio is mixed by the server.
func (r *Room) AudioMix() bool { return r.audioMix.Load() }

// mixed says whether owner's track t goes only to the mixer: audio of a
// visible participant in a mixed room. Hidden participants' audio (the mixer's
// own tracks, a recording played to one viewer) is forwarded as ever.
func (r *Room) mixed(owner *Participant, t *Publication) bool {
	return t.kind == Audio && !owner.hidden && r.audioMix.Load()
}

// Local reports whether p is a participant inside the server (no peer
// connection: it receives through sinks, not DownTracks).
func (p *Participant) Local() bool { return p.local }

// withMix gives a WHEP viewer of a mixed room the mix instead of the mixed
// audio tracks it selected (which are never forwarded): the minus-one of the
// viewer's identity when that participant is in the mix (a SIP gateway's
// WHIP caller listening over WHEP), else the mix of everyone.
func (r *Room) withMix(tracks []*Publication, viewer string) []*Publication {
	wanted := false
	tracks = slices.DeleteFunc(tracks, func(t *Publication) bool {
		m := r.mixed(t.owner, t)
		wanted = wanted || m
		return m
	})
	if !wanted {
		return tracks
	}
	var own, all *Publication
	for _, p := range r.all() {
		if !p.local || !p.hidden || p.origin != Server {
			continue
		}
		switch p.identity {
		case auth.MixPrefix + viewer:
			own = p.audioTrack()
		case auth.MixRoomIdentity:
			all = p.audioTrack()
		}
	}
	if own != nil {
		return append(tracks, own)
	}
	if all != nil {
		return append(tracks, all)
	}
	return tracks
}

// audioTrack is one of p's audio tracks, nil if none.
func (p *Participant) audioTrack() *Publication {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.published {
		if t.kind == Audio {
			return t
		}
	}
	return nil
}
