package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// Room recording: every track published in a recorded room, each into its own
// segments (roomtrack.go), under DIR/_rooms/<recording id>/<track key>/, with
// a manifest (recording.json) naming the room and, for each track key, whose
// track it is. Each recording directory is a Store of its own, so a crash is
// repaired as the cameras' are. A recording lasts from its start to its stop
// (the API, a participant with the record grant) or until the room closes.

// roomsDir holds room recordings; "_" keeps it apart from camera ids.
const roomsDir = "_rooms"

const manifestName = "recording.json"

// Events a room recording reports to the room's observer (webhooks), with the
// RoomRecording as their Info.
const (
	EventRecordingStarted  = "recording_started"
	EventRecordingFinished = "recording_finished"
)

// RoomRecording describes one room recording (its manifest); the type is the
// room protocol's, which answers startRecording with it.
type RoomRecording = protocol.RoomRecording

// RoomTrackInfo is one recorded track.
type RoomTrackInfo = protocol.RoomTrackInfo

type roomRec struct {
	dir   string
	store *Store

	mu      sync.Mutex
	info    RoomRecording
	room    *sfu.Room // the room instance recorded while active
	tracks  map[*sfu.Publication]*roomTrackRef
	skipped map[*sfu.Publication]bool
}

type roomTrackRef struct {
	t      *roomTrack
	remove func()
}

// recordingID names a recording after its room (reduced to the store's id
// alphabet) and its start.
func recordingID(room string, start time.Time) string {
	var b strings.Builder
	for _, c := range strings.ToLower(room) {
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			b.WriteRune(c)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	name := strings.Trim(b.String(), "-")
	if name == "" {
		name = "room"
	}
	return name + "-" + strconv.FormatInt(start.UnixMilli(), 10)
}

// StartRoom starts recording room name on behalf of by; a room already being
// recorded answers its current recording.
func (r *Recorder) StartRoom(name, by string) (RoomRecording, error) {
	room := r.mgr.Room(name)
	if room == nil {
		return RoomRecording{}, protocol.Errorf(protocol.CodeNotFound, "no room %q", name)
	}
	return r.startRoom(room, by)
}

func (r *Recorder) startRoom(room *sfu.Room, by string) (RoomRecording, error) {
	name := room.Name()
	if strings.HasPrefix(name, RoomPrefix) {
		return RoomRecording{}, protocol.Errorf(protocol.CodeBadRequest, "camera rooms are recorded as cameras (recording.cameras)")
	}
	if strings.HasPrefix(name, PlaybackRoomPrefix) {
		return RoomRecording{}, protocol.Errorf(protocol.CodeBadRequest, "a room where a recording plays back is not recorded")
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return RoomRecording{}, errors.New("recording is shutting down")
	}
	if rr := r.live[name]; rr != nil && rr.room == room {
		r.mu.Unlock()
		return rr.snapshot(), nil
	}
	now := time.Now()
	id := recordingID(name, now)
	for i := 2; r.rooms[id] != nil; i++ {
		id = recordingID(name, now) + "-" + strconv.Itoa(i)
	}
	dir := filepath.Join(r.cfg.Dir, roomsDir, id)
	rr := &roomRec{dir: dir, room: room, tracks: map[*sfu.Publication]*roomTrackRef{}, skipped: map[*sfu.Publication]bool{},
		info: RoomRecording{ID: id, Room: name, Start: now.UnixMilli(), Active: true, By: by, Tracks: []RoomTrackInfo{}}}
	err := makeDirDurable(filepath.Join(r.cfg.Dir, roomsDir))
	if err == nil {
		rr.store, err = OpenStore(dir, 0, 0, r.log)
	}
	if err == nil {
		err = rr.writeManifest()
	}
	if err != nil {
		r.mu.Unlock()
		return RoomRecording{}, fmt.Errorf("start recording %s: %w", name, err)
	}
	old := r.live[name]
	r.rooms[id], r.live[name] = rr, rr
	delete(r.noAuto, room)
	r.mu.Unlock()
	if old != nil {
		old.finish(r) // a former room of the same name
	}
	r.log.Info("room recording started", "room", name, "recording", id, "by", by)
	r.scanRoom(rr)
	info := rr.snapshot()
	r.mgr.Emit(sfu.Event{Kind: EventRecordingStarted, Room: room.Info(), Info: info})
	return info, nil
}

// StopRoom stops the recording of room name.
func (r *Recorder) StopRoom(name, by string) (RoomRecording, error) {
	r.mu.Lock()
	rr := r.live[name]
	if rr != nil {
		delete(r.live, name)
		if room := r.mgr.Room(name); room != nil {
			r.noAuto[room] = true // stopped by hand: the room setting does not restart it
		}
	}
	r.mu.Unlock()
	if rr == nil {
		return RoomRecording{}, protocol.Errorf(protocol.CodeNotFound, "room %q is not being recorded", name)
	}
	rr.finish(r)
	r.log.Info("room recording stopped", "room", name, "recording", rr.info.ID, "by", by)
	return rr.snapshot(), nil
}

// Control is the room's record grant's door (sfu.RecordControl).
func (r *Recorder) Control(room *sfu.Room, by string, start bool) (RoomRecording, error) {
	if start {
		return r.startRoom(room, by)
	}
	return r.StopRoom(room.Name(), by)
}

// scanRoom attaches to every track of the room not yet recorded and lets go
// of those unpublished. Tracks published after the start are found by the
// watch loop within its period; the sink's keyframe request starts them.
func (r *Recorder) scanRoom(rr *roomRec) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if !rr.info.Active {
		return
	}
	changed := false
	seen := map[*sfu.Publication]bool{}
	for _, p := range rr.room.Participants() {
		for _, pub := range p.Publications() {
			seen[pub] = true
			if rr.tracks[pub] != nil || rr.skipped[pub] {
				continue
			}
			asm, err := asmFor(pub.Codec())
			if err != nil {
				rr.skipped[pub] = true
				r.log.Warn("room recording: track not recorded", "room", rr.info.Room, "identity", p.Identity(), "track", pub.Sid(), "err", err)
				continue
			}
			key := "t" + strconv.Itoa(len(rr.info.Tracks)+1)
			ti := pub.Info()
			t := newRoomTrack(rr.store.cam(key), pub, asm, r.cfg.Segment,
				r.log.With("room", rr.info.Room, "recording", rr.info.ID, "track", pub.Sid()))
			go t.run()
			rr.tracks[pub] = &roomTrackRef{t: t, remove: pub.AddSink(t)}
			rr.info.Tracks = append(rr.info.Tracks, RoomTrackInfo{Key: key, Identity: p.Identity(), ParticipantSid: p.Sid(),
				TrackSid: pub.Sid(), Kind: ti.Kind, Source: ti.Source, MimeType: pub.Codec().MimeType})
			changed = true
		}
	}
	for pub, ref := range rr.tracks {
		if !seen[pub] {
			ref.remove()
			ref.t.stop()
			delete(rr.tracks, pub)
		}
	}
	for pub := range rr.skipped {
		if !seen[pub] {
			delete(rr.skipped, pub)
		}
	}
	if changed {
		if err := rr.writeManifest(); err != nil {
			r.log.Error("room recording: manifest", "recording", rr.info.ID, "err", err)
		}
	}
}

