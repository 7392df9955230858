package record

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/auth"
)

func TestRecordingsAndExportOverHTTP(t *testing.T) {
	frames := makeClip(t, 90)
	e := newCamEnv(t, t.TempDir(), time.Second)
	e.recordClip(t, frames, 90)
	keys := auth.Keys{"k": "secret-secret-secret-secret-1234"}
	sign := func(room string, admin bool) string {
		c := auth.Claims{Room: room, Grants: auth.Grants{Subscribe: true, Admin: admin}}
		c.Subject = "viewer"
		tok, err := keys.Sign("k", c, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	mux := http.NewServeMux()
	e.rec.Routes(mux, keys)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path, tok string) *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, c := range []struct {
		path, tok string
		status    int
	}{
		{"/v1/cameras/door/recordings", "", 401},
		{"/v1/cameras/door/recordings", "garbage", 401},
		{"/v1/cameras/door/recordings", sign("camera/gate", false), 403},
		{"/v1/cameras/door/recordings", sign("camera/door", false), 200},
		{"/v1/cameras/door/recordings", sign("anything", true), 200},
		{"/v1/cameras/..%2f..%2fetc/recordings", sign("anything", true), 400},
		{"/v1/cameras/door/export?from=5&to=1", sign("camera/door", false), 400},
		{"/v1/cameras/door/export?from=abc&to=1", sign("camera/door", false), 400},
		{"/v1/cameras/door/export?from=1000&to=2000", sign("camera/door", false), 404},
	} {
		resp := get(c.path, c.tok)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Fatalf("GET %s: %d, want %d", c.path, resp.StatusCode, c.status)
		}
	}
	resp := get("/v1/cameras/door/recordings", sign("camera/door", false))
	var body struct{ Ranges []Range }
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if len(body.Ranges) != 1 {
		t.Fatalf("ranges %+v", body.Ranges)
	}
	r := body.Ranges[0]
	// The middle second: from a keyframe at or before it to the fragment holding its end.
	from, to := r.From+1000, r.From+2000
	resp = get("/v1/cameras/door/export?from="+strconv.FormatInt(from, 10)+"&to="+strconv.FormatInt(to, 10)+"&token="+sign("camera/door", false), "")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "video/mp4" {
		t.Fatalf("export: %d %s", resp.StatusCode, b)
	}
	if n, _ := strconv.Atoi(resp.Header.Get("Content-Length")); n != len(b) {
		t.Fatalf("Content-Length %d, body %d bytes", n, len(b))
	}
	out := filepath.Join(t.TempDir(), "export.mp4")
	os.WriteFile(out, b, 0o644)
	n := ffmpegFrames(t, out)
	if n < 30 || n > 75 {
		t.Fatalf("export of one second decodes %d frames", n)
	}
	// The export covers the asked range: its frames include those at from and to.
	got := recordedFrames(t, e.rec.store, "door")
	var want int
	for _, s := range got {
		if int64(s.t/90) >= from && int64(s.t/90) <= to {
			want++
		}
	}
	if n < want {
		t.Fatalf("export has %d frames, the range holds %d", n, want)
	}
}
