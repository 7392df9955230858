package camera

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/camera/emulator"
)

func startTunnel(t *testing.T, allow ...string) (*emulator.ONVIF, *tunnel, *replies) {
	t.Helper()
	emu := emulator.NewONVIF("admin", "pw")
	u, err := emu.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emu.Close() })
	base := strings.TrimSuffix(u, "/onvif/device_service")
	rs := newReplies()
	tn, err := newTunnel(base, "admin", "pw", allow, rs.add, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return emu, tn, rs
}

func TestTunnelAllowList(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/axis-cgi/param.cgi?action=list", true},
		{"/axis-cgi/param.cgi", true},
		{"/axis-cgi/jpg/image.cgi", true}, // prefix entry
		{"/axis-cgi/jpg/", true},
		{"/axis-cgi/view.cgi", true}, // glob entry
		{"/axis-cgi/admin/restart.cgi", false},
		{"/axis-cgi/param.cgi/../admin/restart.cgi", false},
		{"/axis-cgi/jpg/../admin/restart.cgi", false},
		{"/axis-cgi/jpg/%2e%2e/admin/restart.cgi", false},
		{"/axis-cgi/jpg/..%2fadmin", false},
		{"/axis-cgi/jpg//x", false},
		{"//evil.example/axis-cgi/param.cgi", false},
		{"http://evil.example/axis-cgi/param.cgi", false},
		{"axis-cgi/param.cgi", false},
		{"/axis-cgi/jpg\\..\\admin", false},
		{"/axis-cgi/param.cgi#x", false},
		{"/axis-cgi/param.cgi\r\nHost: x", false},
		{"/axis-cgi/param.cgix", false},
		{"/axis-cgi/view.cgi/x", false},
		{"/", false},
	} {
		_, _, err := checkPath(tc.path, []string{"/axis-cgi/param.cgi", "/axis-cgi/jpg/", "/axis-cgi/v*.cgi"})
		if (err == nil) != tc.ok {
			t.Errorf("%q: allowed=%v, want %v (%v)", tc.path, err == nil, tc.ok, err)
		}
	}
}

func decodeBody(t *testing.T, r map[string]any) []byte {
	t.Helper()
	s, _ := r["body"].(string)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("body not base64: %v", err)
	}
	return b
}

func TestTunnelRequests(t *testing.T) {
	emu, tn, rs := startTunnel(t, "/axis-cgi/param.cgi", "/axis-cgi/echo.cgi")
	ctx := context.Background()
	tn.submit(ctx, "v", []byte(`{"id":1,"method":"GET","path":"/axis-cgi/param.cgi?action=list","headers":{"Accept":"text/plain","Cookie":"x=1","Authorization":"Basic Zm9vOmJhcg=="}}`))
	rs.wait(t, 1)
	r := rs.of("v")[0]
	if r["id"] != 1.0 || r["status"] != 200.0 || !strings.Contains(string(decodeBody(t, r)), "ProdShortName=Camera emulator") {
		t.Fatalf("GET param.cgi: %v", r)
	}
	hdr := r["headers"].(map[string]any)
	if hdr["Content-Type"] != "text/plain" || hdr["Set-Cookie"] != nil {
		t.Fatalf("response headers %v: want Content-Type only, never Set-Cookie", hdr)
	}
	web := emu.WebRequests()
	if len(web) != 1 || web[0].Query != "action=list" || web[0].Header.Get("Cookie") != "" || web[0].Header.Get("Accept") != "text/plain" ||
		!strings.HasPrefix(web[0].Header.Get("Authorization"), "Digest ") {
		t.Fatalf("camera got %+v: want the query, Accept, our Digest login, no viewer cookie", web)
	}

	body := base64.StdEncoding.EncodeToString([]byte(`{"apiVersion":"1.0"}`))
	tn.submit(ctx, "v", []byte(`{"id":2,"method":"post","path":"/axis-cgi/echo.cgi","headers":{"Content-Type":"application/json"},"body":"`+body+`"}`))
	rs.wait(t, 2)
	r = rs.of("v")[1]
	if r["status"] != 200.0 || string(decodeBody(t, r)) != `{"apiVersion":"1.0"}` {
		t.Fatalf("POST echo.cgi: %v", r)
	}
}

