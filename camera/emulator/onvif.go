package emulator

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ONVIF is the emulator's ONVIF endpoint: a real SOAP 1.2 server for the media
// service's GetProfiles and the PTZ service (ContinuousMove, Stop, AbsoluteMove,
// RelativeMove, GetPresets, GotoPreset, SetPreset, GetStatus). It checks the
// WS-Security UsernameToken digest (freshness and nonce replay included), keeps
// a PTZ position that continuous moves integrate over time, stores presets, and
// records every command it accepted so tests assert on what the camera got.
type ONVIF struct {
	User, Password string
	Log            *slog.Logger

	mu       sync.Mutex
	pos      [3]float64 // pan, tilt, zoom
	vel      [3]float64
	moveAt   time.Time // when vel last took effect
	moveEnd  time.Time // continuous move timeout (zero: none)
	presets  []emuPreset
	nextTok  int
	nonces   map[string]time.Time
	commands []Command
	waiters  []chan struct{}
	web      []WebRequest
	srv      *http.Server
	ln       net.Listener
}

type emuPreset struct {
	token, name string
	pos         [3]float64
}

// Command is one accepted PTZ request.
type Command struct {
	Op      string `json:"op"` // ContinuousMove, Stop, AbsoluteMove, RelativeMove, GotoPreset, SetPreset, GetPresets, GetStatus, GetProfiles
	Profile string `json:"profile"`
	// Pan, Tilt, Zoom of the velocity/position/translation; nil when absent.
	Pan     *float64  `json:"pan,omitempty"`
	Tilt    *float64  `json:"tilt,omitempty"`
	Zoom    *float64  `json:"zoom,omitempty"`
	Preset  string    `json:"preset,omitempty"` // token (GotoPreset, SetPreset)
	Name    string    `json:"name,omitempty"`
	Timeout string    `json:"timeout,omitempty"`
	At      time.Time `json:"at"`
}

// Profiles the emulator has: the first without PTZ (a client must pick the
// second, not just the first profile).
const (
	ProfileNoPTZ = "profile_sub"
	ProfilePTZ   = "profile_main"
)

// panSpeed is how far (generic units per second) velocity 1 moves.
const panSpeed = 1.0

// NewONVIF returns an endpoint with credentials user/password (empty user:
// no authentication) and two presets.
func NewONVIF(user, password string) *ONVIF {
	return &ONVIF{User: user, Password: password, Log: slog.Default(),
		nonces:  map[string]time.Time{},
		presets: []emuPreset{{token: "1", name: "Home"}, {token: "2", name: "Gate", pos: [3]float64{0.5, -0.25, 0.3}}},
		nextTok: 3}
}

// Start serves on addr (e.g. 127.0.0.1:0) and returns the device service URL.
func (o *ONVIF) Start(addr string) (string, error) { return o.StartWith(addr, nil) }

// StartWith is Start with more routes added by extra.
func (o *ONVIF) StartWith(addr string, extra func(*http.ServeMux)) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.Handle("/onvif/", o)
	mux.HandleFunc("/axis-cgi/", o.serveWeb)
	// What the camera received, for tests driving it from another process.
	mux.HandleFunc("GET /emulator/commands", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(o.Commands())
	})
	if extra != nil {
		extra(mux)
	}
	o.ln = ln
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = o.srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/onvif/device_service", nil
}

// Close stops the server.
func (o *ONVIF) Close() error {
	if o.srv == nil {
		return nil
	}
	return o.srv.Close()
}

// Commands returns the accepted commands so far.
func (o *ONVIF) Commands() []Command {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Command(nil), o.commands...)
}

// WaitCommand returns the first accepted command with op, waiting up to timeout.
func (o *ONVIF) WaitCommand(op string, timeout time.Duration) (Command, bool) {
	deadline := time.Now().Add(timeout)
	for {
		o.mu.Lock()
		for _, c := range o.commands {
			if c.Op == op {
				o.mu.Unlock()
				return c, true
			}
		}
		ch := make(chan struct{})
		o.waiters = append(o.waiters, ch)
		o.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return Command{}, false
		}
		select {
		case <-ch:
		case <-time.After(left):
		}
	}
}

// Position is the current pan, tilt, zoom.
func (o *ONVIF) Position() (pan, tilt, zoom float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.advance(time.Now())
	return o.pos[0], o.pos[1], o.pos[2]
}

type soapVec struct {
	PanTilt *struct {
		X string `xml:"x,attr"`
		Y string `xml:"y,attr"`
	} `xml:"PanTilt"`
	Zoom *struct {
		X string `xml:"x,attr"`
	} `xml:"Zoom"`
}

