package record

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
)

// Routes adds the recording endpoints to mux:
//
//	GET /v1/cameras/{id}/recordings           recorded ranges, for the timeline
//	GET /v1/cameras/{id}/export?from=&to=     one MP4 file of that range (Unix ms)
//
// A token with the admin grant, or one for the camera's room with the
// subscribe grant (a viewer's: recordings are the camera's video, as live.mp4
// is), authorizes; it comes as "Authorization: Bearer" or, so that a plain
// download link works, as ?token= (never logged). Errors are JSON {code, message}.
func (r *Recorder) Routes(mux *http.ServeMux, keys auth.Keys) {
	mux.HandleFunc("GET /v1/cameras/{id}/recordings", func(w http.ResponseWriter, q *http.Request) {
		id, ok := r.authorize(w, q, keys)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(map[string]any{"camera": id, "ranges": r.store.Ranges(id)})
	})
	mux.HandleFunc("GET /v1/cameras/{id}/export", func(w http.ResponseWriter, q *http.Request) {
		id, ok := r.authorize(w, q, keys)
		if !ok {
			return
		}
		from, err1 := strconv.ParseInt(q.URL.Query().Get("from"), 10, 64)
		to, err2 := strconv.ParseInt(q.URL.Query().Get("to"), 10, 64)
		if err1 != nil || err2 != nil || from < 0 || to <= from {
			httpErr(w, http.StatusBadRequest, protocol.CodeBadRequest, "from and to must be Unix milliseconds with from < to")
			return
		}
		if to-from > 24*3600*1000 {
			httpErr(w, http.StatusBadRequest, protocol.CodeBadRequest, "export at most 24 hours at once")
			return
		}
		ex, err := r.store.planExport(id, uint64(from)*90, uint64(to)*90)
		if err != nil {
			httpErr(w, http.StatusNotFound, protocol.CodeNotFound, err.Error())
			return
		}
		w.Header().Set("Content-Type", "video/mp4")
		w.Header().Set("Content-Length", strconv.FormatInt(ex.size, 10))
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-%s.mp4"`, id,
			time.UnixMilli(from).UTC().Format("20060102T150405Z")))
		if q.Method == http.MethodHead {
			return
		}
		if err := ex.writeTo(w); err != nil {
			r.log.Warn("export interrupted", "camera", id, "err", err)
		}
	})
}

// httpErr writes the API's error body, {code, message}.
func httpErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}

func (r *Recorder) authorize(w http.ResponseWriter, q *http.Request, keys auth.Keys) (string, bool) {
	id := q.PathValue("id")
	if !validID(id) {
		httpErr(w, http.StatusBadRequest, protocol.CodeBadRequest, "bad camera id")
		return "", false
	}
	tok := q.URL.Query().Get("token")
	if h := q.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		tok = strings.TrimPrefix(h, "Bearer ")
	}
	c, err := keys.Verify(tok)
	if err != nil {
		status, code := protocol.TokenRefusal(err)
		r.refused(q, code, err)
		httpErr(w, status, code, err.Error())
		return "", false
	}
	switch {
	case c.Grants.Admin:
	case c.Room != RoomPrefix+id:
		r.refused(q, protocol.CodeForbidden, errors.New("token for another room"))
		httpErr(w, http.StatusForbidden, protocol.CodeForbidden, fmt.Sprintf("the token is for room %q, not %s%s", c.Room, RoomPrefix, id))
		return "", false
	case !c.Grants.Subscribe:
		r.refused(q, protocol.CodeForbidden, errors.New("no subscribe grant"))
		httpErr(w, http.StatusForbidden, protocol.CodeForbidden, "the token does not allow subscribing (recordings are the camera's video)")
		return "", false
	}
	return id, true
}

// refused logs a refused request, at most one line a second (a client can
// repeat it at will); the URL, which may hold the token, is never logged.
func (r *Recorder) refused(q *http.Request, code string, err error) {
	now := time.Now().UnixNano()
	if last := r.refusedLog.Load(); now-last >= int64(time.Second) && r.refusedLog.CompareAndSwap(last, now) {
		r.log.Info("recording request refused", "code", code, "err", err, "remote", q.RemoteAddr, "camera", q.PathValue("id"))
	}
}

