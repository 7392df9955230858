package record

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/petrel-sfu/petrel/protocol"
)

// AdminRoutes adds room recording to the admin API; admin wraps each handler
// with the admin API's checks (an admin token, loopback unless
// admin.allow_remote):
//
//	POST   /v1/admin/rooms/{room}/recording   start recording the room
//	DELETE /v1/admin/rooms/{room}/recording   stop it
//	GET    /v1/admin/recordings               every room recording
//	GET    /v1/admin/recordings/{id}          one, with each track's ranges
//	DELETE /v1/admin/recordings/{id}          delete it (stopping it first)
//	GET    /v1/admin/recordings/{id}/export   one MP4 file with every track
//	POST   /v1/admin/recordings/{id}/composite      render the grid composite (a job)
//	GET    /v1/admin/recordings/{id}/composite      the job's state and progress
//	DELETE /v1/admin/recordings/{id}/composite      cancel it, delete its file
//	GET    /v1/admin/recordings/{id}/composite.mp4  the finished composite
func (r *Recorder) AdminRoutes(mux *http.ServeMux, admin func(http.Handler) http.Handler) {
	h := func(pattern string, f func(q *http.Request) (any, error)) {
		mux.Handle(pattern, admin(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
			v, err := f(q)
			if err != nil {
				apiErr(w, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			_ = json.NewEncoder(w).Encode(v)
		})))
	}
	h("POST /v1/admin/rooms/{room}/recording", func(q *http.Request) (any, error) {
		return r.StartRoom(q.PathValue("room"), "admin")
	})
	h("DELETE /v1/admin/rooms/{room}/recording", func(q *http.Request) (any, error) {
		return r.StopRoom(q.PathValue("room"), "admin")
	})
	h("GET /v1/admin/recordings", func(q *http.Request) (any, error) {
		return map[string]any{"recordings": r.RoomRecordings()}, nil
	})
	h("GET /v1/admin/recordings/{id}", func(q *http.Request) (any, error) {
		return r.RoomRecording(q.PathValue("id"))
	})
	h("DELETE /v1/admin/recordings/{id}", func(q *http.Request) (any, error) {
		if err := r.DeleteRoomRecording(q.PathValue("id")); err != nil {
			return nil, err
		}
		return map[string]bool{"deleted": true}, nil
	})
	h("POST /v1/admin/recordings/{id}/composite", func(q *http.Request) (any, error) {
		return r.StartComposite(q.PathValue("id"))
	})
	h("GET /v1/admin/recordings/{id}/composite", func(q *http.Request) (any, error) {
		return r.Composite(q.PathValue("id"))
	})
	h("DELETE /v1/admin/recordings/{id}/composite", func(q *http.Request) (any, error) {
		return r.CancelComposite(q.PathValue("id"))
	})
	mux.Handle("GET /v1/admin/recordings/{id}/composite.mp4", admin(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		path, err := r.compositeFile(q.PathValue("id"))
		if err != nil {
			apiErr(w, err)
			return
		}
		w.Header().Set("Content-Type", "video/mp4")
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-composite.mp4"`, q.PathValue("id")))
		http.ServeFile(w, q, path)
	})))
	mux.Handle("GET /v1/admin/recordings/{id}/export", admin(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		id := q.PathValue("id")
		if _, err := r.roomRecording(id); err != nil {
			apiErr(w, err)
			return
		}
		w.Header().Set("Content-Type", "video/mp4")
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.mp4"`, id))
		if err := r.ExportRoom(id, w); err != nil {
			// Before the first byte this is the answer; after it, the cut
			// file says it (the length was not promised).
			r.log.Warn("room export", "recording", id, "err", err)
			apiErr(w, err)
		}
	})))
}

// CodeUnavailable: a tool the request needs (ffmpeg) is not installed (503).
const CodeUnavailable = "unavailable"

// apiErr answers err as {code, message} with the status its code implies.
func apiErr(w http.ResponseWriter, err error) {
	code := protocol.CodeOf(err)
	status := map[string]int{protocol.CodeBadRequest: 400, protocol.CodeForbidden: 403, protocol.CodeNotFound: 404, CodeUnavailable: 503}[code]
	if status == 0 {
		status = 500
	}
	msg := err.Error()
	if pe, ok := err.(*protocol.Error); ok {
		msg = pe.Message
	}
	httpErr(w, status, code, msg)
}
