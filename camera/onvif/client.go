// Package onvif is a small ONVIF PTZ client: SOAP 1.2 over HTTP with a
// WS-Security UsernameToken (password digest), the PTZ service operations a
// viewer drives (continuous, absolute and relative moves, stop, presets,
// status) and the media service's GetProfiles for the profile token they need.
//
// Everything a camera sends back is treated as hostile: bodies are size-limited,
// parsed by local name only (cameras disagree on namespace prefixes), numbers
// are checked for range and NaN, and SOAP faults become errors carrying the
// fault's code and reason.
package onvif

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"strings"
	"time"
)

// Namespaces of the services we call.
const (
	nsSOAP  = "http://www.w3.org/2003/05/soap-envelope"
	nsWSSE  = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"
	nsWSU   = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"
	nsMedia = "http://www.onvif.org/ver10/media/wsdl"
	nsPTZ   = "http://www.onvif.org/ver20/ptz/wsdl"
	nsTT    = "http://www.onvif.org/ver10/schema"

	passwordDigest = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest"
	nonceEncoding  = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary"
)

// MaxResponse bounds what we read of a camera's answer: PTZ answers are a few
// kilobytes; a camera streaming megabytes at us is broken or hostile.
const MaxResponse = 256 << 10

var (
	// ErrUnauthorized: the camera refused our credentials (HTTP 401, or a
	// NotAuthorized SOAP fault).
	ErrUnauthorized = errors.New("onvif: not authorized")
	// ErrBadResponse: the answer was not a SOAP envelope we could read.
	ErrBadResponse = errors.New("onvif: malformed response")
)

// Fault is a SOAP fault returned by the camera.
type Fault struct {
	Code    string // e.g. "env:Sender"
	Subcode string // e.g. "ter:InvalidArgVal"
	Reason  string
}

func (f *Fault) Error() string {
	s := "onvif fault " + f.Code
	if f.Subcode != "" {
		s += "/" + f.Subcode
	}
	if f.Reason != "" {
		s += ": " + f.Reason
	}
	return s
}

// Config says where the camera's services are and how to log in.
type Config struct {
	// URL is the device service (http://cam/onvif/device_service). Many cameras
	// answer every service there; MediaURL and PTZURL override it for those
	// that do not.
	URL      string
	MediaURL string
	PTZURL   string
	User     string
	Password string
	// Timeout per request (default 5 s).
	Timeout time.Duration
	// HTTP client (default: one with Timeout).
	HTTP *http.Client
	Log  *slog.Logger
}

