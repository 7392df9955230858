package camera

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/petrel-sfu/petrel/protocol"
)

// AdminHandle registers a route under the admin API's authentication (admin
// grant, loopback unless admin.allow_remote); f's value is written as JSON.
type AdminHandle func(pattern string, f func(http.ResponseWriter, *http.Request) (any, error))

// AdminRoutes adds /v1/cameras to the admin API.
func (g *Gateway) AdminRoutes(h AdminHandle) {
	h("GET /v1/cameras", func(w http.ResponseWriter, r *http.Request) (any, error) {
		out := []Status{}
		for _, c := range g.Cameras() {
			out = append(out, c.Status())
		}
		return out, nil
	})
	h("GET /v1/cameras/{id}", func(w http.ResponseWriter, r *http.Request) (any, error) {
		c, err := g.cameraOf(r)
		if err != nil {
			return nil, err
		}
		return map[string]any{"camera": c.Status(), "sessions": g.Sessions(c.Room())}, nil
	})
	h("POST /v1/cameras", func(w http.ResponseWriter, r *http.Request) (any, error) {
		var cfg Config
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return nil, protocol.Errorf(protocol.CodeBadRequest, "body must be a camera declaration (docs/cameras.md): %v", err)
		}
		c, err := g.Add(cfg)
		if errors.Is(err, ErrExists) {
			return nil, protocol.Errorf(protocol.CodeBadRequest, "%v", err)
		}
		if err != nil {
			return nil, err
		}
		return c.Status(), nil
	})
	h("DELETE /v1/cameras/{id}", func(w http.ResponseWriter, r *http.Request) (any, error) {
		if err := g.Remove(r.PathValue("id")); err != nil {
			return nil, err
		}
		return map[string]bool{"removed": true}, nil
	})
	// A WebRTC camera's token: the camera (or its provisioning tool) fetches it
	// and joins room camera/<id> as identity "camera".
	h("POST /v1/cameras/{id}/token", func(w http.ResponseWriter, r *http.Request) (any, error) {
		tok, err := g.Token(r.PathValue("id"), 24*time.Hour)
		if err != nil {
			return nil, err
		}
		return map[string]string{"token": tok, "room": RoomOf(r.PathValue("id")), "identity": Identity}, nil
	})
}

func (g *Gateway) cameraOf(r *http.Request) (*Camera, error) {
	c := g.Camera(r.PathValue("id"))
	if c == nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "no camera %q", r.PathValue("id"))
	}
	return c, nil
}