// scanRooms follows the recorded rooms (new tracks, closed rooms) and starts
// the recordings the configuration asks for.
func (r *Recorder) scanRooms() {
	r.mu.Lock()
	live := make([]*roomRec, 0, len(r.live))
	for _, rr := range r.live {
		live = append(live, rr)
	}
	r.mu.Unlock()
	for _, rr := range live {
		if cur := r.mgr.Room(rr.info.Room); cur != rr.room {
			r.mu.Lock()
			if r.live[rr.info.Room] == rr {
				delete(r.live, rr.info.Room)
			}
			r.mu.Unlock()
			rr.finish(r)
			r.log.Info("room recording finished: the room closed", "room", rr.info.Room, "recording", rr.info.ID)
			continue
		}
		r.scanRoom(rr)
	}
	rooms := r.mgr.Rooms()
	open := make(map[*sfu.Room]bool, len(rooms))
	for _, room := range rooms {
		open[room] = true
		if !r.cfg.RecordsRoom(room.Name()) {
			continue
		}
		r.mu.Lock()
		skip := r.noAuto[room] || (r.live[room.Name()] != nil && r.live[room.Name()].room == room)
		r.mu.Unlock()
		if !skip {
			if _, err := r.startRoom(room, "config"); err != nil {
				r.log.Error("room recording: start", "room", room.Name(), "err", err)
			}
		}
	}
	r.mu.Lock()
	for room := range r.noAuto {
		if !open[room] {
			delete(r.noAuto, room)
		}
	}
	r.mu.Unlock()
}

// finish detaches from every track, closing their segments, and records the end.
func (rr *roomRec) finish(r *Recorder) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if !rr.info.Active {
		return
	}
	for pub, ref := range rr.tracks {
		ref.remove()
		ref.t.stop()
		delete(rr.tracks, pub)
	}
	room := rr.room
	rr.info.Active, rr.info.End, rr.room = false, time.Now().UnixMilli(), nil
	if err := rr.writeManifest(); err != nil {
		r.log.Error("room recording: manifest", "recording", rr.info.ID, "err", err)
	}
	if room != nil {
		r.mgr.Emit(sfu.Event{Kind: EventRecordingFinished, Room: room.Info(), Info: rr.info})
	}
}

