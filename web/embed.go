// Package web holds the browser SDK and app, and embeds their bundle so that one
// binary serves everything. `make web` writes the bundle into dist/.
package web

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// Dist is the built web app (index.html at its root). It holds only .gitkeep
// when the bundle was not built; the server then serves a hint page instead.
func Dist() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	return sub
}
