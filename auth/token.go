// Package auth makes and checks the signed tokens every join needs, and the
// time-limited TURN credentials handed out with each join.
package auth

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Grants are what a token allows.
type Grants struct {
	Publish     bool `json:"publish"`
	Subscribe   bool `json:"subscribe"`
	PublishData bool `json:"publishData"`
	Admin       bool `json:"admin"`
	// PTZ lets a viewer of a camera room move the camera, talk through it and
	// reach its web interface (topics ptz, talk and http; camera/ptz.go).
	PTZ bool `json:"ptz,omitempty"`
	// Camera marks the token of a WebRTC camera joining its own room
	// camera/<id> as identity "camera" (camera.Gateway.Token): the only
	// token that may hold a reserved identity.
	Camera bool `json:"camera,omitempty"`
	// Record lets a participant start and stop the recording of its own room
	// (signaling startRecording/stopRecording; docs/recording.md).
	Record bool `json:"record,omitempty"`
}

// Has reports whether g holds the grant of that name (its JSON name: publish,
// subscribe, publishData, admin, ptz, camera, record); an unknown name is not held.
func (g Grants) Has(name string) bool {
	switch name {
	case "publish":
		return g.Publish
	case "subscribe":
		return g.Subscribe
	case "publishData":
		return g.PublishData
	case "admin":
		return g.Admin
	case "ptz":
		return g.PTZ
	case "camera":
		return g.Camera
	case "record":
		return g.Record
	}
	return false
}

// Claims is the token payload: who joins which room with which grants.
type Claims struct {
	Room     string `json:"room,omitempty"`
	Name     string `json:"name,omitempty"`
	Metadata string `json:"metadata,omitempty"`
	Grants   Grants `json:"grants"`
	jwt.RegisteredClaims
}

// Identity is the participant identity the token names.
func (c *Claims) Identity() string { return c.Subject }

// MayWatch reports whether the claims let their holder watch room's media as
// a passive viewer outside a WebRTC session (HLS egress): a token for that
// room with the subscribe grant, or an administrator's.
func (c *Claims) MayWatch(room string) bool {
	return c != nil && (c.Grants.Admin || c.Room == room && c.Grants.Subscribe)
}

// CameraWallRoom is the room every camera is also published in: the viewer
// wall.
const CameraWallRoom = "cameras"

// MayWatchCamera reports whether the claims let their holder watch camera id
// outside a WebRTC session (HTTP live, HLS): MayWatch of the camera's room or
// of the wall room, which shows every camera.
func (c *Claims) MayWatchCamera(id string) bool {
	return c.MayWatch(cameraRoomPrefix+id) || c.MayWatch(CameraWallRoom)
}

var (
	// ErrUnauthorized covers missing, malformed and forged tokens.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrExpired is a well-signed token used outside its validity window.
	ErrExpired = errors.New("token expired")
	// ErrReserved is a token naming an identity the server keeps for its own
	// participants; it also wraps ErrUnauthorized.
	ErrReserved = errors.New("identity reserved")
)

// Identities of the server's own participants: a camera in its room
// (CameraIdentity), the camera wall's copy of camera <id> (WallPrefix+id) and
// a recording played back to one viewer (PlaybackPrefix+viewer), the audio
// mixer's track for one listener (MixPrefix+listener) and its mix of
// everyone for WHEP viewers (MixRoomIdentity). No token
// may name them, except a WebRTC camera's own (Grants.Camera).
const (
	CameraIdentity  = "camera"
	WallPrefix      = "camera-"
	PlaybackPrefix  = "playback-"
	MixPrefix       = "audiomix-"
	MixRoomIdentity = "audiomix"
	// cameraRoomPrefix names the rooms a camera token is good for.
	cameraRoomPrefix = "camera/"
)

// Reserved reports whether identity is one the server uses for itself. Case
// is ignored, so that no look-alike of the camera shows in a room's list.
func Reserved(identity string) bool {
	id := strings.ToLower(identity)
	return id == CameraIdentity || strings.HasPrefix(id, WallPrefix) || strings.HasPrefix(id, PlaybackPrefix) || strings.HasPrefix(id, MixPrefix) || id == MixRoomIdentity
}

// checkIdentity refuses a reserved identity unless the claims are a WebRTC
// camera's own: identity "camera" with the camera grant, in a camera room.
func (c *Claims) checkIdentity() error {
	id := c.Subject
	if !Reserved(id) || (c.Grants.Camera && id == CameraIdentity && strings.HasPrefix(c.Room, cameraRoomPrefix)) {
		return nil
	}
	return fmt.Errorf("%w: %w: identity %q is reserved for the server's own participants", ErrUnauthorized, ErrReserved, id)
}

// DefaultMaxLifetime bounds how long a leaked token stays useful
// (limits.max_token_lifetime).
const DefaultMaxLifetime = 24 * time.Hour

// lifetimeLeeway absorbs the clock skew and the few seconds a signer backdates
// nbf (Sign backdates it by 10 s).
const lifetimeLeeway = time.Minute

