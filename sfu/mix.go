package sfu

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
