package config

import (
	"errors"
	"time"
)

// HLS is the live egress to passive viewers (egress/, docs/egress.md): an
// LL-HLS muxer per watched track, started by the first request and stopped
// when nobody has asked for Idle.
type HLS struct {
	// Disabled turns the HLS endpoints off (they answer 404).
	Disabled bool `yaml:"disabled" flag:"hls-disabled" usage:"turn the HLS egress endpoints off"`
	// Part is the LL-HLS part target: the least duration of a part.
	Part time.Duration `yaml:"part" flag:"hls-part" usage:"LL-HLS part target duration"`
	// Segment is the least duration of a segment (a segment starts at a keyframe).
	Segment time.Duration `yaml:"segment" flag:"hls-segment" usage:"HLS least segment duration"`
	// Idle is how long a muxer runs after the last request.
	Idle time.Duration `yaml:"idle" flag:"hls-idle" usage:"stop an HLS muxer this long after its last request"`
	// MaxStreams bounds the muxers running at once.
	MaxStreams int `yaml:"max_streams" flag:"hls-max-streams" usage:"HLS muxers running at once"`
}

func defaultHLS() HLS {
	return HLS{Part: 200 * time.Millisecond, Segment: time.Second, Idle: 10 * time.Second, MaxStreams: 32}
}

func (h HLS) validate() error {
	switch {
	case h.Part < 50*time.Millisecond || h.Part > 5*time.Second:
		return errors.New("hls.part must be between 50ms and 5s")
	case h.Segment < h.Part || h.Segment > 30*time.Second:
		return errors.New("hls.segment must be at least hls.part and at most 30s")
	case h.Idle < time.Second:
		return errors.New("hls.idle must be at least 1s")
	case h.MaxStreams < 1:
		return errors.New("hls.max_streams must be at least 1")
	}
	return nil
}