type soapOp struct {
	XMLName      xml.Name
	ProfileToken string   `xml:"ProfileToken"`
	PresetToken  *string  `xml:"PresetToken"`
	PresetName   *string  `xml:"PresetName"`
	Velocity     *soapVec `xml:"Velocity"`
	Position     *soapVec `xml:"Position"`
	Translation  *soapVec `xml:"Translation"`
	Timeout      string   `xml:"Timeout"`
}

type soapEnvelope struct {
	XMLName xml.Name
	Header  struct {
		Token *struct {
			Username string `xml:"Username"`
			Password struct {
				Type  string `xml:"Type,attr"`
				Value string `xml:",chardata"`
			} `xml:"Password"`
			Nonce   string `xml:"Nonce"`
			Created string `xml:"Created"`
		} `xml:"Security>UsernameToken"`
	} `xml:"Header"`
	Body *struct {
		Ops []soapOp `xml:",any"`
	} `xml:"Body"`
}

func (o *ONVIF) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "SOAP endpoint: POST only", http.StatusMethodNotAllowed)
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, 64<<10+1))
	if err != nil || len(data) > 64<<10 {
		o.fault(w, http.StatusBadRequest, "env:Sender", "ter:InvalidArgs", "request too large or unreadable")
		return
	}
	var env soapEnvelope
	if err := xml.Unmarshal(data, &env); err != nil || env.XMLName.Local != "Envelope" || env.XMLName.Space != "http://www.w3.org/2003/05/soap-envelope" || env.Body == nil || len(env.Body.Ops) != 1 {
		o.Log.Warn("emulator onvif: malformed SOAP request", "err", err)
		o.fault(w, http.StatusBadRequest, "env:Sender", "ter:WellFormed", "not a SOAP 1.2 envelope with one operation")
		return
	}
	if why := o.authenticate(&env); why != "" {
		o.Log.Warn("emulator onvif: authentication failed", "why", why)
		o.fault(w, http.StatusBadRequest, "env:Sender", "ter:NotAuthorized", "Sender not authorized: "+why)
		return
	}
	op := env.Body.Ops[0]
	resp, code, sub, reason := o.do(&op)
	if code != "" {
		o.fault(w, http.StatusBadRequest, code, sub, reason)
		return
	}
	w.Header().Set("Content-Type", "application/soap+xml; charset=utf-8")
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><SOAP-ENV:Envelope xmlns:SOAP-ENV="http://www.w3.org/2003/05/soap-envelope" xmlns:tt="http://www.onvif.org/ver10/schema" xmlns:trt="http://www.onvif.org/ver10/media/wsdl" xmlns:tptz="http://www.onvif.org/ver20/ptz/wsdl"><SOAP-ENV:Body>%s</SOAP-ENV:Body></SOAP-ENV:Envelope>`, resp)
}

// authenticate checks the UsernameToken digest; "" means accepted.
func (o *ONVIF) authenticate(env *soapEnvelope) string {
	if o.User == "" {
		return ""
	}
	t := env.Header.Token
	if t == nil {
		return "no UsernameToken"
	}
	if t.Username != o.User {
		return "unknown user"
	}
	if !strings.HasSuffix(t.Password.Type, "#PasswordDigest") {
		return "password must be a digest"
	}
	created, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(t.Created))
	if err != nil {
		return "bad Created"
	}
	if d := time.Since(created); d > 5*time.Minute || d < -5*time.Minute {
		return "Created outside the 5 minute window"
	}
	nonce, err := base64.StdEncoding.DecodeString(strings.TrimSpace(t.Nonce))
	if err != nil || len(nonce) == 0 || len(nonce) > 64 {
		return "bad Nonce"
	}
	h := sha1.New()
	h.Write(nonce)
	h.Write([]byte(strings.TrimSpace(t.Created)))
	h.Write([]byte(o.Password))
	want := base64.StdEncoding.EncodeToString(h.Sum(nil))
	if subtle.ConstantTimeCompare([]byte(want), []byte(strings.TrimSpace(t.Password.Value))) != 1 {
		return "wrong digest"
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	key := string(nonce)
	if _, seen := o.nonces[key]; seen {
		return "nonce replayed"
	}
	if len(o.nonces) > 4096 {
		// Nonces older than the freshness window cannot be replayed anyway.
		for k, at := range o.nonces {
			if time.Since(at) > 5*time.Minute {
				delete(o.nonces, k)
			}
		}
	}
	o.nonces[key] = time.Now()
	return ""
}

func (o *ONVIF) fault(w http.ResponseWriter, status int, code, sub, reason string) {
	w.Header().Set("Content-Type", "application/soap+xml; charset=utf-8")
	w.WriteHeader(status)
	var rb bytes.Buffer
	_ = xml.EscapeText(&rb, []byte(reason))
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><SOAP-ENV:Envelope xmlns:SOAP-ENV="http://www.w3.org/2003/05/soap-envelope" xmlns:ter="http://www.onvif.org/ver10/error"><SOAP-ENV:Body><SOAP-ENV:Fault><SOAP-ENV:Code><SOAP-ENV:Value>%s</SOAP-ENV:Value><SOAP-ENV:Subcode><SOAP-ENV:Value>%s</SOAP-ENV:Value></SOAP-ENV:Subcode></SOAP-ENV:Code><SOAP-ENV:Reason><SOAP-ENV:Text xml:lang="en">%s</SOAP-ENV:Text></SOAP-ENV:Reason></SOAP-ENV:Fault></SOAP-ENV:Body></SOAP-ENV:Envelope>`, code, sub, rb.String())
}