// An export is the init of the first segment followed by the indexed fragments
// from the keyframe at or before from to the fragment holding to, copied byte
// for byte: its length is known before the first byte is sent (a download shows
// progress), and nothing is re-encoded. Every keyframe carries its parameter
// sets in band, so a camera that changed resolution between segments still plays.
type export struct {
	parts []exportPart
	size  int64
}

type exportPart struct {
	path      string
	off, size int64
}

func (s *Store) planExport(id string, from, to uint64) (*export, error) {
	c := s.lookup(id)
	if c == nil {
		return nil, fmt.Errorf("camera %q has no recordings", id)
	}
	p, ok := c.seekKey(from)
	if !ok {
		return nil, errors.New("nothing recorded in that range")
	}
	ex := &export{}
	initSize, err := initLength(p.seg.Path)
	if err != nil {
		return nil, err
	}
	ex.parts = append(ex.parts, exportPart{p.seg.Path, 0, initSize})
	ex.size = initSize
	// The audio track goes along when the first segment's init declares it
	// (its audio fragments say so): from the first video sample exported to
	// the end of the range, in file order with the video.
	c.mu.Lock()
	audio := len(p.seg.Audio) > 0
	c.mu.Unlock()
	var start uint64
	var frags []exportPart
	var segs []*Segment
	for {
		fr := c.frag(p)
		if fr.T > to {
			break
		}
		if fr.End() > from {
			if len(frags) == 0 {
				start = fr.T
			}
			if len(segs) == 0 || segs[len(segs)-1] != p.seg {
				segs = append(segs, p.seg)
			}
			frags = append(frags, exportPart{p.seg.Path, fr.Off, fr.Size})
		}
		if p, ok = c.next(p); !ok {
			break
		}
	}
	if len(frags) == 0 {
		return nil, errors.New("nothing recorded in that range")
	}
	if audio {
		lo, hi := start*audioClock/clock, to*audioClock/clock
		c.mu.Lock()
		var add []exportPart
		for _, seg := range segs {
			for _, fr := range seg.Audio {
				if fr.End() > lo && fr.T <= hi {
					add = append(add, exportPart{seg.Path, fr.Off, fr.Size})
				}
			}
		}
		c.mu.Unlock()
		frags = append(frags, add...)
		order := map[string]int{}
		for i, seg := range segs {
			order[seg.Path] = i
		}
		sort.SliceStable(frags, func(i, j int) bool {
			if frags[i].path != frags[j].path {
				return order[frags[i].path] < order[frags[j].path]
			}
			return frags[i].off < frags[j].off
		})
	}
	for _, fr := range frags {
		last := &ex.parts[len(ex.parts)-1]
		if last.path == fr.path && last.off+last.size == fr.off {
			last.size += fr.size // contiguous: one read
		} else {
			ex.parts = append(ex.parts, fr)
		}
		ex.size += fr.size
	}
	return ex, nil
}

// initLength is the size of the ftyp and moov boxes at the start of a segment.
func initLength(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var off int64
	var hdr [8]byte
	for i := 0; i < 4; i++ {
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			return 0, err
		}
		if string(hdr[4:]) == "moof" {
			return off, nil
		}
		n := int64(binary.BigEndian.Uint32(hdr[:4]))
		if n < 8 {
			return 0, fmt.Errorf("%s: bad box at %d", path, off)
		}
		off += n
	}
	return 0, fmt.Errorf("%s: no fragment after the init", path)
}

func (ex *export) writeTo(w io.Writer) error {
	for _, p := range ex.parts {
		f, err := os.Open(p.path)
		if err != nil {
			return err
		}
		_, err = io.Copy(w, io.NewSectionReader(f, p.off, p.size))
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// Export writes the MP4 of [from, to] (Unix ms) for camera id to w.
func (s *Store) Export(id string, from, to int64, w io.Writer) (int64, error) {
	ex, err := s.planExport(id, uint64(from)*90, uint64(to)*90)
	if err != nil {
		return 0, err
	}
	return ex.size, ex.writeTo(w)
}
