// Package config holds Petrel's settings and loads them from, in increasing order of
// precedence, embedded defaults, an optional YAML file, PETREL_* environment variables
// and command-line flags. docs/configuration.md documents every key.
package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the whole server configuration.
type Config struct {
	// HTTP is the listen address of the web app, signaling, WHIP/WHEP, REST API and metrics.
	HTTP string `yaml:"http" flag:"http" usage:"HTTP listen address"`
	// APIKey and APISecret sign and verify tokens. Empty means development mode: a
	// generated secret kept in the user's config directory.
	APIKey    string `yaml:"api_key" flag:"api-key" usage:"API key that signs tokens"`
	APISecret string `yaml:"api_secret" flag:"api-secret" usage:"API secret (prefer PETREL_API_SECRET)"`
	LogLevel  string `yaml:"log_level" flag:"log-level" usage:"debug, info, warn or error"`
	// Loopback binds every socket and offers ICE candidates on 127.0.0.1 only. Tests use it.
	Loopback bool `yaml:"loopback" flag:"loopback" usage:"bind and offer candidates on 127.0.0.1 only"`
	// TrustedProxies are the reverse proxies (CIDRs or addresses) whose
	// X-Forwarded-For or Forwarded header names the client; empty: the TCP
	// peer is the client.
	TrustedProxies []string `yaml:"trusted_proxies" flag:"trusted-proxies" usage:"comma-separated CIDRs of reverse proxies whose X-Forwarded-For/Forwarded is believed"`
	// GCPercent is the Go heap's growth before a collection (Go's default is
	// 100); the GOGC environment variable overrides it.
	GCPercent int `yaml:"gc_percent" flag:"gc-percent" usage:"heap growth in percent before a garbage collection (GOGC overrides)"`

	RTC    RTC    `yaml:"rtc"`
	TURN   TURN   `yaml:"turn"`
	Limits Limits `yaml:"limits"`
	Admin  Admin  `yaml:"admin"`
	// WebTransport is the HTTP/3 media endpoint (config/webtransport.go).
	WebTransport WebTransport `yaml:"webtransport"`
	// Cluster is off unless cluster.redis is set (config/cluster.go).
	Cluster Cluster `yaml:"cluster"`

	// Cameras are the IP cameras the gateway serves (camera.go, docs/cameras.md).
	Cameras []Camera `yaml:"cameras"`
	// Recording records cameras continuously (config/recording.go, docs/recording.md).
	Recording Recording `yaml:"recording"`
	// Ingest takes RTMP and SRT publishers into rooms (config/ingest.go, docs/ingest.md).
	Ingest Ingest `yaml:"ingest"`
	// Webhook notifies URLs of room events (config/webhook.go, docs/webhooks.md).
	Webhook Webhook `yaml:"webhook"`
	// HLS serves rooms' tracks and cameras as LL-HLS (config/hls.go, docs/egress.md).
	HLS HLS `yaml:"hls"`
	// Egress pushes rooms' tracks to streaming services (config/egress.go, docs/egress.md).
	Egress Egress `yaml:"egress"`
}

// RTC configures the WebRTC media plane.
type RTC struct {
	UDPPort      int           `yaml:"udp_port" flag:"rtc-udp-port" usage:"UDP port shared by all peers (ICE UDP mux)"`
	TCPPort      int           `yaml:"tcp_port" flag:"rtc-tcp-port" usage:"ICE-TCP port (0: any free port, -1: no ICE-TCP)"`
	UDPReaders   int           `yaml:"udp_readers" flag:"rtc-udp-readers" usage:"sockets (SO_REUSEPORT) and reader goroutines on the UDP port (0: one per two cores, 1 to 8)"`
	NodeIP       string        `yaml:"node_ip" flag:"node-ip" usage:"public IP offered as host candidate (1:1 NAT)"`
	ResumeWindow time.Duration `yaml:"resume_window" flag:"resume-window" usage:"how long a disconnected participant is kept for resumption"`
	// LastN is how many other participants' video each receiver gets, by recency
	// of speaking (pinned ones always); 0 means all.
	LastN int `yaml:"last_n" flag:"last-n" usage:"video streams per receiver, most recent speakers first (0: all)"`
	// AudioLastN is how many speakers' audio every receiver gets, the loudest;
	// 0 or less means all.
	AudioLastN int `yaml:"audio_last_n" flag:"audio-last-n" usage:"audio streams per receiver, the loudest speakers (0: all)"`
	// AudioMixRooms have their audio mixed by the server from the moment they
	// open (docs/audiomix.md): a room name, or a prefix ending in "*".
	AudioMixRooms []string `yaml:"audio_mix_rooms"`
	// PacketCache is the number of packets kept per video track for NACK answers.
	PacketCache int `yaml:"packet_cache" flag:"packet-cache" usage:"packets cached per video track for retransmission"`
}

