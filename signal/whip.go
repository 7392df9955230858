package signal

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pion/ice/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// httpSession is a WHIP publisher or WHEP viewer.
type httpSession struct {
	id    string
	kind  string // whip or whep
	room  string
	token string // hash of the bearer token that created it: only it may modify it
	p     *sfu.Participant
	etag  string
}

// WHIP and WHEP (RFC 9725 and its playback counterpart): SDP offer in, SDP answer
// out, candidates in the answer; PATCH for trickle and ICE restart; DELETE ends.

func (s *Server) readSDP(w http.ResponseWriter, r *http.Request) (string, error) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/sdp" {
		return "", &statusError{415, protocol.Errorf(protocol.CodeBadRequest, "Content-Type must be application/sdp")}
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.cfg.Limits.MaxSDPBytes)))
	if err != nil {
		return "", bodyError(err, "SDP", s.cfg.Limits.MaxSDPBytes)
	}
	sdp := string(b)
	if !strings.HasPrefix(strings.TrimSpace(sdp), "v=0") {
		return "", protocol.Errorf(protocol.CodeSDPInvalid, "the body is not an SDP offer")
	}
	return sdp, nil
}

// maxFragBytes bounds a PATCH's sdpfrag: 64 candidates are kept, a few KiB.
const maxFragBytes = 16 << 10

// bodyError tells a body over its limit from one that stopped arriving (the
// body deadline of gate.Timeouts) or was cut off.
func bodyError(err error, what string, limit int) error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return protocol.Errorf(protocol.CodeTooLarge, "%s over %d bytes", what, limit)
	}
	return &statusError{http.StatusRequestTimeout, protocol.Errorf(protocol.CodeBadRequest, "the %s did not arrive in time: %v", what, err)}
}

type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

func writeErr(w http.ResponseWriter, err error) {
	if se, ok := err.(*statusError); ok {
		// The same body as httpError: the message without the code prefix, and
		// JSON encoding (Go's %q escapes are not all valid JSON).
		msg := protocol.MessageOf(se.err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(se.status)
		_ = json.NewEncoder(w).Encode(map[string]string{"code": protocol.CodeOf(se.err), "message": msg})
		return
	}
	httpError(w, err)
}

func (s *Server) tokenFor(r *http.Request) (*auth.Claims, error) {
	c, err := s.verify(bearer(r))
	if err != nil {
		return nil, err
	}
	room := r.PathValue("room")
	if c.Room != room {
		return nil, protocol.Errorf(protocol.CodeForbidden, "the token is for room %q, not %q", c.Room, room)
	}
	return c, nil
}

func hashToken(t string) string {
	h := sha256.Sum256([]byte(t))
	return hex.EncodeToString(h[:])
}

func (s *Server) whipPost(w http.ResponseWriter, r *http.Request) {
	s.startSession(w, r, "whip")
}

func (s *Server) whepPost(w http.ResponseWriter, r *http.Request) {
	s.startSession(w, r, "whep")
}

func (s *Server) startSession(w http.ResponseWriter, r *http.Request, kind string) {
	c, err := s.tokenFor(r)
	if err == nil {
		err = s.Admit(r)
	}
	if err != nil {
		s.Refused(kind, r, err)
		writeErr(w, err)
		return
	}
	offer, err := s.readSDP(w, r)
	if err != nil {
		s.Refused(kind, r, err)
		writeErr(w, err)
		return
	}
	var p *sfu.Participant
	var answer string
	if kind == "whip" {
		p, answer, err = s.mgr.PublishWHIP(c, offer)
	} else {
		q := r.URL.Query()
		release := func() {}
		if s.pullRoom != nil {
			// The room's publishers may be on other nodes: their tracks
			// cascade here while this viewer watches.
			ctx, cancel := context.WithTimeout(r.Context(), 8*time.Second)
			release = s.pullRoom(ctx, c.Room)
			cancel()
		}
		p, answer, err = s.mgr.PlayWHEP(c, offer, q.Get("participant"), q["track"])
		if err != nil {
			release()
		} else {
			p.OnClose(release)
		}
	}
	if err != nil {
		s.refused.Note(kind, r, fmt.Errorf("room %s: %w", c.Room, err))
		writeErr(w, err)
		return
	}
	sess := &httpSession{id: p.Sid(), kind: kind, room: c.Room, token: hashToken(bearer(r)), p: p, etag: etagOf(answer)}
	s.mu.Lock()
	s.sessions[sess.id] = sess
	s.mu.Unlock()
	p.OnClose(func() {
		s.mu.Lock()
		delete(s.sessions, sess.id)
		s.mu.Unlock()
	})
	// Escaped: a room name may hold a slash (camera/<id>), and the session's
	// PATCH and DELETE must reach the {room}/{session} route.
	loc := "/" + kind + "/" + url.PathEscape(c.Room) + "/" + url.PathEscape(sess.id)
	w.Header().Set("Location", loc)
	w.Header().Set("ETag", sess.etag)
	w.Header().Set("Content-Type", "application/sdp")
	for _, ice := range s.iceServers(r, c.Identity(), c.Grants) {
		for _, u := range ice.URLs {
			w.Header().Add("Link", fmt.Sprintf(`<%s>; rel="ice-server"; username=%q; credential=%q; credential-type="password"`, u, ice.Username, ice.Credential))
		}
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, answer)
}

func etagOf(sdp string) string {
	for _, l := range strings.Split(sdp, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "a=ice-ufrag:"); ok {
			return `"` + v + `"`
		}
	}
	return `"0"`
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) *httpSession {
	s.mu.Lock()
	sess := s.sessions[r.PathValue("session")]
	s.mu.Unlock()
	if sess == nil || sess.room != r.PathValue("room") || !strings.HasPrefix(r.URL.Path, "/"+sess.kind+"/") {
		writeErr(w, protocol.Errorf(protocol.CodeNotFound, "no such session"))
		return nil
	}
	if hashToken(bearer(r)) != sess.token {
		writeErr(w, protocol.Errorf(protocol.CodeUnauthorized, "use the token that created the session"))
		return nil
	}
	return sess
}

