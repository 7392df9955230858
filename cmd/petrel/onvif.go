package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/petrel-sfu/petrel/camera/emulator"
)

func init() {
	register("onvif-emulator", "run the camera emulator's ONVIF PTZ endpoint, web interface and audio backchannel (tests, demos)", onvifEmulatorMain)
}

// onvifEmulatorMain serves the emulator's device side in its own process, so
// that browser tests can point a camera of a real server at it and read back
// what it received (GET /emulator/commands, GET /emulator/backchannel).
func onvifEmulatorMain(args []string) int {
	fs := flag.NewFlagSet("onvif-emulator", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "ONVIF and web interface address")
	user := fs.String("user", "admin", "ONVIF and web user (empty: no authentication)")
	password := fs.String("password", "admin", "password")
	bcListen := fs.String("backchannel", "", "also serve an RTSP audio backchannel on this address (e.g. 127.0.0.1:0)")
	bcCodec := fs.String("backchannel-codec", "PCMU", "codec the backchannel announces: PCMU or opus")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o := emulator.NewONVIF(*user, *password)
	var bc *emulator.Backchannel
	bcURL := ""
	if *bcListen != "" {
		bc = emulator.NewBackchannel(*bcCodec)
		u, err := bc.Start(*bcListen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "petrel onvif-emulator:", err)
			return 1
		}
		defer bc.Close()
		bcURL = u
	}
	u, err := o.StartWith(*listen, func(mux *http.ServeMux) {
		mux.HandleFunc("GET /emulator/backchannel", func(w http.ResponseWriter, r *http.Request) {
			var st emulator.BackchannelStats
			if bc != nil {
				st = bc.Stats()
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(st)
		})
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel onvif-emulator:", err)
		return 1
	}
	defer o.Close()
	// One JSON line on stdout: the test reads the addresses from it.
	_ = json.NewEncoder(os.Stdout).Encode(map[string]string{"onvif": u, "backchannel": bcURL})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return 0
}