// TURN configures the embedded TURN server.
type TURN struct {
	Enabled bool   `yaml:"enabled" flag:"turn" usage:"run the embedded TURN server"`
	Port    int    `yaml:"port" flag:"turn-port" usage:"TURN port (UDP and TCP)"`
	Realm   string `yaml:"realm" flag:"turn-realm" usage:"TURN realm"`
	// Host is the name or address clients use to reach TURN; empty means the host the
	// client used for the HTTP request.
	Host string `yaml:"host" flag:"turn-host" usage:"TURN host handed to clients (default: the request's host)"`
	// RelayIP is the address relayed traffic leaves from.
	RelayIP       string        `yaml:"relay_ip" flag:"turn-relay-ip" usage:"relay address (default: node-ip, or 127.0.0.1 with --loopback)"`
	Secret        string        `yaml:"secret" flag:"turn-secret" usage:"shared secret for TURN REST credentials (default: derived from the API secret)"`
	CredentialTTL time.Duration `yaml:"credential_ttl" flag:"turn-ttl" usage:"lifetime of TURN credentials"`
	// External TURN servers (coturn with use-auth-secret) handed to clients as well.
	External []string `yaml:"external"`
	// Live allocations are bounded per identity and per client IP address, so
	// that one credential or one host cannot take every relay port.
	MaxAllocationsPerUser int `yaml:"max_allocations_per_user" flag:"turn-max-allocations-per-user" usage:"live TURN allocations per identity (0: no limit)"`
	MaxAllocationsPerIP   int `yaml:"max_allocations_per_ip" flag:"turn-max-allocations-per-ip" usage:"live TURN allocations per client IP address (0: no limit)"`
}

