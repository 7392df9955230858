package protocol_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/petrel-sfu/petrel/protocol/internal/tsgen"
)

// TestTypeScriptInStep fails when web/sdk/protocol.gen.ts is not what the Go
// types generate: a field renamed on one side only.
func TestTypeScriptInStep(t *testing.T) {
	want, err := tsgen.Generate(".")
	if err != nil {
		t.Fatal(err)
	}
	const path = "../web/sdk/protocol.gen.ts"
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run go generate ./protocol", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("%s differs from the Go types at line %d:\n  file: %q\n  Go:   %q\nrun go generate ./protocol", path, i+1, gl, wl)
		}
	}
}
