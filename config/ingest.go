package config

import (
	"errors"
	"net"
)

// Ingest brings publishers of other protocols into rooms (ingest/,
// docs/ingest.md). It is off unless ingest.rtmp or ingest.srt is set.
type Ingest struct {
	// RTMP is the TCP listen address of the RTMP ingest (OBS, ffmpeg); empty disables it.
	RTMP string `yaml:"rtmp" flag:"ingest-rtmp" usage:"RTMP ingest listen address, e.g. :1935 (empty: no RTMP ingest)"`
	// SRT is the UDP listen address of the SRT ingest (MPEG-TS); empty disables it.
	SRT string `yaml:"srt" flag:"ingest-srt" usage:"SRT ingest listen address (UDP), e.g. :8890 (empty: no SRT ingest)"`
	// MaxConns bounds open RTMP and SRT connections, publishing or still in their handshake.
	MaxConns int `yaml:"max_conns" flag:"ingest-max-conns" usage:"open RTMP and SRT ingest connections"`
}

func (i Ingest) validate() error {
	if i.RTMP != "" {
		if _, _, err := net.SplitHostPort(i.RTMP); err != nil {
			return errors.New("ingest.rtmp must be host:port (\":1935\", \"127.0.0.1:1935\")")
		}
	}
	if i.SRT != "" {
		if _, _, err := net.SplitHostPort(i.SRT); err != nil {
			return errors.New("ingest.srt must be host:port (\":8890\", \"127.0.0.1:8890\")")
		}
	}
	if i.MaxConns < 1 {
		return errors.New("ingest.max_conns must be at least 1")
	}
	return nil
}
