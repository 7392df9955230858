package camera

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"
)

// Topic http: a viewer reaches the camera's web interface (configuration
// pages, CGI) through the data channel, without a route to the camera:
//
//	{"id":1,"method":"GET","path":"/axis-cgi/param.cgi?action=list","headers":{},"body":"<base64>"}
//	→ {"id":1,"status":200,"headers":{"Content-Type":"text/plain"},"body":"<base64>"}
//
// Only GET and POST, only paths on the camera's allow-list, bodies and answers
// size-limited, a timeout, credentials added server-side (the viewer never sees
// them), and a fixed set of headers each way (no cookies, no Authorization). An
// answer larger than one data message goes as chunks: the first carries status
// and headers, each has "chunk" (0-based) and "chunks" (the count), the viewer
// concatenates the decoded bodies.

const (
	tunnelMaxRequest  = 64 << 10 // decoded request body
	tunnelMaxResponse = 2 << 20
	tunnelTimeout     = 10 * time.Second
	// tunnelChunk is the raw bytes per data message: base64 makes it 16 KiB,
	// well under the room's data message limit and SCTP's comfortable size.
	tunnelChunk    = 12 << 10
	tunnelParallel = 4 // requests in flight per camera
	tunnelRate     = 5 // requests per second per viewer (burst 10)
	tunnelBurst    = 10
	// tunnelPace spaces chunks so that a large answer does not exhaust the
	// camera participant's data message budget (shared by all its viewers).
	tunnelPace = 10 * time.Millisecond
)

// Headers a viewer may set, and headers of the answer it may see.
var (
	tunnelReqHeaders  = []string{"Accept", "Accept-Language", "Content-Type", "Range", "If-None-Match", "If-Modified-Since"}
	tunnelRespHeaders = []string{"Content-Type", "Content-Length", "Content-Range", "Content-Disposition", "Last-Modified", "Etag", "Cache-Control", "Location"}
)

// TunnelRequest is a message on topic http.
type TunnelRequest struct {
	ID      json.RawMessage   `json:"id"`
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"` // base64
}

// TunnelResponse is (one chunk of) the answer.
type TunnelResponse struct {
	ID      json.RawMessage   `json:"id"`
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body"`
	Chunk   *int              `json:"chunk,omitempty"`
	Chunks  int               `json:"chunks,omitempty"`
	Error   string            `json:"error,omitempty"`
}

// tunnel forwards one camera's requests.
type tunnel struct {
	base      *url.URL
	allow     []string
	user      string
	pass      string
	client    *http.Client
	timeout   time.Duration
	maxResp   int
	reply     func(to string, payload []byte)
	log       *slog.Logger
	sem       chan struct{}
	mu        sync.Mutex
	buckets   map[string]*bucket
	challenge string // the last WWW-Authenticate: later requests answer it at once
}

func newTunnel(base, user, pass string, allow []string, reply func(string, []byte), log *slog.Logger) (*tunnel, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("camera http base %q is not an http(s) URL", base)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return &tunnel{base: u, allow: allow, user: user, pass: pass, timeout: tunnelTimeout, maxResp: tunnelMaxResponse,
		// Never follow redirects: the answer goes back to the viewer as it is, and
		// a redirect must not lead the server (with the credentials) elsewhere.
		client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		reply:  reply, log: log, sem: make(chan struct{}, tunnelParallel), buckets: map[string]*bucket{}}, nil
}

// checkPath validates a viewer's path and returns it split into path and query.
// It refuses anything that could reach outside the allow-list once the camera
// decodes it: dot segments, percent-encoding in the path, backslashes,
// absolute URLs, control characters.
func checkPath(p string, allow []string) (string, string, error) {
	if len(p) > 2048 {
		return "", "", errors.New("path too long")
	}
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return "", "", fmt.Errorf("path %q must start with a single /", clipText(p, 80))
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r <= 0x20 || r == 0x7f || r == '\\' || r == '#' }) {
		return "", "", errors.New("path has spaces, control characters, backslashes or a fragment")
	}
	pth, query, _ := strings.Cut(p, "?")
	if strings.Contains(pth, "%") {
		return "", "", errors.New("percent-encoding is not allowed in the path")
	}
	if c := path.Clean(pth); c != pth && c+"/" != pth {
		return "", "", fmt.Errorf("path %q is not clean (dot segments or double slashes)", clipText(pth, 80))
	}
	if _, err := url.ParseQuery(query); err != nil {
		return "", "", fmt.Errorf("malformed query: %v", err)
	}
	for _, a := range allow {
		switch {
		case strings.ContainsAny(a, "*?["):
			if ok, _ := path.Match(a, pth); ok {
				return pth, query, nil
			}
		case strings.HasSuffix(a, "/"):
			if strings.HasPrefix(pth, a) {
				return pth, query, nil
			}
		case a == pth:
			return pth, query, nil
		}
	}
	return "", "", errPathNotAllowed
}