// do executes op; a non-empty code is a fault.
func (o *ONVIF) do(op *soapOp) (resp, code, sub, reason string) {
	name := op.XMLName.Local
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	o.advance(now)
	cmd := Command{Op: name, Profile: op.ProfileToken, Timeout: op.Timeout, At: now}
	if name != "GetProfiles" {
		switch op.ProfileToken {
		case ProfilePTZ:
		case ProfileNoPTZ:
			return "", "env:Sender", "ter:NoPTZProfile", "the profile has no PTZ configuration"
		default:
			return "", "env:Sender", "ter:NoProfile", "no such profile"
		}
	}
	vec := func(v *soapVec, lo, hi float64) ([3]*float64, string) {
		var out [3]*float64
		if v == nil {
			return out, "missing vector"
		}
		parse := func(s string, lo, hi float64) (*float64, string) {
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || math.IsNaN(f) || f < lo || f > hi {
				return nil, fmt.Sprintf("value %q out of [%v,%v]", s, lo, hi)
			}
			return &f, ""
		}
		var bad string
		if v.PanTilt != nil {
			if out[0], bad = parse(v.PanTilt.X, lo, hi); bad != "" {
				return out, bad
			}
			if out[1], bad = parse(v.PanTilt.Y, lo, hi); bad != "" {
				return out, bad
			}
		}
		if v.Zoom != nil {
			zlo := lo
			if lo == -1 && name == "AbsoluteMove" {
				zlo = 0
			}
			if out[2], bad = parse(v.Zoom.X, zlo, hi); bad != "" {
				return out, bad
			}
		}
		if out[0] == nil && out[2] == nil {
			return out, "empty vector"
		}
		return out, ""
	}
	set := func(v [3]*float64) { cmd.Pan, cmd.Tilt, cmd.Zoom = v[0], v[1], v[2] }

	switch name {
	case "GetProfiles":
		resp = `<trt:GetProfilesResponse><trt:Profiles token="` + ProfileNoPTZ + `" fixed="true"><tt:Name>sub</tt:Name></trt:Profiles><trt:Profiles token="` + ProfilePTZ + `" fixed="true"><tt:Name>main</tt:Name><tt:PTZConfiguration token="ptz0"><tt:Name>ptz</tt:Name></tt:PTZConfiguration></trt:Profiles></trt:GetProfilesResponse>`
	case "ContinuousMove":
		v, bad := vec(op.Velocity, -1, 1)
		if bad != "" {
			return "", "env:Sender", "ter:InvalidArgVal", "Velocity: " + bad
		}
		set(v)
		for i, p := range v {
			if p != nil {
				o.vel[i] = *p
			}
		}
		o.moveAt, o.moveEnd = now, time.Time{}
		if op.Timeout != "" {
			d, ok := parseXSDuration(op.Timeout)
			if !ok {
				return "", "env:Sender", "ter:InvalidArgVal", "Timeout is not an xs:duration"
			}
			o.moveEnd = now.Add(d)
		}
		resp = `<tptz:ContinuousMoveResponse/>`
	case "Stop":
		o.vel = [3]float64{}
		resp = `<tptz:StopResponse/>`
	case "AbsoluteMove":
		v, bad := vec(op.Position, -1, 1)
		if bad != "" {
			return "", "env:Sender", "ter:InvalidArgVal", "Position: " + bad
		}
		set(v)
		o.vel = [3]float64{}
		for i, p := range v {
			if p != nil {
				o.pos[i] = *p
			}
		}
		resp = `<tptz:AbsoluteMoveResponse/>`
	case "RelativeMove":
		v, bad := vec(op.Translation, -2, 2)
		if bad != "" {
			return "", "env:Sender", "ter:InvalidArgVal", "Translation: " + bad
		}
		set(v)
		o.vel = [3]float64{}
		for i, p := range v {
			if p != nil {
				o.pos[i] = clampAxis(i, o.pos[i]+*p)
			}
		}
		resp = `<tptz:RelativeMoveResponse/>`
	case "GetPresets":
		var b strings.Builder
		b.WriteString(`<tptz:GetPresetsResponse>`)
		for _, p := range o.presets {
			var nb bytes.Buffer
			_ = xml.EscapeText(&nb, []byte(p.name))
			fmt.Fprintf(&b, `<tptz:Preset token="%s"><tt:Name>%s</tt:Name><tt:PTZPosition><tt:PanTilt x="%g" y="%g"/><tt:Zoom x="%g"/></tt:PTZPosition></tptz:Preset>`, p.token, nb.String(), p.pos[0], p.pos[1], p.pos[2])
		}
		b.WriteString(`</tptz:GetPresetsResponse>`)
		resp = b.String()
	case "GotoPreset":
		if op.PresetToken == nil {
			return "", "env:Sender", "ter:InvalidArgVal", "PresetToken missing"
		}
		cmd.Preset = *op.PresetToken
		found := false
		for _, p := range o.presets {
			if p.token == *op.PresetToken {
				o.pos, o.vel, found = p.pos, [3]float64{}, true
			}
		}
		if !found {
			return "", "env:Sender", "ter:NoToken", "no such preset"
		}
		resp = `<tptz:GotoPresetResponse/>`
	case "SetPreset":
		if op.PresetName == nil || *op.PresetName == "" || len(*op.PresetName) > 64 {
			return "", "env:Sender", "ter:InvalidPresetName", "PresetName must be 1-64 bytes"
		}
		cmd.Name = *op.PresetName
		tok := ""
		if op.PresetToken != nil {
			tok = *op.PresetToken
			idx := -1
			for i, p := range o.presets {
				if p.token == tok {
					idx = i
				}
			}
			if idx < 0 {
				return "", "env:Sender", "ter:NoToken", "no such preset"
			}
			o.presets[idx] = emuPreset{token: tok, name: *op.PresetName, pos: o.pos}
		} else {
			if len(o.presets) >= 100 {
				return "", "env:Receiver", "ter:TooManyPresets", "preset list is full"
			}
			tok = strconv.Itoa(o.nextTok)
			o.nextTok++
			o.presets = append(o.presets, emuPreset{token: tok, name: *op.PresetName, pos: o.pos})
		}
		cmd.Preset = tok
		resp = `<tptz:SetPresetResponse><tptz:PresetToken>` + tok + `</tptz:PresetToken></tptz:SetPresetResponse>`
	case "GetStatus":
		st := func(v float64) string {
			if v != 0 {
				return "MOVING"
			}
			return "IDLE"
		}
		pt := st(math.Abs(o.vel[0]) + math.Abs(o.vel[1]))
		resp = fmt.Sprintf(`<tptz:GetStatusResponse><tptz:PTZStatus><tt:Position><tt:PanTilt x="%g" y="%g" space="http://www.onvif.org/ver10/tptz/PanTiltSpaces/PositionGenericSpace"/><tt:Zoom x="%g"/></tt:Position><tt:MoveStatus><tt:PanTilt>%s</tt:PanTilt><tt:Zoom>%s</tt:Zoom></tt:MoveStatus><tt:UtcTime>%s</tt:UtcTime></tptz:PTZStatus></tptz:GetStatusResponse>`,
			o.pos[0], o.pos[1], o.pos[2], pt, st(o.vel[2]), now.UTC().Format(time.RFC3339))
	default:
		return "", "env:Receiver", "ter:ActionNotSupported", "operation " + name + " not supported"
	}
	o.commands = append(o.commands, cmd)
	for _, ch := range o.waiters {
		close(ch)
	}
	o.waiters = nil
	return resp, "", "", ""
}

