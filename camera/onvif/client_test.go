package onvif_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/camera/onvif"
)

func startEmu(t *testing.T) (*emulator.ONVIF, string) {
	t.Helper()
	emu := emulator.NewONVIF("admin", "s3cret")
	u, err := emu.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emu.Close() })
	return emu, u
}

func client(t *testing.T, url, user, pass string) *onvif.Client {
	t.Helper()
	c, err := onvif.New(onvif.Config{URL: url, User: user, Password: pass, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestEveryCommandAgainstEmulator(t *testing.T) {
	emu, url := startEmu(t)
	c := client(t, url, "admin", "s3cret")
	ctx := context.Background()

	prof, err := c.PTZProfile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if prof != emulator.ProfilePTZ {
		t.Fatalf("PTZ profile %q, want %q (the one with a PTZConfiguration)", prof, emulator.ProfilePTZ)
	}

	if err := c.AbsoluteMove(ctx, prof, onvif.PTZ(0.25, -0.5, 0.75)); err != nil {
		t.Fatal(err)
	}
	st, err := c.GetStatus(ctx, prof)
	if err != nil {
		t.Fatal(err)
	}
	if !near(st.Pan, 0.25) || !near(st.Tilt, -0.5) || !near(st.Zoom, 0.75) || st.PanTiltMove != "IDLE" {
		t.Fatalf("status after AbsoluteMove: %+v", st)
	}

	if err := c.RelativeMove(ctx, prof, onvif.PT(0.5, 0.25)); err != nil {
		t.Fatal(err)
	}
	if p, tl, z := emu.Position(); !near(p, 0.75) || !near(tl, -0.25) || !near(z, 0.75) {
		t.Fatalf("position after RelativeMove %v %v %v", p, tl, z)
	}

	if err := c.ContinuousMove(ctx, prof, onvif.PT(-1, 0), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err = c.GetStatus(ctx, prof)
	if err != nil {
		t.Fatal(err)
	}
	if st.PanTiltMove != "MOVING" {
		t.Fatalf("status during ContinuousMove: %+v", st)
	}
	if err := c.Stop(ctx, prof); err != nil {
		t.Fatal(err)
	}
	st, _ = c.GetStatus(ctx, prof)
	if st.PanTiltMove != "IDLE" || st.Pan >= 0.75 {
		t.Fatalf("status after Stop: %+v (pan should have moved left from 0.75)", st)
	}

	presets, err := c.GetPresets(ctx, prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(presets) != 2 || presets[1].Name != "Gate" {
		t.Fatalf("presets %+v", presets)
	}
	if err := c.GotoPreset(ctx, prof, presets[1].Token); err != nil {
		t.Fatal(err)
	}
	if p, tl, z := emu.Position(); !near(p, 0.5) || !near(tl, -0.25) || !near(z, 0.3) {
		t.Fatalf("position after GotoPreset %v %v %v", p, tl, z)
	}
	tok, err := c.SetPreset(ctx, prof, `Door <&> "1"`, "")
	if err != nil {
		t.Fatal(err)
	}
	presets, _ = c.GetPresets(ctx, prof)
	if len(presets) != 3 || presets[2].Token != tok || presets[2].Name != `Door <&> "1"` {
		t.Fatalf("presets after SetPreset %+v (token %q)", presets, tok)
	}

	var ops []string
	for _, cmd := range emu.Commands() {
		ops = append(ops, cmd.Op)
	}
	want := "GetProfiles AbsoluteMove GetStatus RelativeMove ContinuousMove GetStatus Stop GetStatus GetPresets GotoPreset SetPreset GetPresets"
	if strings.Join(ops, " ") != want {
		t.Fatalf("emulator got\n %s\nwant\n %s", strings.Join(ops, " "), want)
	}
	cm, _ := emu.WaitCommand("ContinuousMove", 0)
	if cm.Pan == nil || *cm.Pan != -1 || cm.Timeout != "PT10S" {
		t.Fatalf("ContinuousMove recorded %+v", cm)
	}
}

func TestAuthFailure(t *testing.T) {
	emu, url := startEmu(t)
	for name, c := range map[string]*onvif.Client{
		"wrong password": client(t, url, "admin", "nope"),
		"wrong user":     client(t, url, "root", "s3cret"),
		"no credentials": client(t, url, "", ""),
	} {
		err := c.Stop(context.Background(), emulator.ProfilePTZ)
		if !errors.Is(err, onvif.ErrUnauthorized) {
			t.Errorf("%s: got %v, want ErrUnauthorized", name, err)
		}
	}
	if n := len(emu.Commands()); n != 0 {
		t.Fatalf("emulator accepted %d commands without valid credentials", n)
	}
}

func TestSOAPFault(t *testing.T) {
	_, url := startEmu(t)
	c := client(t, url, "admin", "s3cret")
	ctx := context.Background()
	var f *onvif.Fault
	err := c.GotoPreset(ctx, emulator.ProfilePTZ, "99")
	if !errors.As(err, &f) || !strings.HasSuffix(f.Subcode, "NoToken") || f.Reason == "" {
		t.Fatalf("GotoPreset of an unknown preset: %v", err)
	}
	err = c.Stop(ctx, emulator.ProfileNoPTZ)
	if !errors.As(err, &f) || !strings.HasSuffix(f.Subcode, "NoPTZProfile") {
		t.Fatalf("Stop on a profile without PTZ: %v", err)
	}
	// Out-of-range values never reach the camera.
	if err := c.AbsoluteMove(ctx, emulator.ProfilePTZ, onvif.PT(2, 0)); err == nil || errors.As(err, &f) {
		t.Fatalf("AbsoluteMove pan 2: %v, want a local range error", err)
	}
	if err := c.ContinuousMove(ctx, emulator.ProfilePTZ, onvif.PT(math.NaN(), 0), 0); err == nil {
		t.Fatal("NaN velocity accepted")
	}
}

// Hostile and broken cameras: every answer must become a clear error, never a
// panic or a bogus success.
func TestGarbageResponses(t *testing.T) {
	cases := map[string]struct {
		status int
		ctype  string
		body   string
		call   func(*onvif.Client) error
		want   error
	}{
		"not xml":      {200, "application/soap+xml", "\x00\xff garbage <<<", stop, onvif.ErrBadResponse},
		"html page":    {200, "text/html", "<html>login</html>", stop, onvif.ErrBadResponse},
		"not envelope": {200, "application/soap+xml", "<foo><Body/></foo>", stop, onvif.ErrBadResponse},
		"no body":      {200, "application/soap+xml", `<e:Envelope xmlns:e="x"></e:Envelope>`, stop, onvif.ErrBadResponse},
		"truncated":    {200, "application/soap+xml", `<e:Envelope xmlns:e="x"><e:Body><Get`, stop, onvif.ErrBadResponse},
		"huge":         {200, "application/soap+xml", `<Envelope><Body>` + strings.Repeat("<a>x</a>", onvif.MaxResponse/8+10) + `</Body></Envelope>`, stop, onvif.ErrBadResponse},
		"no profiles":  {200, "application/soap+xml", `<Envelope><Body><GetProfilesResponse/></Body></Envelope>`, profiles, onvif.ErrBadResponse},
		"bad token":    {200, "application/soap+xml", `<Envelope><Body><GetProfilesResponse><Profiles token=""/></GetProfilesResponse></Body></Envelope>`, profiles, onvif.ErrBadResponse},
		"nan position": {200, "application/soap+xml", `<Envelope><Body><GetStatusResponse><PTZStatus><Position><PanTilt x="NaN" y="0"/></Position></PTZStatus></GetStatusResponse></Body></Envelope>`, status, onvif.ErrBadResponse},
		"far position": {200, "application/soap+xml", `<Envelope><Body><GetStatusResponse><PTZStatus><Position><PanTilt x="1e300" y="0"/></Position></PTZStatus></GetStatusResponse></Body></Envelope>`, status, onvif.ErrBadResponse},
		"no status":    {200, "application/soap+xml", `<Envelope><Body><GetStatusResponse/></Body></Envelope>`, status, onvif.ErrBadResponse},
		"no preset tok": {200, "application/soap+xml", `<Envelope><Body><SetPresetResponse/></Body></Envelope>`, func(c *onvif.Client) error {
			_, err := c.SetPreset(context.Background(), "p", "n", "")
			return err
		}, onvif.ErrBadResponse},
		"http 500 html": {500, "text/html", "<h1>oops</h1>", stop, nil},
		"http 401":      {401, "text/plain", "", stop, onvif.ErrUnauthorized},
		"deep nesting":  {200, "application/soap+xml", `<Envelope><Body>` + strings.Repeat("<a>", 20000) + `</Body></Envelope>`, stop, onvif.ErrBadResponse},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			err := tc.call(client(t, srv.URL, "u", "p"))
			if err == nil {
				t.Fatal("no error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func stop(c *onvif.Client) error { return c.Stop(context.Background(), "p") }
func profiles(c *onvif.Client) error {
	_, err := c.GetProfiles(context.Background())
	return err
}
func status(c *onvif.Client) error {
	_, err := c.GetStatus(context.Background(), "p")
	return err
}

func TestDigestVector(t *testing.T) {
	// WS-Security UsernameToken profile: Base64(SHA-1(nonce + created + password)),
	// checked against a value computed independently (openssl dgst -sha1 -binary | base64).
	got := onvif.Digest([]byte("0123456789abcdef"), "2026-01-01T00:00:00.000Z", "pass")
	if got != "X55sIx39M9D055sDg5ITwW+cBMQ=" {
		t.Fatalf("digest %s", got)
	}
}