// writeManifest stores the manifest atomically and durably; rr.mu is held.
func (rr *roomRec) writeManifest() error {
	b, err := json.MarshalIndent(rr.info, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(rr.dir, manifestName)
	if err := writeFileDurable(p+".tmp", b); err != nil {
		return err
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return err
	}
	return syncDir(rr.dir)
}

// snapshot is the recording's description with each track's recorded ranges.
func (rr *roomRec) snapshot() RoomRecording {
	rr.mu.Lock()
	out := rr.info
	out.Tracks = append([]RoomTrackInfo(nil), rr.info.Tracks...)
	rr.mu.Unlock()
	for i := range out.Tracks {
		out.Tracks[i].Ranges = rr.store.Ranges(out.Tracks[i].Key)
	}
	return out
}

// loadRooms opens the room recordings earlier runs left (repairing what a
// crash tore, as for cameras); one that was recording when the server died
// ends where its tracks end.
func (r *Recorder) loadRooms() error {
	base := filepath.Join(r.cfg.Dir, roomsDir)
	ents, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() || !validRecordingID(e.Name()) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, manifestName))
		var info RoomRecording
		if err == nil {
			err = json.Unmarshal(b, &info)
		}
		if err != nil || info.ID != e.Name() {
			r.log.Warn("room recording without a readable manifest, skipped", "dir", dir, "err", err)
			continue
		}
		st, err := OpenStore(dir, 0, 0, r.log)
		if err != nil {
			r.log.Warn("room recording unreadable, skipped", "dir", dir, "err", err)
			continue
		}
		rr := &roomRec{dir: dir, store: st, info: info}
		if info.Active {
			// The server died while recording.
			rr.info.Active, rr.info.Crashed, rr.info.End = false, true, info.Start
			for _, t := range info.Tracks {
				for _, rg := range st.Ranges(t.Key) {
					rr.info.End = max(rr.info.End, rg.To)
				}
			}
			if err := rr.writeManifest(); err != nil {
				r.log.Warn("room recording: manifest", "dir", dir, "err", err)
			}
			r.log.Info("room recording recovered after a crash", "recording", info.ID, "room", info.Room)
		}
		r.rooms[info.ID] = rr
	}
	return nil
}

// validRecordingID is recordingID's alphabet (a room part, a dash, the start).
func validRecordingID(id string) bool {
	return len(id) <= 64 && validID(id)
}

// RoomRecordings lists every room recording, the newest first.
func (r *Recorder) RoomRecordings() []RoomRecording {
	r.mu.Lock()
	all := make([]*roomRec, 0, len(r.rooms))
	for _, rr := range r.rooms {
		all = append(all, rr)
	}
	r.mu.Unlock()
	out := make([]RoomRecording, 0, len(all))
	for _, rr := range all {
		out = append(out, rr.snapshot())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Start != out[j].Start {
			return out[i].Start > out[j].Start
		}
		return out[i].ID > out[j].ID
	})
	return out
}

func (r *Recorder) roomRecording(id string) (*roomRec, error) {
	r.mu.Lock()
	rr := r.rooms[id]
	r.mu.Unlock()
	if rr == nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "no recording %q", id)
	}
	return rr, nil
}

// RoomRecording describes recording id.
func (r *Recorder) RoomRecording(id string) (RoomRecording, error) {
	rr, err := r.roomRecording(id)
	if err != nil {
		return RoomRecording{}, err
	}
	return rr.snapshot(), nil
}

// DeleteRoomRecording stops recording id if it is active and deletes its files.
func (r *Recorder) DeleteRoomRecording(id string) error {
	rr, err := r.roomRecording(id)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if r.live[rr.info.Room] == rr {
		delete(r.live, rr.info.Room)
		if room := r.mgr.Room(rr.info.Room); room != nil {
			r.noAuto[room] = true
		}
	}
	r.mu.Unlock()
	rr.finish(r)
	if j := func() *compositeJob { r.mu.Lock(); defer r.mu.Unlock(); return r.composites[id] }(); j != nil {
		j.cancel()
		<-j.done
	}
	r.mu.Lock()
	delete(r.rooms, id)
	delete(r.composites, id)
	var plays []*roomSession
	for k, s := range r.roomSessions {
		if k.room == PlaybackRoomPrefix+id {
			plays = append(plays, s)
		}
	}
	r.mu.Unlock()
	for _, s := range plays {
		s.close()
	}
	if err := os.RemoveAll(rr.dir); err != nil {
		return fmt.Errorf("delete recording %s: %w", id, err)
	}
	_ = syncDir(filepath.Dir(rr.dir))
	r.log.Info("room recording deleted", "recording", id, "room", rr.info.Room)
	return nil
}

func (r *Recorder) closeRooms() {
	r.mu.Lock()
	live := make([]*roomRec, 0, len(r.live))
	for name, rr := range r.live {
		live = append(live, rr)
		delete(r.live, name)
	}
	r.mu.Unlock()
	for _, rr := range live {
		rr.finish(r)
	}
}
