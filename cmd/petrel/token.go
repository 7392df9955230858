package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/petrel-sfu/petrel/auth"
)

func init() { register("token", "make a join token", tokenMain) }

func tokenMain(args []string) int {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	room := fs.String("room", "", "room the token admits to (empty with --admin only)")
	identity := fs.String("identity", "", "participant identity")
	name := fs.String("name", "", "display name")
	metadata := fs.String("metadata", "", "participant metadata")
	publish := fs.Bool("publish", false, "may publish media")
	subscribe := fs.Bool("subscribe", false, "may subscribe")
	data := fs.Bool("data", true, "may send data messages")
	admin := fs.Bool("admin", false, "may use the admin API")
	ptz := fs.Bool("ptz", false, "may control a camera: PTZ, talk-back audio, HTTP tunnel (camera rooms)")
	record := fs.Bool("record", false, "may start and stop the recording of the room")
	ttl := fs.Duration("ttl", 6*time.Hour, "validity")
	key := fs.String("api-key", os.Getenv("PETREL_API_KEY"), "API key (default: development key)")
	secret := fs.String("api-secret", os.Getenv("PETREL_API_SECRET"), "API secret")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *identity == "" || (*room == "" && !*admin) {
		fmt.Fprintln(os.Stderr, "petrel token: --identity and --room (or --admin) are required")
		return 2
	}
	keys, apiKey, _, err := loadKeys(*key, *secret)
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel token:", err)
		return 1
	}
	c := auth.Claims{Room: *room, Name: *name, Metadata: *metadata, Grants: auth.Grants{Publish: *publish, Subscribe: *subscribe, PublishData: *data, Admin: *admin, PTZ: *ptz, Record: *record}}
	c.Subject = *identity
	if *ttl > auth.DefaultMaxLifetime {
		fmt.Fprintf(os.Stderr, "petrel token: warning: servers refuse tokens valid longer than limits.max_token_lifetime (default %s)\n", auth.DefaultMaxLifetime)
	}
	tok, err := keys.Sign(apiKey, c, *ttl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel token:", err)
		return 1
	}
	fmt.Println(tok)
	return 0
}
