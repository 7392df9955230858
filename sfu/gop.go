package sfu

// Fast start for tracks whose source cannot be asked for a keyframe (an RTSP
// camera, plain RTP): a new subscriber starts at once from the last keyframe
// still in the layer's packet cache instead of waiting up to a GOP for the next.

// SetGOPStart enables (or disables) starting new subscribers of t from the
// cached last GOP.
func (t *Publication) SetGOPStart(on bool) { t.gopStart.Store(on) }

// HasSinks reports whether a Go sink (a recorder) receives the track.
func (t *Publication) HasSinks() bool { return t.hasSinks() }
