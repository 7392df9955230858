package sfu

import (
	"github.com/petrel-sfu/petrel/protocol"
)

// RecordControl starts (start true) or stops the recording of room on behalf
// of by (an identity), answering what the client is told about the recording.
// The recorder (record/) sets it; the room checks the grant before calling it.
type RecordControl func(room *Room, by string, start bool) (protocol.RoomRecording, error)

// SetRecordControl installs the recorder's control (nil: recording is off).
func (m *Manager) SetRecordControl(fn RecordControl) {
	if fn == nil {
		m.recordCtl.Store(nil)
		return
	}
	m.recordCtl.Store(&fn)
}

// Record starts or stops the recording of p's room, if p's token holds the
// record grant.
func (p *Participant) Record(start bool) (protocol.RoomRecording, error) {
	if !p.Grants().Record {
		return protocol.RoomRecording{}, protocol.Errorf(protocol.CodeForbidden, "the token does not allow recording (record grant)")
	}
	fn := p.room.mgr.recordCtl.Load()
	if fn == nil {
		return protocol.RoomRecording{}, protocol.Errorf(protocol.CodeNotFound, "recording is not enabled on this server (recording.dir)")
	}
	return (*fn)(p.room, p.identity, start)
}