// Limits protect the server from clients that misbehave.
type Limits struct {
	MaxParticipantsPerRoom  int `yaml:"max_participants_per_room" flag:"max-participants" usage:"participants per room"`
	MaxTracksPerParticipant int `yaml:"max_tracks_per_participant" flag:"max-tracks" usage:"published tracks per participant"`
	MaxMessageBytes         int `yaml:"max_message_bytes" flag:"max-message-bytes" usage:"largest signaling message"`
	MessagesPerSecond       int `yaml:"messages_per_second" flag:"messages-per-second" usage:"signaling messages per second per participant"`
	MaxDataBytes            int `yaml:"max_data_bytes" flag:"max-data-bytes" usage:"largest data-channel message"`
	DataMessagesPerSecond   int `yaml:"data_messages_per_second" flag:"data-messages-per-second" usage:"data messages per second per participant"`
	MaxDataChannels         int `yaml:"max_data_channels" flag:"max-data-channels" usage:"data channels a participant may have open (the room uses two)"`
	JoinsPerSecond          int `yaml:"joins_per_second" flag:"joins-per-second" usage:"joins per second for the whole server"`
	JoinsPerIP              int `yaml:"joins_per_ip_per_second" flag:"joins-per-ip" usage:"joins per second from one client address (0: no limit)"`
	MaxConnsPerIP           int `yaml:"max_conns_per_ip" flag:"max-conns-per-ip" usage:"open HTTP connections from one client address (0: no limit)"`
	MaxRooms                int `yaml:"max_rooms" flag:"max-rooms" usage:"rooms on this server"`
	MaxSDPBytes             int `yaml:"max_sdp_bytes" flag:"max-sdp-bytes" usage:"largest SDP accepted"`
	// MaxSessionsPerIdentity bounds the sessions one identity holds in a room
	// at once (WHEP viewers on one token, mostly: other doors replace the
	// identity's previous session).
	MaxSessionsPerIdentity int `yaml:"max_sessions_per_identity" flag:"max-sessions-per-identity" usage:"sessions one identity may hold in a room at once"`
	// MaxTokenLifetime refuses tokens valid for longer (from issue to expiry).
	MaxTokenLifetime time.Duration `yaml:"max_token_lifetime" flag:"max-token-lifetime" usage:"longest token validity accepted (issue to expiry)"`
	// The HTTP port's timeouts. Streams (live.mp4, exports) have the write
	// timeout between two writes; the signaling WebSocket pings instead.
	HTTPHeaderTimeout time.Duration `yaml:"http_header_timeout" flag:"http-header-timeout" usage:"time to send a request's headers"`
	HTTPBodyTimeout   time.Duration `yaml:"http_body_timeout" flag:"http-body-timeout" usage:"time to send a request's body after its headers"`
	HTTPWriteTimeout  time.Duration `yaml:"http_write_timeout" flag:"http-write-timeout" usage:"time to answer a request (for streams: between two writes)"`
	HTTPIdleTimeout   time.Duration `yaml:"http_idle_timeout" flag:"http-idle-timeout" usage:"how long an idle keep-alive connection stays open"`
}

// Admin controls the REST admin API and /metrics.
type Admin struct {
	AllowRemote bool `yaml:"allow_remote" flag:"admin-allow-remote" usage:"serve the admin API and /metrics to non-loopback clients"`
}

// Default is the embedded configuration: everything works with no file and no flags.
func Default() Config {
	return Config{
		HTTP:     ":7880",
		LogLevel: "info",
		// The heap is mostly long-lived connection state and the packet paths
		// allocate little, so collecting at half the growth keeps RSS closer to
		// what is live at no measurable CPU (docs/benchmarks.md).
		GCPercent: 50,
		RTC: RTC{
			UDPPort:      7882,
			TCPPort:      7881,
			ResumeWindow: 20 * time.Second,
			PacketCache:  1024,
			AudioLastN:   3,
		},
		WebTransport: WebTransport{Enabled: true},
		TURN: TURN{
			Enabled:       true,
			Port:          3478,
			Realm:         "petrel",
			CredentialTTL: time.Hour,
			// A participant needs up to 4 (publisher and subscriber, UDP and TCP);
			// 16 leaves room for a few WHEP sessions and reconnects.
			MaxAllocationsPerUser: 16,
			// A NAT (an office, a carrier) puts many users behind one address.
			MaxAllocationsPerIP: 128,
		},
		Cluster:   defaultCluster(),
		Recording: Recording{Segment: 10 * time.Second, MaxAge: 7 * 24 * time.Hour},
		Ingest:    Ingest{MaxConns: 64},
		Webhook:   defaultWebhook(),
		HLS:       defaultHLS(),
		Egress:    defaultEgress(),
		Limits: Limits{
			MaxParticipantsPerRoom:  100,
			MaxTracksPerParticipant: 16,
			MaxMessageBytes:         64 << 10,
			MessagesPerSecond:       50,
			MaxDataBytes:            64 << 10,
			DataMessagesPerSecond:   200,
			MaxDataChannels:         16,
			JoinsPerSecond:          50,
			JoinsPerIP:              10,
			MaxConnsPerIP:           256,
			MaxRooms:                1000,
			MaxSDPBytes:             64 << 10,
			MaxSessionsPerIdentity:  10,
			MaxTokenLifetime:        24 * time.Hour,
			HTTPHeaderTimeout:       10 * time.Second,
			HTTPBodyTimeout:         10 * time.Second,
			HTTPWriteTimeout:        30 * time.Second,
			HTTPIdleTimeout:         60 * time.Second,
		},
	}
}

