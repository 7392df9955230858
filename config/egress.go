package config

import "errors"

// Egress is the push egress to streaming services (egress/push.go,
// docs/egress.md): an ffmpeg subprocess per egress, started through the
// admin API.
type Egress struct {
	// MaxRTMP bounds the RTMP egresses running at once (each is an ffmpeg
	// process; one that transcodes takes a core).
	MaxRTMP int `yaml:"max_rtmp" flag:"egress-max-rtmp" usage:"RTMP egresses running at once"`
	// FFmpeg is the binary the egresses run.
	FFmpeg string `yaml:"ffmpeg" flag:"egress-ffmpeg" usage:"ffmpeg binary of the RTMP egress"`
	// CAFile is a PEM bundle of the authorities an rtmps:// target's
	// certificate must chain to ("" is the system's); it is always verified.
	CAFile string `yaml:"ca_file" flag:"egress-ca-file" usage:"PEM authorities of rtmps targets (default: the system's)"`
}

func defaultEgress() Egress { return Egress{MaxRTMP: 4, FFmpeg: "ffmpeg"} }

func (e Egress) validate() error {
	if e.MaxRTMP < 1 {
		return errors.New("egress.max_rtmp must be at least 1")
	}
	return nil
}