var errPathNotAllowed = errors.New("path not allowed")

// handle runs one request; it is called on its own goroutine.
func (t *tunnel) handle(ctx context.Context, from string, req *TunnelRequest) {
	id := rawID(req.ID)
	fail := func(status int, text string) {
		b, _ := json.Marshal(TunnelResponse{ID: id, Status: status, Error: text})
		t.reply(from, b)
	}
	method := strings.ToUpper(req.Method)
	if method != http.MethodGet && method != http.MethodPost {
		t.log.Info("http tunnel: method refused", "from", from, "method", clipText(req.Method, 16))
		fail(405, "only GET and POST")
		return
	}
	pth, query, err := checkPath(req.Path, t.allow)
	if err != nil {
		t.log.Warn("http tunnel: path refused", "from", from, "path", clipText(req.Path, 200), "err", err)
		fail(403, err.Error())
		return
	}
	body, err := base64.StdEncoding.DecodeString(req.Body)
	if err != nil {
		fail(400, "body is not base64")
		return
	}
	if len(body) > tunnelMaxRequest {
		fail(413, fmt.Sprintf("body larger than %d bytes", tunnelMaxRequest))
		return
	}
	if method == http.MethodGet && len(body) > 0 {
		fail(400, "GET with a body")
		return
	}
	target := *t.base
	target.Path = t.base.Path + pth
	target.RawQuery = query
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	resp, data, err := t.do(ctx, method, target.String(), req.Headers, body)
	if err != nil {
		t.log.Info("http tunnel: request failed", "from", from, "path", pth, "err", err)
		if errors.Is(err, context.DeadlineExceeded) {
			fail(504, "camera did not answer in time")
		} else {
			fail(502, err.Error())
		}
		return
	}
	hdr := map[string]string{}
	for _, k := range tunnelRespHeaders {
		if v := resp.Header.Get(k); v != "" {
			hdr[k] = clipText(v, 1024)
		}
	}
	t.log.Debug("http tunnel", "from", from, "method", method, "path", pth, "status", resp.StatusCode, "bytes", len(data))
	n := (len(data) + tunnelChunk - 1) / tunnelChunk
	if n <= 1 {
		b, _ := json.Marshal(TunnelResponse{ID: id, Status: resp.StatusCode, Headers: hdr, Body: base64.StdEncoding.EncodeToString(data)})
		t.reply(from, b)
		return
	}
	for i := 0; i < n; i++ {
		part := data[i*tunnelChunk : min(len(data), (i+1)*tunnelChunk)]
		r := TunnelResponse{ID: id, Body: base64.StdEncoding.EncodeToString(part), Chunk: &i, Chunks: n}
		if i == 0 {
			r.Status, r.Headers = resp.StatusCode, hdr
		}
		b, _ := json.Marshal(r)
		t.reply(from, b)
		if i+1 < n {
			select {
			case <-ctx.Done():
				return
			case <-time.After(tunnelPace):
			}
		}
	}
}

// do sends the request, answering an authentication challenge once.
func (t *tunnel) do(ctx context.Context, method, target string, headers map[string]string, body []byte) (*http.Response, []byte, error) {
	t.mu.Lock()
	challenge := t.challenge
	t.mu.Unlock()
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		for _, k := range tunnelReqHeaders {
			for hk, v := range headers {
				if strings.EqualFold(hk, k) && len(v) <= 1024 && !strings.ContainsAny(v, "\r\n") {
					req.Header.Set(k, v)
				}
			}
		}
		if challenge != "" && t.user != "" {
			if a := authorization(challenge, t.user, t.pass, method, req.URL.RequestURI()); a != "" {
				req.Header.Set("Authorization", a)
			}
		}
		resp, err := t.client.Do(req)
		if err != nil {
			return nil, nil, err
		}
		if resp.StatusCode == http.StatusUnauthorized && attempt == 0 && t.user != "" {
			if c := resp.Header.Get("WWW-Authenticate"); c != "" {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
				resp.Body.Close()
				challenge = c
				t.mu.Lock()
				t.challenge = c
				t.mu.Unlock()
				continue
			}
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, int64(t.maxResp)+1))
		resp.Body.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("reading the answer: %w", err)
		}
		if len(data) > t.maxResp {
			return nil, nil, fmt.Errorf("answer larger than %d bytes", t.maxResp)
		}
		return resp, data, nil
	}
}