var maxLifetime atomic.Int64

// SetMaxLifetime sets the longest validity Verify accepts, for every token
// this process checks (the server sets it once from its configuration); d <= 0
// restores DefaultMaxLifetime.
func SetMaxLifetime(d time.Duration) {
	if d <= 0 {
		d = DefaultMaxLifetime
	}
	maxLifetime.Store(int64(d))
}

// MaxLifetime is the longest validity Verify accepts.
func MaxLifetime() time.Duration {
	if d := maxLifetime.Load(); d > 0 {
		return time.Duration(d)
	}
	return DefaultMaxLifetime
}

// checkLifetime refuses tokens valid for longer than MaxLifetime: from their
// issue (or nbf) to their expiry, and from now to their expiry (an issue time
// set in the future must not stretch it).
func (c *Claims) checkLifetime(now time.Time) error {
	limit := MaxLifetime()
	exp := c.ExpiresAt.Time
	start := now
	switch {
	case c.IssuedAt != nil:
		start = c.IssuedAt.Time
	case c.NotBefore != nil:
		start = c.NotBefore.Time
	}
	life := max(exp.Sub(start), exp.Sub(now))
	if life > limit+lifetimeLeeway {
		return fmt.Errorf("%w: token lifetime %s exceeds this server's maximum of %s (limits.max_token_lifetime)",
			ErrUnauthorized, life.Round(time.Second), limit)
	}
	return nil
}

// Keys maps API keys to secrets.
type Keys map[string]string

// Sign makes a token for c signed with the secret of key; ttl sets its expiry.
// It refuses identities Verify would refuse as reserved.
func (k Keys) Sign(key string, c Claims, ttl time.Duration) (string, error) {
	secret, ok := k[key]
	if !ok {
		return "", fmt.Errorf("unknown api key %q", key)
	}
	if err := c.checkIdentity(); err != nil {
		return "", err
	}
	now := time.Now()
	c.Issuer = key
	c.IssuedAt = jwt.NewNumericDate(now)
	if c.NotBefore == nil {
		c.NotBefore = jwt.NewNumericDate(now.Add(-10 * time.Second))
	}
	c.ExpiresAt = jwt.NewNumericDate(now.Add(ttl))
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, &c)
	t.Header["kid"] = key
	return t.SignedString([]byte(secret))
}

// Verify checks signature, algorithm, validity window and lifetime, and that the
// identity is not reserved, and returns the claims. The error wraps
// ErrUnauthorized (and ErrReserved for a reserved identity) or ErrExpired,
// with the reason.
func (k Keys) Verify(token string) (*Claims, error) {
	if token == "" {
		return nil, fmt.Errorf("%w: no token", ErrUnauthorized)
	}
	if len(token) > 8192 {
		return nil, fmt.Errorf("%w: token too long", ErrUnauthorized)
	}
	var c Claims
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			if cl, ok := t.Claims.(*Claims); ok {
				kid = cl.Issuer
			}
		}
		secret, ok := k[kid]
		if !ok {
			return nil, fmt.Errorf("unknown api key %q", kid)
		}
		return []byte(secret), nil
	}, jwt.WithValidMethods([]string{"HS256", "HS384", "HS512"}), jwt.WithLeeway(5*time.Second), jwt.WithExpirationRequired())
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenNotValidYet):
		return nil, fmt.Errorf("%w: %v", ErrExpired, err)
	default:
		return nil, fmt.Errorf("%w: %v", ErrUnauthorized, err)
	}
	if c.Subject == "" {
		return nil, fmt.Errorf("%w: token has no identity (sub)", ErrUnauthorized)
	}
	if len(c.Subject) > 128 || len(c.Room) > 128 || len(c.Metadata) > 16<<10 || len(c.Name) > 256 {
		return nil, fmt.Errorf("%w: identity, room, name or metadata too long", ErrUnauthorized)
	}
	if err := c.checkLifetime(time.Now()); err != nil {
		return nil, err
	}
	if err := c.checkIdentity(); err != nil {
		return nil, err
	}
	return &c, nil
}

// TURNCredentials returns a username and password for the TURN REST API scheme
// (as coturn's use-auth-secret): username "<expiry>:<identity>", password
// base64(HMAC-SHA1(secret, username)). They stop working at expiry.
func TURNCredentials(secret, identity string, ttl time.Duration, now time.Time) (user, pass string) {
	user = strconv.FormatInt(now.Add(ttl).Unix(), 10) + ":" + identity
	return user, turnPassword(secret, user)
}

func turnPassword(secret, user string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(user))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// CheckTURN returns the password for user if its expiry is in the future.
func CheckTURN(secret, user string, now time.Time) (string, bool) {
	exp, _, ok := strings.Cut(user, ":")
	if !ok {
		return "", false
	}
	t, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || now.Unix() > t {
		return "", false
	}
	return turnPassword(secret, user), true
}
