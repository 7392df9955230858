package config

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Camera declares one IP camera (the `cameras:` list). Exactly one ingest is
// set: an RTSP URL to pull, an RTP port the camera pushes to, or WebRTC (the
// camera joins its room itself). The camera package owns the behaviour; the
// type lives here so that the YAML file is decoded in one place.
type Camera struct {
	ID   string `yaml:"id" json:"id"`
	Name string `yaml:"name" json:"name,omitempty"`
	// RTSP is rtsp://user:password@host:port/path; credentials stay server-side.
	RTSP string `yaml:"rtsp" json:"rtsp,omitempty"`
	// RTSPTransport is "tcp" (default: works through firewalls) or "udp".
	RTSPTransport string   `yaml:"rtsp_transport" json:"rtspTransport,omitempty"`
	RTP           *RTPPush `yaml:"rtp" json:"rtp,omitempty"`
	WebRTC        bool     `yaml:"webrtc" json:"webrtc,omitempty"`
	// Warm keeps the upstream session open without viewers, so the first viewer
	// starts from the cached GOP at once; otherwise it opens on the first viewer.
	Warm bool `yaml:"warm" json:"warm,omitempty"`
	// IdleAfter is how long a cold camera's upstream session stays open after
	// its last viewer left (default 10s).
	IdleAfter time.Duration `yaml:"idle_after" json:"idleAfter,omitempty"`
	// Transcode is how an RTSP camera's AAC audio reaches WebRTC viewers, who
	// cannot receive AAC: "" (ffmpeg from PATH), the path of an ffmpeg binary,
	// or "off" (video only). ffmpeg needs libopus. docs/cameras.md.
	Transcode string `yaml:"transcode" json:"transcode,omitempty"`
	ONVIF     ONVIF  `yaml:"onvif" json:"onvif,omitempty"`
	HTTP      HTTPTo `yaml:"http" json:"http,omitempty"`
}

// RTPPush is plain RTP sent to a UDP port by ffmpeg, GStreamer or the camera.
type RTPPush struct {
	// Port receives the video (and, without AudioPort, the audio: payload types
	// tell them apart).
	Port      int    `yaml:"port" json:"port"`
	AudioPort int    `yaml:"audio_port" json:"audioPort,omitempty"`
	Bind      string `yaml:"bind" json:"bind,omitempty"` // default 127.0.0.1 with --loopback, else 0.0.0.0
	// Video is "h264" (default); VideoPT its payload type (default 96).
	Video   string `yaml:"video" json:"video,omitempty"`
	VideoPT uint8  `yaml:"video_pt" json:"videoPt,omitempty"`
	// Audio is "opus", "pcmu", "pcma" or "" (none); AudioPT its payload type
	// (default 111 for Opus, 0 PCMU, 8 PCMA).
	Audio   string `yaml:"audio" json:"audio,omitempty"`
	AudioPT uint8  `yaml:"audio_pt" json:"audioPt,omitempty"`
	// Sprop is the sender SDP's sprop-parameter-sets (base64 SPS,PPS): senders
	// that put the parameter sets only in their SDP (ffmpeg -c copy) need it for
	// the first viewers to decode before any in-band SPS/PPS arrives.
	Sprop string `yaml:"sprop_parameter_sets" json:"spropParameterSets,omitempty"`
}

// ONVIF is the camera's device service, for PTZ and the audio backchannel.
type ONVIF struct {
	URL      string `yaml:"url" json:"url,omitempty"`
	User     string `yaml:"user" json:"user,omitempty"`
	Password string `yaml:"password" json:"password,omitempty"`
	// Backchannel is the RTSP URL of the audio backchannel (viewers talking
	// through the camera's loudspeaker); default: the camera's rtsp URL.
	Backchannel string `yaml:"backchannel" json:"backchannel,omitempty"`
}