func (s *Server) sessionDelete(w http.ResponseWriter, r *http.Request) {
	sess := s.session(w, r)
	if sess == nil {
		return
	}
	sess.p.Close("left")
	w.WriteHeader(http.StatusOK)
}

// sessionPatch applies a trickle-ice-sdpfrag: new candidates, or new ICE
// credentials (an ICE restart), answered with the server's new credentials.
func (s *Server) sessionPatch(w http.ResponseWriter, r *http.Request) {
	sess := s.session(w, r)
	if sess == nil {
		return
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/trickle-ice-sdpfrag" {
		writeErr(w, &statusError{415, protocol.Errorf(protocol.CodeBadRequest, "Content-Type must be application/trickle-ice-sdpfrag")})
		return
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFragBytes))
	if err != nil {
		writeErr(w, bodyError(err, "sdpfrag", maxFragBytes))
		return
	}
	frag := parseFrag(string(b))
	for _, c := range frag.candidates {
		// Not needed (below), but hostile input all the same.
		if _, err := ice.UnmarshalCandidate(c); err != nil {
			writeErr(w, protocol.Errorf(protocol.CodeBadRequest, "candidate %q: %v", c, err))
			return
		}
	}
	rufrag, ok := sess.p.RemoteICE()
	if !ok {
		writeErr(w, protocol.Errorf(protocol.CodeNotFound, "session is closed"))
		return
	}
	// The server's sessions are ICE-lite and need no candidates: they learn
	// the client's address from its checks.
	switch {
	case frag.ufrag == "" || frag.ufrag == rufrag:
		if t := sess.p.Timing(); t != nil && len(frag.candidates) > 0 {
			t.Mark(sfu.StepFirstRemoteCandidate) // a trickling viewer's hole punch starts here
		}
		w.WriteHeader(http.StatusNoContent)
	case sess.kind != "whip":
		// RFC 9725 4.3.2: the server's new credentials and candidates;
		// DTLS and SRTP go on.
		ans, err := sess.p.RestartViewerICE(frag.ufrag, frag.pwd)
		if err != nil {
			writeErr(w, err)
			return
		}
		sess.etag = etagOf(ans)
		w.Header().Set("Content-Type", "application/trickle-ice-sdpfrag")
		w.Header().Set("ETag", sess.etag)
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, ans)
	default:
		s.restartICE(w, sess, replaceICE(sess.p.LastOffer(), frag.ufrag, frag.pwd))
	}
}

type sdpFrag struct {
	ufrag, pwd, mid string
	candidates      []string
}

func parseFrag(s string) sdpFrag {
	var f sdpFrag
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(l, "a=ice-ufrag:"):
			f.ufrag = strings.TrimPrefix(l, "a=ice-ufrag:")
		case strings.HasPrefix(l, "a=ice-pwd:"):
			f.pwd = strings.TrimPrefix(l, "a=ice-pwd:")
		case strings.HasPrefix(l, "a=mid:") && f.mid == "":
			f.mid = strings.TrimPrefix(l, "a=mid:")
		case strings.HasPrefix(l, "a=candidate:"):
			if len(f.candidates) < 64 {
				f.candidates = append(f.candidates, strings.TrimPrefix(l, "a="))
			}
		}
	}
	return f
}

func replaceICE(sdp, ufrag, pwd string) string {
	lines := strings.Split(strings.ReplaceAll(sdp, "\r\n", "\n"), "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "a=ice-ufrag:"):
			lines[i] = "a=ice-ufrag:" + ufrag
		case strings.HasPrefix(l, "a=ice-pwd:"):
			lines[i] = "a=ice-pwd:" + pwd
		}
	}
	return strings.Join(lines, "\r\n")
}

// answerFrag extracts the ICE lines of an answer as an sdpfrag.
func answerFrag(sdp string) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, l := range strings.Split(sdp, "\r\n") {
		if strings.HasPrefix(l, "a=ice-ufrag:") || strings.HasPrefix(l, "a=ice-pwd:") || strings.HasPrefix(l, "a=candidate:") {
			if !seen[l] {
				seen[l] = true
				b.WriteString(l + "\r\n")
			}
		}
	}
	return b.String()
}

func (s *Server) whipOptions(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Accept-Post", "application/sdp")
	// A client with a valid token learns the TURN servers before its offer, so
	// that a relay-only client (petrel probe --relay) can gather relay candidates.
	if c, err := s.verify(bearer(r)); err == nil {
		for _, ice := range s.iceServers(r, c.Identity(), c.Grants) {
			for _, u := range ice.URLs {
				w.Header().Add("Link", fmt.Sprintf(`<%s>; rel="ice-server"; username=%q; credential=%q; credential-type="password"`, u, ice.Username, ice.Credential))
			}
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// restartICE answers a WHIP session's ICE restart: offer is its last one
// with the client's new credentials; then (if not nil) runs before the
// answer's fragment is written.
func (s *Server) restartICE(w http.ResponseWriter, sess *httpSession, offer string) {
	answer, err := sess.p.HandleOffer(offer)
	if err != nil {
		writeErr(w, err)
		return
	}
	sess.etag = etagOf(answer)
	w.Header().Set("Content-Type", "application/trickle-ice-sdpfrag")
	w.Header().Set("ETag", sess.etag)
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, answerFrag(answer))
}
