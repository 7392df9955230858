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

var (
	// ErrUnauthorized covers missing, malformed and forged tokens.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrExpired is a well-signed token used outside its validity window.
	ErrExpired = errors.New("token expired")
)

// Keys maps API keys to secrets.
type Keys map[string]string

// Sign makes a token for c signed with the secret of key; ttl sets its expiry.
func (k Keys) Sign(key string, c Claims, ttl time.Duration) (string, error) {
	secret, ok := k[key]
	if !ok {
		return "", fmt.Errorf("unknown api key %q", key)
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

// Verify checks signature, algorithm and validity window, and returns the claims.
// The error wraps ErrUnauthorized or ErrExpired, with the reason.
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