// authorization answers a WWW-Authenticate challenge: Digest (RFC 7616, MD5 or
// SHA-256, qop auth or none) or Basic. "" for a scheme we do not speak.
func authorization(challenge, user, pass, method, uri string) string {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(challenge), " ")
	switch strings.ToLower(scheme) {
	case "basic":
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	case "digest":
	default:
		return ""
	}
	p := parseAuthParams(rest)
	var h func() hash.Hash
	switch strings.ToUpper(p["algorithm"]) {
	case "", "MD5":
		h = md5.New
	case "SHA-256":
		h = sha256.New
	default:
		return ""
	}
	hx := func(s string) string {
		x := h()
		x.Write([]byte(s))
		return hex.EncodeToString(x.Sum(nil))
	}
	ha1 := hx(user + ":" + p["realm"] + ":" + pass)
	ha2 := hx(method + ":" + uri)
	qop := ""
	for _, q := range strings.Split(p["qop"], ",") {
		if strings.TrimSpace(q) == "auth" {
			qop = "auth"
		}
	}
	var resp, extra string
	if qop == "auth" {
		cb := make([]byte, 8)
		_, _ = rand.Read(cb)
		cnonce := hex.EncodeToString(cb)
		// nc stays 1: each request answers a challenge (or the cached one, which
		// cameras accept until the nonce goes stale and they challenge again).
		resp = hx(ha1 + ":" + p["nonce"] + ":00000001:" + cnonce + ":auth:" + ha2)
		extra = fmt.Sprintf(`, qop=auth, nc=00000001, cnonce="%s"`, cnonce)
	} else {
		resp = hx(ha1 + ":" + p["nonce"] + ":" + ha2)
	}
	a := fmt.Sprintf(`Digest username="%s", realm="%s", nonce="%s", uri="%s", response="%s"`, quote(user), quote(p["realm"]), quote(p["nonce"]), quote(uri), resp)
	if p["algorithm"] != "" {
		a += ", algorithm=" + p["algorithm"]
	}
	if p["opaque"] != "" {
		a += fmt.Sprintf(`, opaque="%s"`, quote(p["opaque"]))
	}
	return a + extra
}

// parseAuthParams reads k=v and k="v, with commas" pairs.
func parseAuthParams(s string) map[string]string {
	out := map[string]string{}
	for len(s) > 0 && len(out) < 32 {
		s = strings.TrimLeft(s, " ,")
		k, rest, ok := strings.Cut(s, "=")
		if !ok {
			break
		}
		k = strings.ToLower(strings.TrimSpace(k))
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				break
			}
			v, s = rest[1:1+end], rest[2+end:]
		} else {
			v, s, _ = strings.Cut(rest, ",")
		}
		out[k] = strings.TrimSpace(v)
	}
	return out
}

func quote(s string) string { return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) }

// allow applies the per-viewer rate limit.
func (t *tunnel) allowFrom(from string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buckets[from]
	if b == nil {
		if len(t.buckets) >= ptzMaxViewers {
			clear(t.buckets)
		}
		b = &bucket{tokens: tunnelBurst, last: time.Now()}
		t.buckets[from] = b
	}
	return b.takeAt(time.Now(), tunnelRate, tunnelBurst)
}

// submit validates the envelope and starts the request if a slot is free.
func (t *tunnel) submit(ctx context.Context, from string, payload []byte) {
	var req TunnelRequest
	if len(payload) > tunnelMaxRequest*2 {
		t.reply(from, errorReply(payload, "request too large"))
		return
	}
	if err := json.Unmarshal(payload, &req); err != nil {
		t.log.Info("http tunnel: malformed request", "from", from, "err", err)
		t.reply(from, errorReply(payload, "request is not a JSON object: "+err.Error()))
		return
	}
	if !t.allowFrom(from) {
		t.reply(from, errReply(req.ID, fmt.Sprintf("rate limited: at most %d requests per second", tunnelRate)))
		return
	}
	select {
	case t.sem <- struct{}{}:
	default:
		t.reply(from, errReply(req.ID, fmt.Sprintf("camera busy: %d requests in flight", tunnelParallel)))
		return
	}
	go func() {
		defer func() { <-t.sem }()
		t.handle(ctx, from, &req)
	}()
}

// handleHTTP is the TopicHandler of topic http.
func handleHTTP(c *Camera, from string, _ bool, payload []byte) {
	cfg := c.Config()
	if cfg.HTTP.Base == "" {
		c.Reply(from, "http", errorReply(payload, "camera "+c.ID()+" has no web interface configured"))
		return
	}
	c.devMu.Lock()
	t := c.tunnel
	if t == nil {
		user, pass := cfg.HTTP.User, cfg.HTTP.Password
		if user == "" {
			user, pass = cfg.ONVIF.User, cfg.ONVIF.Password
		}
		var err error
		t, err = newTunnel(cfg.HTTP.Base, user, pass, cfg.HTTP.Allow, func(to string, b []byte) { c.Reply(to, "http", b) }, c.log)
		if err != nil {
			c.devMu.Unlock()
			c.Reply(from, "http", errorReply(payload, err.Error()))
			return
		}
		c.tunnel = t
	}
	c.devMu.Unlock()
	t.submit(c.ctx, from, payload)
}
