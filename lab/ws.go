package lab

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

// The to-chromium-ws and to-firefox-ws stacks: TCP into the same browser,
// the reference for Petrel → browser. Host a serves two WebSockets, "bulk"
// (messages of the tuning's size, as fast as TCP takes them) and "probe"
// (stamped small messages); the browser in host b measures them exactly as
// it measures the data channels, so the difference between the two rows is
// the browser's data channel path (its SCTP, DTLS and UDP socket) against
// its TCP path, with the same page, process and CPUs.

// wsSend serves until the browser has closed the bulk socket.
func wsSend(c PeerConfig) error {
	t, _ := tuningFor(c)
	ln, err := net.Listen("tcp4", c.Addr)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	stop := make(chan struct{})
	accept := func(w http.ResponseWriter, r *http.Request) *websocket.Conn {
		// The page is about:blank, whose origin is opaque.
		conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return nil
		}
		conn.CloseRead(context.Background()) // only the close frame comes back
		return conn
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/bulk", func(w http.ResponseWriter, r *http.Request) {
		conn := accept(w, r)
		if conn == nil {
			return
		}
		defer close(done)
		defer conn.CloseNow()
		buf := make([]byte, t.MessageSize)
		for {
			if conn.Write(context.Background(), websocket.MessageBinary, buf) != nil {
				return // the browser closed: the window is over
			}
		}
	})
	mux.HandleFunc("/probe", func(w http.ResponseWriter, r *http.Request) {
		conn := accept(w, r)
		if conn == nil {
			return
		}
		defer conn.CloseNow()
		prober(func(b []byte) error { return conn.Write(context.Background(), websocket.MessageBinary, b) }, stop)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	select {
	case <-done:
	case <-time.After(c.Duration + 60*time.Second):
		return errors.New("the browser did not close the bulk socket")
	}
	close(stop)
	return nil
}