// Client calls one camera. Safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client
	log  *slog.Logger
	// now is time.Now, replaceable by tests of the digest's freshness.
	now func() time.Time
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" && (cfg.MediaURL == "" || cfg.PTZURL == "") {
		return nil, errors.New("onvif: no service URL")
	}
	for _, u := range []string{cfg.URL, cfg.MediaURL, cfg.PTZURL} {
		if u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return nil, fmt.Errorf("onvif: service URL %q is not http(s)", u)
		}
	}
	if cfg.MediaURL == "" {
		cfg.MediaURL = cfg.URL
	}
	if cfg.PTZURL == "" {
		cfg.PTZURL = cfg.URL
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	hc := cfg.HTTP
	if hc == nil {
		// Never follow redirects: a camera redirecting SOAP elsewhere would make us
		// send the (digest) credentials to a host the operator did not name.
		hc = &http.Client{Timeout: cfg.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	lg := cfg.Log
	if lg == nil {
		lg = slog.Default()
	}
	return &Client{cfg: cfg, http: hc, log: lg.With("onvif", cfg.PTZURL), now: time.Now}, nil
}

// Vector is a PTZ position or speed in the generic spaces: pan and tilt in
// [-1, 1], zoom in [0, 1] for positions and [-1, 1] for speeds and
// translations. A nil component is left out of the request (the camera keeps
// that axis as it is).
type Vector struct {
	Pan, Tilt *float64
	Zoom      *float64
}

// PT and Z build vectors.
func PT(pan, tilt float64) Vector { return Vector{Pan: &pan, Tilt: &tilt} }
func PTZ(pan, tilt, zoom float64) Vector {
	return Vector{Pan: &pan, Tilt: &tilt, Zoom: &zoom}
}
func Z(zoom float64) Vector { return Vector{Zoom: &zoom} }

// Profile is a media profile; PTZ requests name one by its token.
type Profile struct {
	Token string
	Name  string
	// PTZ says the profile has a PTZ configuration.
	PTZ bool
}

// Preset is a stored position.
type Preset struct {
	Token string `json:"token"`
	Name  string `json:"name"`
}

// Status is where the camera points and whether it moves.
type Status struct {
	Pan, Tilt, Zoom float64
	// MoveStatus of pan/tilt and zoom: IDLE, MOVING or UNKNOWN.
	PanTiltMove, ZoomMove string
	UTCTime               string
}

// GetProfiles lists media profiles.
func (c *Client) GetProfiles(ctx context.Context) ([]Profile, error) {
	var r struct {
		Profiles []struct {
			Token string `xml:"token,attr"`
			Name  string `xml:"Name"`
			PTZ   *struct {
				Token string `xml:"token,attr"`
			} `xml:"PTZConfiguration"`
		} `xml:"Body>GetProfilesResponse>Profiles"`
	}
	if err := c.call(ctx, c.cfg.MediaURL, nsMedia+"/GetProfiles", `<trt:GetProfiles/>`, &r); err != nil {
		return nil, err
	}
	out := make([]Profile, 0, len(r.Profiles))
	for _, p := range r.Profiles {
		if err := checkToken(p.Token); err != nil {
			return nil, fmt.Errorf("%w: profile token: %v", ErrBadResponse, err)
		}
		out = append(out, Profile{Token: p.Token, Name: clip(p.Name, 64), PTZ: p.PTZ != nil})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no profiles", ErrBadResponse)
	}
	return out, nil
}

// PTZProfile returns the token of the first profile with a PTZ configuration,
// or of the first profile if none says so (some cameras leave it out).
func (c *Client) PTZProfile(ctx context.Context) (string, error) {
	ps, err := c.GetProfiles(ctx)
	if err != nil {
		return "", err
	}
	for _, p := range ps {
		if p.PTZ {
			return p.Token, nil
		}
	}
	return ps[0].Token, nil
}

// ContinuousMove starts moving at velocity v; the camera stops by itself after
// timeout (0: no timeout sent, the camera's default applies).
func (c *Client) ContinuousMove(ctx context.Context, profile string, v Vector, timeout time.Duration) error {
	if err := checkToken(profile); err != nil {
		return err
	}
	if err := v.check(-1, 1); err != nil {
		return err
	}
	body := `<tptz:ContinuousMove><tptz:ProfileToken>` + esc(profile) + `</tptz:ProfileToken>` + v.xml("Velocity")
	if timeout > 0 {
		body += `<tptz:Timeout>` + duration(timeout) + `</tptz:Timeout>`
	}
	body += `</tptz:ContinuousMove>`
	return c.call(ctx, c.cfg.PTZURL, nsPTZ+"/ContinuousMove", body, nil)
}

// Stop stops pan/tilt and zoom movement.
func (c *Client) Stop(ctx context.Context, profile string) error {
	if err := checkToken(profile); err != nil {
		return err
	}
	body := `<tptz:Stop><tptz:ProfileToken>` + esc(profile) + `</tptz:ProfileToken><tptz:PanTilt>true</tptz:PanTilt><tptz:Zoom>true</tptz:Zoom></tptz:Stop>`
	return c.call(ctx, c.cfg.PTZURL, nsPTZ+"/Stop", body, nil)
}

// AbsoluteMove moves to position p (pan/tilt in [-1,1], zoom in [0,1]).
func (c *Client) AbsoluteMove(ctx context.Context, profile string, p Vector) error {
	if err := checkToken(profile); err != nil {
		return err
	}
	if err := p.check(-1, 1); err != nil {
		return err
	}
	if p.Zoom != nil && *p.Zoom < 0 {
		return fmt.Errorf("onvif: absolute zoom %v out of [0,1]", *p.Zoom)
	}
	body := `<tptz:AbsoluteMove><tptz:ProfileToken>` + esc(profile) + `</tptz:ProfileToken>` + p.xml("Position") + `</tptz:AbsoluteMove>`
	return c.call(ctx, c.cfg.PTZURL, nsPTZ+"/AbsoluteMove", body, nil)
}

// RelativeMove moves by translation t. The generic translation space spans
// twice the position space ([-2,2]: from one end to the other).
func (c *Client) RelativeMove(ctx context.Context, profile string, t Vector) error {
	if err := checkToken(profile); err != nil {
		return err
	}
	if err := t.check(-2, 2); err != nil {
		return err
	}
	body := `<tptz:RelativeMove><tptz:ProfileToken>` + esc(profile) + `</tptz:ProfileToken>` + t.xml("Translation") + `</tptz:RelativeMove>`
	return c.call(ctx, c.cfg.PTZURL, nsPTZ+"/RelativeMove", body, nil)
}

// GetPresets lists stored presets.
func (c *Client) GetPresets(ctx context.Context, profile string) ([]Preset, error) {
	if err := checkToken(profile); err != nil {
		return nil, err
	}
	var r struct {
		Presets []struct {
			Token string `xml:"token,attr"`
			Name  string `xml:"Name"`
		} `xml:"Body>GetPresetsResponse>Preset"`
	}
	body := `<tptz:GetPresets><tptz:ProfileToken>` + esc(profile) + `</tptz:ProfileToken></tptz:GetPresets>`
	if err := c.call(ctx, c.cfg.PTZURL, nsPTZ+"/GetPresets", body, &r); err != nil {
		return nil, err
	}
	if len(r.Presets) > 1000 {
		return nil, fmt.Errorf("%w: %d presets", ErrBadResponse, len(r.Presets))
	}
	out := make([]Preset, 0, len(r.Presets))
	for _, p := range r.Presets {
		if err := checkToken(p.Token); err != nil {
			return nil, fmt.Errorf("%w: preset token: %v", ErrBadResponse, err)
		}
		out = append(out, Preset{Token: p.Token, Name: clip(p.Name, 64)})
	}
	return out, nil
}

// GotoPreset moves to a stored preset.
func (c *Client) GotoPreset(ctx context.Context, profile, preset string) error {
	if err := checkToken(profile); err != nil {
		return err
	}
	if err := checkToken(preset); err != nil {
		return err
	}
	body := `<tptz:GotoPreset><tptz:ProfileToken>` + esc(profile) + `</tptz:ProfileToken><tptz:PresetToken>` + esc(preset) + `</tptz:PresetToken></tptz:GotoPreset>`
	return c.call(ctx, c.cfg.PTZURL, nsPTZ+"/GotoPreset", body, nil)
}

// SetPreset stores the current position under name (replacing preset token if
// not empty) and returns the preset's token.
func (c *Client) SetPreset(ctx context.Context, profile, name, token string) (string, error) {
	if err := checkToken(profile); err != nil {
		return "", err
	}
	if name == "" || len(name) > 64 {
		return "", errors.New("onvif: preset name must be 1-64 bytes")
	}
	body := `<tptz:SetPreset><tptz:ProfileToken>` + esc(profile) + `</tptz:ProfileToken><tptz:PresetName>` + esc(name) + `</tptz:PresetName>`
	if token != "" {
		if err := checkToken(token); err != nil {
			return "", err
		}
		body += `<tptz:PresetToken>` + esc(token) + `</tptz:PresetToken>`
	}
	body += `</tptz:SetPreset>`
	var r struct {
		Token *string `xml:"Body>SetPresetResponse>PresetToken"`
	}
	if err := c.call(ctx, c.cfg.PTZURL, nsPTZ+"/SetPreset", body, &r); err != nil {
		return "", err
	}
	if r.Token == nil {
		return "", fmt.Errorf("%w: SetPresetResponse without PresetToken", ErrBadResponse)
	}
	if err := checkToken(*r.Token); err != nil {
		return "", fmt.Errorf("%w: preset token: %v", ErrBadResponse, err)
	}
	return *r.Token, nil
}

// GetStatus returns position and move status.
func (c *Client) GetStatus(ctx context.Context, profile string) (Status, error) {
	if err := checkToken(profile); err != nil {
		return Status{}, err
	}
	type vec struct {
		X string `xml:"x,attr"`
		Y string `xml:"y,attr"`
	}
	var r struct {
		S *struct {
			PanTilt *vec   `xml:"Position>PanTilt"`
			Zoom    *vec   `xml:"Position>Zoom"`
			PTMove  string `xml:"MoveStatus>PanTilt"`
			ZMove   string `xml:"MoveStatus>Zoom"`
			UTC     string `xml:"UtcTime"`
		} `xml:"Body>GetStatusResponse>PTZStatus"`
	}
	body := `<tptz:GetStatus><tptz:ProfileToken>` + esc(profile) + `</tptz:ProfileToken></tptz:GetStatus>`
	if err := c.call(ctx, c.cfg.PTZURL, nsPTZ+"/GetStatus", body, &r); err != nil {
		return Status{}, err
	}
	if r.S == nil {
		return Status{}, fmt.Errorf("%w: GetStatusResponse without PTZStatus", ErrBadResponse)
	}
	var st Status
	var err error
	if r.S.PanTilt != nil {
		if st.Pan, err = number(r.S.PanTilt.X, -1, 1); err != nil {
			return Status{}, err
		}
		if st.Tilt, err = number(r.S.PanTilt.Y, -1, 1); err != nil {
			return Status{}, err
		}
	}
	if r.S.Zoom != nil {
		if st.Zoom, err = number(r.S.Zoom.X, 0, 1); err != nil {
			return Status{}, err
		}
	}
	st.PanTiltMove = moveStatus(r.S.PTMove)
	st.ZoomMove = moveStatus(r.S.ZMove)
	st.UTCTime = clip(strings.TrimSpace(r.S.UTC), 40)
	return st, nil
}

// call posts one SOAP request and decodes the body into out (nil: only check
// that the answer is a non-fault envelope).
func (c *Client) call(ctx context.Context, url, action, body string, out any) error {
	env := c.envelope(body)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(env))
	if err != nil {
		return fmt.Errorf("onvif: %w", err)
	}
	req.Header.Set("Content-Type", `application/soap+xml; charset=utf-8; action="`+action+`"`)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("onvif %s: %w", shortAction(action), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse+1))
	if err != nil {
		return fmt.Errorf("onvif %s: reading response: %w", shortAction(action), err)
	}
	if len(data) > MaxResponse {
		c.log.Warn("onvif response too large", "action", shortAction(action))
		return fmt.Errorf("%w: response larger than %d bytes", ErrBadResponse, MaxResponse)
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return fmt.Errorf("%w (HTTP %d)", ErrUnauthorized, resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		mt, _, _ := mime.ParseMediaType(ct)
		// SOAP 1.2 says application/soap+xml; older firmware says text/xml or
		// application/xml. Anything else (an HTML login page) is not an answer.
		if mt != "application/soap+xml" && mt != "text/xml" && mt != "application/xml" {
			if resp.StatusCode >= 300 {
				return fmt.Errorf("onvif %s: HTTP %d (%s)", shortAction(action), resp.StatusCode, mt)
			}
			c.log.Warn("onvif response is not XML", "action", shortAction(action), "content_type", clip(ct, 80))
			return fmt.Errorf("%w: content type %q", ErrBadResponse, clip(mt, 80))
		}
	}
	var fenv struct {
		XMLName xml.Name
		Body    *struct {
			Fault *struct {
				Code    string `xml:"Code>Value"`
				Subcode string `xml:"Code>Subcode>Value"`
				Reason  string `xml:"Reason>Text"`
			} `xml:"Fault"`
		} `xml:"Body"`
	}
	if err := xml.Unmarshal(data, &fenv); err != nil {
		c.log.Warn("onvif response is not XML", "action", shortAction(action), "status", resp.StatusCode, "err", err)
		if resp.StatusCode >= 300 {
			return fmt.Errorf("onvif %s: HTTP %d", shortAction(action), resp.StatusCode)
		}
		return fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	if fenv.XMLName.Local != "Envelope" || fenv.Body == nil {
		c.log.Warn("onvif response is not a SOAP envelope", "action", shortAction(action), "root", clip(fenv.XMLName.Local, 40))
		return fmt.Errorf("%w: root element %q is not a SOAP Envelope with a Body", ErrBadResponse, clip(fenv.XMLName.Local, 40))
	}
	if f := fenv.Body.Fault; f != nil {
		flt := &Fault{Code: clip(strings.TrimSpace(f.Code), 80), Subcode: clip(strings.TrimSpace(f.Subcode), 80), Reason: clip(strings.TrimSpace(f.Reason), 200)}
		if strings.HasSuffix(flt.Subcode, "NotAuthorized") || strings.HasSuffix(flt.Subcode, "FailedAuthentication") {
			return fmt.Errorf("%w: %v", ErrUnauthorized, flt)
		}
		return flt
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("onvif %s: HTTP %d", shortAction(action), resp.StatusCode)
	}
	if out != nil {
		if err := xml.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
	}
	return nil
}

// envelope wraps body with the SOAP 1.2 envelope and a fresh UsernameToken.
func (c *Client) envelope(body string) []byte {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><env:Envelope xmlns:env="` + nsSOAP + `" xmlns:trt="` + nsMedia + `" xmlns:tptz="` + nsPTZ + `" xmlns:tt="` + nsTT + `">`)
	if c.cfg.User != "" {
		nonce := make([]byte, 16)
		_, _ = rand.Read(nonce)
		created := c.now().UTC().Format("2006-01-02T15:04:05.000Z")
		b.WriteString(`<env:Header><wsse:Security env:mustUnderstand="true" xmlns:wsse="` + nsWSSE + `" xmlns:wsu="` + nsWSU + `"><wsse:UsernameToken><wsse:Username>`)
		b.WriteString(esc(c.cfg.User))
		b.WriteString(`</wsse:Username><wsse:Password Type="` + passwordDigest + `">`)
		b.WriteString(Digest(nonce, created, c.cfg.Password))
		b.WriteString(`</wsse:Password><wsse:Nonce EncodingType="` + nonceEncoding + `">`)
		b.WriteString(base64.StdEncoding.EncodeToString(nonce))
		b.WriteString(`</wsse:Nonce><wsu:Created>` + created + `</wsu:Created></wsse:UsernameToken></wsse:Security></env:Header>`)
	}
	b.WriteString(`<env:Body>` + body + `</env:Body></env:Envelope>`)
	return []byte(b.String())
}

// Digest is the WS-Security password digest: Base64(SHA-1(nonce + created + password)).
func Digest(nonce []byte, created, password string) string {
	h := sha1.New()
	h.Write(nonce)
	h.Write([]byte(created))
	h.Write([]byte(password))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

func (v Vector) check(lo, hi float64) error {
	if v.Pan == nil && v.Tilt == nil && v.Zoom == nil {
		return errors.New("onvif: empty vector")
	}
	if (v.Pan == nil) != (v.Tilt == nil) {
		return errors.New("onvif: pan and tilt go together")
	}
	for name, p := range map[string]*float64{"pan": v.Pan, "tilt": v.Tilt, "zoom": v.Zoom} {
		if p != nil && (math.IsNaN(*p) || *p < lo || *p > hi) {
			return fmt.Errorf("onvif: %s %v out of [%v,%v]", name, *p, lo, hi)
		}
	}
	return nil
}

func (v Vector) xml(elem string) string {
	s := `<tptz:` + elem + `>`
	if v.Pan != nil {
		s += fmt.Sprintf(`<tt:PanTilt x="%s" y="%s"/>`, num(*v.Pan), num(*v.Tilt))
	}
	if v.Zoom != nil {
		s += fmt.Sprintf(`<tt:Zoom x="%s"/>`, num(*v.Zoom))
	}
	return s + `</tptz:` + elem + `>`
}

func num(f float64) string { return fmt.Sprintf("%.6g", f) }

// duration formats d as an xs:duration (PT1.5S).
func duration(d time.Duration) string {
	return fmt.Sprintf("PT%sS", num(d.Seconds()))
}

// number parses a camera-supplied coordinate. Values slightly outside the
// range are clamped (rounding on the camera), far outside are an error.
func number(s string, lo, hi float64) (float64, error) {
	var f float64
	if _, err := fmt.Sscan(strings.TrimSpace(s), &f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%w: coordinate %q", ErrBadResponse, clip(s, 32))
	}
	if f < lo-0.01 || f > hi+0.01 {
		return 0, fmt.Errorf("%w: coordinate %v out of [%v,%v]", ErrBadResponse, f, lo, hi)
	}
	return math.Max(lo, math.Min(hi, f)), nil
}

func moveStatus(s string) string {
	switch s = strings.TrimSpace(s); s {
	case "IDLE", "MOVING":
		return s
	default:
		return "UNKNOWN"
	}
}

// checkToken accepts ONVIF ReferenceTokens (xs:string, at most 64 chars) that
// are printable: they go back into XML and into JSON for viewers.
func checkToken(t string) error {
	if t == "" || len(t) > 64 {
		return fmt.Errorf("onvif: token must be 1-64 bytes")
	}
	for _, r := range t {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("onvif: token has control characters")
		}
	}
	return nil
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func shortAction(a string) string {
	if i := strings.LastIndexByte(a, '/'); i >= 0 {
		return a[i+1:]
	}
	return a
}
