package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var keys = Keys{"k1": strings.Repeat("s", 32), "k2": strings.Repeat("t", 32)}

func TestTokenRoundTrip(t *testing.T) {
	tok, err := keys.Sign("k1", Claims{Room: "r", Grants: Grants{Publish: true}, RegisteredClaims: jwt.RegisteredClaims{Subject: "alice"}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c, err := keys.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Identity() != "alice" || c.Room != "r" || !c.Grants.Publish || c.Grants.Subscribe {
		t.Fatalf("claims %+v", c)
	}
}

func TestTokenRejections(t *testing.T) {
	good, _ := keys.Sign("k1", Claims{Room: "r", RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}, time.Minute)
	expired, _ := keys.Sign("k1", Claims{Room: "r", RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}, -time.Minute)
	noSub, _ := keys.Sign("k1", Claims{Room: "r"}, time.Minute)
	forged, _ := Keys{"k1": strings.Repeat("x", 32)}.Sign("k1", Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}, time.Minute)
	unknownKey, _ := Keys{"k9": strings.Repeat("s", 32)}.Sign("k9", Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}, time.Minute)
	parts := strings.Split(good, ".")
	none := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + "."
	tampered := parts[0] + "." + strings.TrimRight(parts[1], "=") + "x." + parts[2]
	for name, tc := range map[string]struct {
		tok  string
		want error
	}{
		"empty":       {"", ErrUnauthorized},
		"garbage":     {"not.a.jwt", ErrUnauthorized},
		"expired":     {expired, ErrExpired},
		"no subject":  {noSub, ErrUnauthorized},
		"forged":      {forged, ErrUnauthorized},
		"unknown key": {unknownKey, ErrUnauthorized},
		"alg none":    {none, ErrUnauthorized},
		"tampered":    {tampered, ErrUnauthorized},
		"huge":        {strings.Repeat("a", 10000), ErrUnauthorized},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := keys.Verify(tc.tok)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestTURNCredentials(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	u, p := TURNCredentials("sec", "alice", time.Hour, now)
	if !strings.HasSuffix(u, ":alice") {
		t.Fatalf("user %q", u)
	}
	got, ok := CheckTURN("sec", u, now.Add(59*time.Minute))
	if !ok || got != p {
		t.Fatal("valid credentials rejected")
	}
	if _, ok := CheckTURN("sec", u, now.Add(61*time.Minute)); ok {
		t.Fatal("expired credentials accepted")
	}
	if got, _ := CheckTURN("other", u, now); got == p {
		t.Fatal("password does not depend on the secret")
	}
	if _, ok := CheckTURN("sec", "alice", now); ok {
		t.Fatal("username without expiry accepted")
	}
}

func FuzzVerify(f *testing.F) {
	good, _ := keys.Sign("k1", Claims{Room: "r", RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}, time.Minute)
	f.Add(good)
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = keys.Verify(s)
	})
}

// signRaw signs claims as they are (Sign would refuse or fill them in).
func signRaw(t *testing.T, c Claims) string {
	t.Helper()
	c.Issuer = "k1"
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, &c).SignedString([]byte(keys["k1"]))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestReservedIdentities(t *testing.T) {
	exp := jwt.NewNumericDate(time.Now().Add(time.Hour))
	for _, tc := range []struct {
		id, room string
		camera   bool
		ok       bool
	}{
		{"alice", "r", false, true},
		{"cameraman", "camera/door", false, true},
		{"camera", "camera/door", false, false},
		{"CAMERA", "camera/door", false, false},
		{"camera-door", "camera/wall", false, false},
		{"playback-alice", "camera/door", false, false},
		{"AudioMix-alice", "townhall", false, false},
		{"audiomixer", "townhall", false, true},
		{"AUDIOMIX", "townhall", false, false}, // the mix of everyone for WHEP viewers
		{"camera", "camera/door", true, true},
		{"camera", "lobby", true, false},
		{"camera-door", "camera/door", true, false},
	} {
		c := Claims{Room: tc.room, Grants: Grants{Camera: tc.camera}, RegisteredClaims: jwt.RegisteredClaims{Subject: tc.id, ExpiresAt: exp}}
		_, err := keys.Verify(signRaw(t, c))
		if (err == nil) != tc.ok || (err != nil && (!errors.Is(err, ErrReserved) || !errors.Is(err, ErrUnauthorized))) {
			t.Errorf("%q in %q (camera grant %v): %v", tc.id, tc.room, tc.camera, err)
		}
		if _, err := keys.Sign("k1", c, time.Minute); (err == nil) != tc.ok {
			t.Errorf("Sign %q in %q (camera grant %v): %v", tc.id, tc.room, tc.camera, err)
		}
	}
}

func TestTokenLifetime(t *testing.T) {
	defer SetMaxLifetime(0)
	now := time.Now()
	tok := func(iat, nbf *time.Time, exp time.Time) string {
		c := Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "a", ExpiresAt: jwt.NewNumericDate(exp)}}
		if iat != nil {
			c.IssuedAt = jwt.NewNumericDate(*iat)
		}
		if nbf != nil {
			c.NotBefore = jwt.NewNumericDate(*nbf)
		}
		return signRaw(t, c)
	}
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }
	for _, tc := range []struct {
		name string
		tok  string
		ok   bool
	}{
		{"a day from now", tok(at(0), nil, now.Add(24*time.Hour)), true},
		{"signed by Sign for a day", func() string {
			s, _ := keys.Sign("k1", Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}, 24*time.Hour)
			return s
		}(), true},
		{"two days", tok(at(0), nil, now.Add(48*time.Hour)), false},
		{"no iat, two days", tok(nil, nil, now.Add(48*time.Hour)), false},
		{"nbf a day ago, expires in an hour", tok(nil, at(-24*time.Hour), now.Add(time.Hour)), false},
		{"iat tomorrow, valid an hour", tok(at(24*time.Hour), nil, now.Add(25*time.Hour)), false},
	} {
		_, err := keys.Verify(tc.tok)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "lifetime")) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	SetMaxLifetime(time.Hour)
	if _, err := keys.Verify(tok(at(0), nil, now.Add(2*time.Hour))); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("a 2 h token with a 1 h maximum: %v", err)
	}
	if _, err := keys.Verify(tok(at(0), nil, now.Add(50*time.Minute))); err != nil {
		t.Errorf("a 50 min token with a 1 h maximum: %v", err)
	}
}

// Watching outside a WebRTC session: a subscriber of the room, or an
// administrator; a camera also to a subscriber of the wall room.
func TestMayWatch(t *testing.T) {
	sub := func(room string) *Claims { return &Claims{Room: room, Grants: Grants{Subscribe: true}} }
	for _, c := range []struct {
		claims *Claims
		camera string
		want   bool
	}{
		{sub("camera/door"), "door", true},
		{sub(CameraWallRoom), "door", true},
		{sub("camera/gate"), "door", false},
		{&Claims{Room: "camera/door", Grants: Grants{Publish: true}}, "door", false},
		{&Claims{Grants: Grants{Admin: true}}, "door", true},
		{nil, "door", false},
	} {
		if got := c.claims.MayWatchCamera(c.camera); got != c.want {
			t.Errorf("%+v watching camera %s: %v, want %v", c.claims, c.camera, got, c.want)
		}
	}
	if sub(CameraWallRoom).MayWatch("stage") || !sub("stage").MayWatch("stage") {
		t.Error("a room's token watches that room only")
	}
}