// advance integrates the continuous move up to now (or its timeout).
func (o *ONVIF) advance(now time.Time) {
	if o.vel == [3]float64{} {
		return
	}
	end := now
	if !o.moveEnd.IsZero() && o.moveEnd.Before(end) {
		end = o.moveEnd
	}
	dt := end.Sub(o.moveAt).Seconds()
	if dt > 0 {
		for i := range o.pos {
			o.pos[i] = clampAxis(i, o.pos[i]+o.vel[i]*panSpeed*dt)
		}
	}
	o.moveAt = end
	if !o.moveEnd.IsZero() && !now.Before(o.moveEnd) {
		o.vel = [3]float64{}
	}
}

func clampAxis(i int, v float64) float64 {
	lo := -1.0
	if i == 2 {
		lo = 0
	}
	return math.Max(lo, math.Min(1, v))
}

// parseXSDuration reads the PTnS / PTnMnS forms cameras get.
func parseXSDuration(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "PT") || len(s) > 32 {
		return 0, false
	}
	d, err := time.ParseDuration(strings.ToLower(s[2:]))
	if err != nil || d < 0 || d > time.Hour {
		return 0, false
	}
	return d, true
}

// The emulator's web interface (the part of a camera's web server the HTTP
// tunnel reaches), behind HTTP Digest authentication with the same
// credentials, like an Axis camera's /axis-cgi:
//
//	GET  /axis-cgi/param.cgi?action=list   parameters as text
//	GET  /axis-cgi/blob.cgi?size=N         N bytes of a known pattern (BlobByte)
//	POST /axis-cgi/echo.cgi                the request body back
//	GET  /axis-cgi/slow.cgi                answers after 3 s
//	POST /axis-cgi/admin/restart.cgi       "restarting" (tests assert it is never reached)

