package sfu

import "strings"

// Kind is what a track carries.
type Kind uint8

const (
	Audio Kind = iota + 1
	Video
)

func (k Kind) String() string {
	switch k {
	case Audio:
		return "audio"
	case Video:
		return "video"
	}
	return "unknown"
}

// KindOf reads "audio" or "video" (0 for anything else).
func KindOf(s string) Kind {
	switch strings.ToLower(s) {
	case "audio":
		return Audio
	case "video":
		return Video
	}
	return 0
}

// Codec is a track's codec as its publisher negotiated it.
type Codec struct {
	MimeType    string // "video/VP8", "audio/opus", …
	ClockRate   uint32
	Channels    uint16
	SDPFmtpLine string // H.264: profile and packetization mode
	PayloadType uint8  // the publisher's
}
