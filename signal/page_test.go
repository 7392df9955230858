package signal

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

const testEarly = "(()=>{window.early=1})();\n//# sourceMappingURL=early.js.map\n"

const testPage = "<!doctype html>\n<html>\n  <head>\n    <script src=\"early.js\"></script>\n  </head>\n  <body></body>\n</html>\n"

// TestCameraPageICEServers: a camera page opened with a valid token has the
// TURN servers the WHEP OPTIONS would give inlined before early.js (so its
// peer connection needs no OPTIONS round trip), and early.js itself inlined
// (no request before the session starts), not cached, and escaped; any
// other page, or a refused token, is the file as it is.
func TestCameraPageICEServers(t *testing.T) {
	keys := auth.Keys{"key": "secret-secret-secret-secret-secret"}
	s := New(Options{Config: config.Default(), Keys: keys, TURNPort: 3478, TURNSecret: "turn-secret",
		Web: fstest.MapFS{"index.html": {Data: []byte(testPage)}, "early.js": {Data: []byte(testEarly)}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	token := func(identity string, g auth.Grants) string {
		c := auth.Claims{Room: "camera/door", Grants: g}
		c.RegisteredClaims = jwt.RegisteredClaims{Subject: identity}
		tok, err := keys.Sign("key", c, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	get := func(query string) (*http.Response, string) {
		res, err := http.Get(srv.URL + "/?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	inlined := regexp.MustCompile(`<script id="petrel-ice-servers" type="application/json">([^<]*)</script>\s*<script>` + regexp.QuoteMeta(testEarly) + `</script>`)

	res, body := get("camera=door&token=" + url.QueryEscape(token("viewer", auth.Grants{Subscribe: true})))
	m := inlined.FindStringSubmatch(body)
	if res.StatusCode != 200 || m == nil {
		t.Fatalf("camera page: %d\n%s", res.StatusCode, body)
	}
	var servers []protocol.ICEServer
	if err := json.Unmarshal([]byte(m[1]), &servers); err != nil {
		t.Fatal(err)
	}
	if len(servers) != 1 || len(servers[0].URLs) != 2 || !strings.HasPrefix(servers[0].URLs[0], "turn:") || !strings.HasSuffix(servers[0].Username, ":viewer") || servers[0].Credential == "" {
		t.Fatalf("inlined servers %+v", servers)
	}
	if strings.Contains(body, `src="early.js"`) {
		t.Errorf("early.js is loaded, not inlined:\n%s", body)
	}
	if cc := res.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q: the page holds credentials", cc)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("Content-Type %q", ct)
	}

	// An identity cannot close the script element (JSON escapes < and >).
	_, body = get("camera=door&token=" + url.QueryEscape(token("x</script><script>alert(1)//", auth.Grants{Subscribe: true})))
	if strings.Contains(body, "<script>alert") || !inlined.MatchString(body) {
		t.Fatalf("identity not escaped:\n%s", body)
	}

	// A script that could close its element is loaded as a file.
	odd := New(Options{Config: config.Default(), Keys: keys, TURNPort: 3478, TURNSecret: "turn-secret",
		Web: fstest.MapFS{"index.html": {Data: []byte(testPage)}, "early.js": {Data: []byte(`x="</SCRIPT>"`)}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	rec := httptest.NewRecorder()
	odd.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/?camera=door&token="+url.QueryEscape(token("viewer", auth.Grants{Subscribe: true})), nil))
	if b := rec.Body.String(); !strings.Contains(b, `petrel-ice-servers`) || !strings.Contains(b, `<script src="early.js"></script>`) || strings.Contains(b, "SCRIPT") {
		t.Fatalf("early.js with </script> in it:\n%s", b)
	}

	for _, q := range []string{
		"camera=door",                   // no token: the page fetches a development token
		"camera=door&token=not-a-token", // refused: the page shows the WHEP error
		"room=r&token=" + url.QueryEscape(token("viewer", auth.Grants{Subscribe: true})), // not a camera page
		"camera=door&token=" + url.QueryEscape(token("nobody", auth.Grants{})),           // no media grant: no TURN servers
	} {
		if _, body := get(q); body != testPage {
			t.Errorf("%s: page changed:\n%s", q, body)
		}
	}
}