// WebRequest is a request the web interface authenticated and served.
type WebRequest struct {
	Method, Path, Query string
	Body                []byte
	Header              http.Header
}

// WebRequests returns the requests served so far.
func (o *ONVIF) WebRequests() []WebRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]WebRequest(nil), o.web...)
}

// BlobByte is byte i of blob.cgi's answer.
func BlobByte(i int) byte { return byte(i*7 + i/251) }

const webRealm = "Petrel emulator"

func (o *ONVIF) serveWeb(w http.ResponseWriter, r *http.Request) {
	if o.User != "" && !o.webAuth(r) {
		nonce := make([]byte, 12)
		for i := range nonce {
			nonce[i] = byte(time.Now().UnixNano() >> (i * 3))
		}
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Digest realm=%q, nonce="%x", qop="auth", algorithm=MD5`, webRealm, nonce))
		http.Error(w, "authorization required", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.web = append(o.web, WebRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body, Header: r.Header.Clone()})
	o.mu.Unlock()
	switch r.URL.Path {
	case "/axis-cgi/param.cgi":
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Set-Cookie", "session=secret") // must not reach viewers
		fmt.Fprintf(w, "root.Brand.Brand=Petrel\nroot.Brand.ProdShortName=Camera emulator\nroot.Properties.PTZ.PTZ=yes\n")
	case "/axis-cgi/blob.cgi":
		n, err := strconv.Atoi(r.URL.Query().Get("size"))
		if err != nil || n < 0 || n > 16<<20 {
			http.Error(w, "size", http.StatusBadRequest)
			return
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = BlobByte(i)
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
	case "/axis-cgi/echo.cgi":
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		_, _ = w.Write(body)
	case "/axis-cgi/slow.cgi":
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
			return
		}
		fmt.Fprintln(w, "slow")
	case "/axis-cgi/admin/restart.cgi":
		fmt.Fprintln(w, "restarting")
	default:
		http.NotFound(w, r)
	}
}

// webAuth checks an RFC 7616 Digest (MD5, qop=auth) Authorization header.
// Nonces are not tracked: the emulator checks that the client computes the
// response right, not replay protection.
func (o *ONVIF) webAuth(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	if !strings.HasPrefix(h, "Digest ") {
		return false
	}
	p := map[string]string{}
	for _, part := range strings.Split(h[len("Digest "):], ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok {
			p[k] = strings.Trim(v, `"`)
		}
	}
	if p["username"] != o.User || p["realm"] != webRealm || p["uri"] != r.URL.RequestURI() {
		return false
	}
	ha1 := md5hex(o.User + ":" + webRealm + ":" + o.Password)
	ha2 := md5hex(r.Method + ":" + p["uri"])
	want := md5hex(ha1 + ":" + p["nonce"] + ":" + p["nc"] + ":" + p["cnonce"] + ":" + p["qop"] + ":" + ha2)
	return p["qop"] == "auth" && subtle.ConstantTimeCompare([]byte(want), []byte(p["response"])) == 1
}

func md5hex(s string) string {
	h := md5.Sum([]byte(s))
	return fmt.Sprintf("%x", h)
}
