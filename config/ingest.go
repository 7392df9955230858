package config

import (
	"errors"
	"net"
)

// Ingest brings publishers of other protocols into rooms (ingest/,
// docs/ingest.md). It is off unless ingest.rtmp is set.
type Ingest struct {
	// RTMP is the TCP listen address of the RTMP ingest (OBS, ffmpeg); empty disables it.
	RTMP string `yaml:"rtmp" flag:"ingest-rtmp" usage:"RTMP ingest listen address, e.g. :1935 (empty: no RTMP ingest)"`
	// MaxConns bounds open RTMP connections, publishing or still in their handshake.
	MaxConns int `yaml:"max_conns" flag:"ingest-max-conns" usage:"open RTMP ingest connections"`
}

func (i Ingest) validate() error {
	if i.RTMP != "" {
		if _, _, err := net.SplitHostPort(i.RTMP); err != nil {
			return errors.New("ingest.rtmp must be host:port (\":1935\", \"127.0.0.1:1935\")")
		}
	}
	if i.MaxConns < 1 {
		return errors.New("ingest.max_conns must be at least 1")
	}
	return nil
}