// Load builds the configuration from defaults, the YAML file named by --config or
// PETREL_CONFIG, the environment and the flags in args.
func Load(name string, args []string) (Config, error) {
	cfg := Default()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	file := fs.String("config", os.Getenv("PETREL_CONFIG"), "YAML configuration file")
	bindFlags(fs, reflect.ValueOf(&cfg).Elem())
	// Parse once to learn the file, then apply file, env and flags in order.
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fresh := Default()
	if *file != "" {
		b, err := os.ReadFile(*file)
		if err != nil {
			return cfg, fmt.Errorf("config file: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&fresh); err != nil && !errors.Is(err, io.EOF) {
			return cfg, fmt.Errorf("config file %s: %w", *file, err)
		}
	}
	if err := applyEnv(reflect.ValueOf(&fresh).Elem()); err != nil {
		return cfg, err
	}
	// Flags given explicitly win over file and environment.
	var ferr error
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "config" {
			return
		}
		if err := setByFlag(reflect.ValueOf(&fresh).Elem(), f.Name, f.Value.String()); err != nil {
			ferr = err
		}
	})
	if ferr != nil {
		return cfg, ferr
	}
	fresh.applyModes()
	return fresh, fresh.Validate()
}

// applyModes fills the values that depend on other values.
func (c *Config) applyModes() {
	if c.Loopback && strings.HasPrefix(c.HTTP, ":") {
		c.HTTP = "127.0.0.1" + c.HTTP
	}
	if c.TURN.RelayIP == "" {
		switch {
		case c.Loopback:
			c.TURN.RelayIP = "127.0.0.1"
		case c.RTC.NodeIP != "":
			c.TURN.RelayIP = c.RTC.NodeIP
		}
	}
}

// Validate reports settings that cannot work.
func (c *Config) Validate() error {
	if c.RTC.UDPReaders < 0 || c.RTC.UDPReaders > 64 {
		return errors.New("rtc.udp_readers must be 0 (one per two cores) to 64")
	}
	if c.RTC.UDPPort < 0 || c.RTC.UDPPort > 65535 || c.RTC.TCPPort < -1 || c.RTC.TCPPort > 65535 || c.TURN.Port < 0 || c.TURN.Port > 65535 {
		return errors.New("ports must be between 0 and 65535")
	}
	if c.GCPercent < 1 {
		return errors.New("gc_percent must be at least 1 (GOGC=off turns the collector off)")
	}
	if c.TURN.MaxAllocationsPerUser < 0 || c.TURN.MaxAllocationsPerIP < 0 {
		return errors.New("turn allocation limits must be 0 (no limit) or positive")
	}
	if c.APIKey != "" && len(c.APISecret) < 32 {
		return errors.New("api_secret must be at least 32 characters")
	}
	if c.APIKey == "" && c.APISecret != "" {
		return errors.New("api_secret given without api_key")
	}
	if c.Limits.HTTPHeaderTimeout <= 0 || c.Limits.HTTPBodyTimeout <= 0 || c.Limits.HTTPWriteTimeout <= 0 || c.Limits.HTTPIdleTimeout <= 0 {
		return errors.New("limits.http_*_timeout must be positive")
	}
	if c.Limits.JoinsPerSecond < 1 || c.Limits.JoinsPerIP < 0 || c.Limits.MaxConnsPerIP < 0 {
		return errors.New("limits.joins_per_second must be at least 1, joins_per_ip_per_second and max_conns_per_ip at least 0")
	}
	for _, p := range c.TrustedProxies {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, err := netip.ParseAddr(p); err != nil {
				return fmt.Errorf("trusted_proxies: %q is neither a CIDR nor an address", p)
			}
		}
	}
	if c.Limits.MaxMessageBytes < 1024 {
		return errors.New("limits.max_message_bytes must be at least 1024")
	}
	if c.Limits.MaxSessionsPerIdentity < 1 {
		return errors.New("limits.max_sessions_per_identity must be at least 1")
	}
	if c.Limits.MaxTokenLifetime < time.Minute {
		return errors.New("limits.max_token_lifetime must be at least 1m")
	}
	if c.Limits.MaxDataChannels < 2 {
		return errors.New("limits.max_data_channels must be at least 2 (the room's _reliable and _lossy)")
	}
	if c.Cluster.Redis != "" && (c.Cluster.Heartbeat <= 0 || c.Cluster.NodeTTL < 2*c.Cluster.Heartbeat) {
		return errors.New("cluster.node_ttl must be at least twice cluster.heartbeat")
	}
	if err := c.Cluster.TLS.validate(); err != nil {
		return err
	}
	if c.RTC.PacketCache < 64 || c.RTC.PacketCache&(c.RTC.PacketCache-1) != 0 {
		return errors.New("rtc.packet_cache must be a power of two >= 64")
	}
	if err := c.Recording.validate(); err != nil {
		return err
	}
	if err := c.Egress.validate(); err != nil {
		return err
	}
	if err := c.HLS.validate(); err != nil {
		return err
	}
	if err := c.Ingest.validate(); err != nil {
		return err
	}
	if err := c.Webhook.validate(); err != nil {
		return err
	}
	if err := validateCameras(c.Cameras); err != nil {
		return fmt.Errorf("cameras: %w", err)
	}
	return nil
}