// HTTPTo is the camera's web interface, reachable over the data channel only
// on the allowed paths.
type HTTPTo struct {
	Base  string   `yaml:"base" json:"base,omitempty"`
	Allow []string `yaml:"allow" json:"allow,omitempty"`
	// User and Password log in to the web interface (Digest or Basic, as the
	// camera asks); empty: the ONVIF credentials.
	User     string `yaml:"user" json:"user,omitempty"`
	Password string `yaml:"password" json:"password,omitempty"`
}

// ParameterSets decodes Sprop (nil, nil when empty).
func (r *RTPPush) ParameterSets() (sps, pps []byte, err error) {
	if r.Sprop == "" {
		return nil, nil, nil
	}
	parts := strings.Split(r.Sprop, ",")
	if len(parts) < 2 {
		return nil, nil, fmt.Errorf("want base64 SPS,PPS")
	}
	if sps, err = base64.StdEncoding.DecodeString(strings.TrimSpace(parts[0])); err != nil || len(sps) < 4 || sps[0]&0x1f != 7 {
		return nil, nil, fmt.Errorf("the first set is not an SPS")
	}
	if pps, err = base64.StdEncoding.DecodeString(strings.TrimSpace(parts[1])); err != nil || len(pps) < 1 || pps[0]&0x1f != 8 {
		return nil, nil, fmt.Errorf("the second set is not a PPS")
	}
	return sps, pps, nil
}

var cameraID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// Validate reports a camera declaration that cannot work.
func (c *Camera) Validate() error {
	if !cameraID.MatchString(c.ID) {
		return fmt.Errorf("camera id %q: must match [a-z0-9][a-z0-9-]{0,63}", c.ID)
	}
	n := 0
	if c.RTSP != "" {
		n++
		u, err := url.Parse(c.RTSP)
		if err != nil || (u.Scheme != "rtsp" && u.Scheme != "rtsps") || u.Host == "" {
			return fmt.Errorf("camera %s: rtsp must be an rtsp:// URL with a host", c.ID)
		}
		if t := c.RTSPTransport; t != "" && t != "tcp" && t != "udp" {
			return fmt.Errorf("camera %s: rtsp_transport must be tcp or udp", c.ID)
		}
	}
	if c.RTP != nil {
		n++
		r := c.RTP
		if r.Port <= 0 || r.Port > 65535 || r.AudioPort < 0 || r.AudioPort > 65535 {
			return fmt.Errorf("camera %s: rtp.port must be 1-65535", c.ID)
		}
		if v := strings.ToLower(r.Video); v != "" && v != "h264" {
			return fmt.Errorf("camera %s: rtp.video %q: only h264 is supported", c.ID, r.Video)
		}
		switch strings.ToLower(r.Audio) {
		case "", "opus", "pcmu", "pcma":
		default:
			return fmt.Errorf("camera %s: rtp.audio %q: opus, pcmu or pcma", c.ID, r.Audio)
		}
		if _, _, err := r.ParameterSets(); err != nil {
			return fmt.Errorf("camera %s: rtp.sprop_parameter_sets: %v", c.ID, err)
		}
		if r.VideoPT > 127 || r.AudioPT > 127 {
			return fmt.Errorf("camera %s: payload types are 0-127", c.ID)
		}
	}
	if c.WebRTC {
		n++
	}
	if c.IdleAfter < 0 {
		return fmt.Errorf("camera %s: idle_after must not be negative", c.ID)
	}
	if n != 1 {
		return fmt.Errorf("camera %s: set exactly one of rtsp, rtp or webrtc", c.ID)
	}
	for _, raw := range []string{c.ONVIF.URL, c.HTTP.Base} {
		if raw == "" {
			continue
		}
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("camera %s: %q must be an http(s) URL", c.ID, raw)
		}
	}
	for _, p := range c.HTTP.Allow {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("camera %s: http.allow path %q must start with /", c.ID, p)
		}
	}
	return nil
}

func validateCameras(cams []Camera) error {
	seen := map[string]bool{}
	for i := range cams {
		if err := cams[i].Validate(); err != nil {
			return err
		}
		if seen[cams[i].ID] {
			return fmt.Errorf("camera id %q declared twice", cams[i].ID)
		}
		seen[cams[i].ID] = true
	}
	return nil
}
