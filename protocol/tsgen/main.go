// Command tsgen writes web/sdk/protocol.gen.ts from the room protocol's Go
// types: go generate ./protocol runs it in protocol/.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/petrel-sfu/petrel/protocol/internal/tsgen"
)

func main() {
	out := flag.String("o", "../web/sdk/protocol.gen.ts", "the file to write")
	dir := flag.String("dir", ".", "the directory of package protocol")
	flag.Parse()
	b, err := tsgen.Generate(*dir)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
