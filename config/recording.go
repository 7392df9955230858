package config

import (
	"errors"
	"strings"
	"time"
)

// Recording configures continuous recording of cameras (the record package,
// docs/recording.md). It is off unless Dir is set.
type Recording struct {
	// Dir holds one directory of segment files per camera; empty disables recording.
	Dir string `yaml:"dir" flag:"recording-dir" usage:"directory for camera recordings (empty: no recording)"`
	// Segment is the length of one file; a segment ends on the first keyframe after it.
	Segment time.Duration `yaml:"segment" flag:"recording-segment" usage:"length of one recording segment"`
	// MaxAge deletes segments older than this (0: keep by size only).
	MaxAge time.Duration `yaml:"max_age" flag:"recording-max-age" usage:"delete recordings older than this (0: no age limit)"`
	// MaxSizeMB bounds all cameras' recordings together; the oldest go first (0: no limit).
	MaxSizeMB int `yaml:"max_size_mb" flag:"recording-max-size-mb" usage:"total size of all recordings in MiB (0: no limit)"`
	// Cameras limits recording to these camera ids; empty records every camera.
	Cameras []string `yaml:"cameras"`
	// Rooms are recorded from the moment they open: a room name, or a prefix
	// ending in "*" ("*" alone: every room). Camera rooms are never matched
	// (their cameras are recorded as cameras), nor the rooms recordings play
	// back in (recording/<id>).
	Rooms []string `yaml:"rooms"`
}

// RecordsRoom reports whether room is to be recorded when it opens.
func (r Recording) RecordsRoom(room string) bool {
	if strings.HasPrefix(room, "camera/") || strings.HasPrefix(room, "recording/") {
		return false
	}
	return matchesRoom(r.Rooms, room)
}

func (r Recording) validate() error {
	if r.Dir == "" {
		return nil
	}
	if r.Segment < time.Second || r.Segment > time.Hour {
		return errors.New("recording.segment must be between 1s and 1h")
	}
	for _, p := range r.Rooms {
		if p == "" || strings.Contains(strings.TrimSuffix(p, "*"), "*") {
			return errors.New("recording.rooms: each entry is a room name or a prefix ending in *")
		}
	}
	if r.MaxAge < 0 || r.MaxSizeMB < 0 {
		return errors.New("recording.max_age and recording.max_size_mb must not be negative")
	}
	return nil
}