func bindFlags(fs *flag.FlagSet, v reflect.Value) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct {
			bindFlags(fs, fv)
			continue
		}
		name := f.Tag.Get("flag")
		if name == "" {
			continue
		}
		usage := f.Tag.Get("usage")
		switch p := fv.Addr().Interface().(type) {
		case *string:
			fs.StringVar(p, name, *p, usage)
		case *int:
			fs.IntVar(p, name, *p, usage)
		case *bool:
			fs.BoolVar(p, name, *p, usage)
		case *time.Duration:
			fs.DurationVar(p, name, *p, usage)
		case *[]string:
			fs.Var((*listFlag)(p), name, usage)
		}
	}
}

func setByFlag(v reflect.Value, name, value string) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct {
			if err := setByFlag(fv, name, value); err != nil {
				return err
			}
			continue
		}
		if f.Tag.Get("flag") == name {
			return setValue(fv, value, "--"+name)
		}
	}
	return nil
}

// applyEnv maps PETREL_<FLAG NAME> (dashes as underscores, upper case) onto fields.
func applyEnv(v reflect.Value) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct {
			if err := applyEnv(fv); err != nil {
				return err
			}
			continue
		}
		name := f.Tag.Get("flag")
		if name == "" {
			continue
		}
		env := "PETREL_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if s, ok := os.LookupEnv(env); ok {
			if err := setValue(fv, s, env); err != nil {
				return err
			}
		}
	}
	return nil
}

func setValue(fv reflect.Value, s, from string) error {
	switch fv.Interface().(type) {
	case string:
		fv.SetString(s)
	case int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		fv.SetInt(int64(n))
	case bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		fv.SetBool(b)
	case time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		fv.SetInt(int64(d))
	case []string:
		fv.Set(reflect.ValueOf(splitList(s)))
	}
	return nil
}

// listFlag is a comma-separated list flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = splitList(v); return nil }

// splitList reads a comma-separated list from a flag or the environment.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// MixesAudio reports whether room's audio is mixed from the moment it opens
// (RTC.AudioMixRooms). Camera rooms never are: their audio is the camera's.
func (c RTC) MixesAudio(room string) bool {
	if strings.HasPrefix(room, "camera/") {
		return false
	}
	return matchesRoom(c.AudioMixRooms, room)
}

// matchesRoom reports whether room is one of names, each a room's name or a
// prefix ending in '*'.
func matchesRoom(names []string, room string) bool {
	for _, p := range names {
		if pre, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(room, pre) {
				return true
			}
		} else if p == room {
			return true
		}
	}
	return false
}