func TestTunnelRefusals(t *testing.T) {
	emu, tn, rs := startTunnel(t, "/axis-cgi/param.cgi", "/axis-cgi/echo.cgi", "/axis-cgi/blob.cgi")
	ctx := context.Background()
	big := base64.StdEncoding.EncodeToString(make([]byte, tunnelMaxRequest+1))
	cases := []struct {
		req    string
		status float64
		err    string
	}{
		{`{"id":1,"method":"GET","path":"/axis-cgi/admin/restart.cgi"}`, 403, "path not allowed"},
		{`{"id":2,"method":"POST","path":"/axis-cgi/param.cgi/../admin/restart.cgi"}`, 403, "not clean"},
		{`{"id":3,"method":"DELETE","path":"/axis-cgi/param.cgi"}`, 405, "only GET and POST"},
		{`{"id":4,"method":"POST","path":"/axis-cgi/echo.cgi","body":"` + big + `"}`, 413, "body larger"},
		{`{"id":5,"method":"POST","path":"/axis-cgi/echo.cgi","body":"***"}`, 400, "not base64"},
		{`{"id":6,"method":"GET","path":"/axis-cgi/blob.cgi?size=3000000"}`, 502, "answer larger"},
	}
	for i, c := range cases {
		tn.submit(ctx, "v", []byte(c.req))
		rs.wait(t, i+1)
	}
	got := map[float64]map[string]any{}
	for _, r := range rs.of("v") {
		got[r["id"].(float64)] = r
	}
	for i, c := range cases {
		r := got[float64(i+1)]
		if e, _ := r["error"].(string); r["status"] != c.status || !strings.Contains(e, c.err) {
			t.Errorf("%s: got %v, want status %v and error containing %q", c.req[:min(len(c.req), 90)], r, c.status, c.err)
		}
	}
	tn.submit(ctx, "v", []byte(`not json`))
	rs.wait(t, len(cases)+1)
	for _, w := range emu.WebRequests() {
		if w.Path != "/axis-cgi/blob.cgi" {
			t.Fatalf("a refused request reached the camera: %+v", w)
		}
	}
}

func TestTunnelChunksLargeAnswer(t *testing.T) {
	_, tn, rs := startTunnel(t, "/axis-cgi/blob.cgi")
	const size = 100_000
	tn.submit(context.Background(), "v", []byte(fmt.Sprintf(`{"id":"b","method":"GET","path":"/axis-cgi/blob.cgi?size=%d"}`, size)))
	n := (size + tunnelChunk - 1) / tunnelChunk
	rs.wait(t, n)
	var all []byte
	for i, r := range rs.of("v") {
		if r["id"] != "b" || r["chunk"] != float64(i) || r["chunks"] != float64(n) {
			t.Fatalf("chunk %d: %v", i, r)
		}
		if (i == 0) != (r["status"] != nil) {
			t.Fatalf("chunk %d: status only in the first chunk: %v", i, r)
		}
		raw, _ := json.Marshal(r)
		if len(raw) > 20<<10 {
			t.Fatalf("chunk %d is %d bytes", i, len(raw))
		}
		all = append(all, decodeBody(t, r)...)
	}
	if len(all) != size {
		t.Fatalf("reassembled %d bytes, want %d", len(all), size)
	}
	for i, b := range all {
		if b != emulator.BlobByte(i) {
			t.Fatalf("byte %d differs", i)
		}
	}
}

func TestTunnelTimeoutAndAuthFailure(t *testing.T) {
	_, tn, rs := startTunnel(t, "/axis-cgi/slow.cgi", "/axis-cgi/param.cgi")
	tn.timeout = 300 * time.Millisecond
	tn.submit(context.Background(), "v", []byte(`{"id":1,"method":"GET","path":"/axis-cgi/slow.cgi"}`))
	rs.wait(t, 1)
	if r := rs.of("v")[0]; r["status"] != 504.0 {
		t.Fatalf("slow camera: %v", r)
	}
	tn.pass = "wrong"
	tn.challenge = ""
	tn.submit(context.Background(), "w", []byte(`{"id":2,"method":"GET","path":"/axis-cgi/param.cgi"}`))
	rs.wait(t, 2)
	if r := rs.of("w")[0]; r["status"] != 401.0 {
		t.Fatalf("wrong password: %v (the camera's 401 goes back to the viewer)", r)
	}
}

func TestTunnelRateLimit(t *testing.T) {
	_, tn, rs := startTunnel(t, "/axis-cgi/param.cgi")
	const n = 25
	for i := 0; i < n; i++ {
		tn.submit(context.Background(), "v", []byte(fmt.Sprintf(`{"id":%d,"method":"GET","path":"/axis-cgi/param.cgi"}`, i)))
	}
	rs.wait(t, n)
	limited := 0
	for _, r := range rs.of("v") {
		if e, _ := r["error"].(string); strings.HasPrefix(e, "rate limited") || strings.HasPrefix(e, "camera busy") {
			limited++
		}
	}
	if limited < n-tunnelBurst-3 {
		t.Fatalf("%d of %d refused", limited, n)
	}
}

func TestDigestChallengeParsing(t *testing.T) {
	a := authorization(`Digest realm="cam, 1", nonce="abc", qop="auth-int,auth", opaque="o", algorithm=SHA-256`, "u", "p", "GET", "/x?y=1")
	for _, want := range []string{`username="u"`, `realm="cam, 1"`, `nonce="abc"`, `uri="/x?y=1"`, `qop=auth`, `opaque="o"`, `algorithm=SHA-256`} {
		if !strings.Contains(a, want) {
			t.Fatalf("%s lacks %s", a, want)
		}
	}
	if authorization(`Negotiate abc`, "u", "p", "GET", "/") != "" {
		t.Fatal("answered an unknown scheme")
	}
	if authorization(`Digest realm="r", nonce="n", algorithm=SHA-512-256`, "u", "p", "GET", "/") != "" {
		t.Fatal("answered an unknown algorithm")
	}
}
