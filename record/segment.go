package record

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/Eyevinn/mp4ff/mp4"
)

// A segment is one self-contained fragmented MP4 file: ftyp+moov (the init, with
// the SPS/PPS of its first keyframe), then moof+mdat fragments, each a GOP (or
// at most a second of one). Decode times are wall-clock: 90 kHz ticks since the
// Unix epoch, so a file alone says when it was recorded. Every fragment is
// written with one write(2) as soon as it is complete, so a kill -9 tears at most
// the fragment being written, and only the open segment lacks its index file.

// clock is the video timescale; decode times are Unix time in these units.
const clock = 90000

// The audio track: track 2 of a segment whose init declares it, timescale 48
// kHz whatever the codec: Opus ("Encapsulation of Opus in ISO Base Media File
// Format", sample entry Opus with a dOps box), G.711 (the QuickTime/ISO 'ulaw'
// and 'alaw' sample entries) or AAC ('mp4a' with an esds holding the
// camera's AudioSpecificConfig). docs/recording.md.
const (
	audioTrackID = 2
	audioClock   = 48000
)

// Frag indexes one fragment of a segment.
type Frag struct {
	T    uint64 `json:"t"`  // decode time of the first sample (90 kHz Unix time)
	Dur  uint64 `json:"d"`  // sum of its sample durations
	Off  int64  `json:"o"`  // byte offset of the moof
	Size int64  `json:"s"`  // moof+mdat bytes
	N    int    `json:"n"`  // samples
	Key  bool   `json:"k"`  // the first sample is a keyframe (fragments start on one when they can)
	KeyN int    `json:"kn"` // keyframe sample index (0; kept so the index names the sample)
}

// End is the decode time just after the fragment's last sample.
func (f Frag) End() uint64 { return f.T + f.Dur }

// Segment is one recorded file and its index.
type Segment struct {
	Path  string `json:"-"`
	Start uint64 `json:"start"`
	Size  int64  `json:"size"`
	Frags []Frag `json:"frags"`
	// Audio indexes the audio fragments (track 2, Opus, decode times in 48 kHz
	// Unix time), interleaved in the file with the video ones. Playback reads
	// Frags only; exports copy both.
	Audio []Frag `json:"audio,omitempty"`
	// ACodec is the audio's codec ("opus", "pcmu", "pcma", "aac"); "" with
	// audio is Opus (indexes written before G.711 and AAC were recorded).
	ACodec string `json:"acodec,omitempty"`
	// open is true while the recorder still appends to it.
	open bool
}

// End is the decode time after the last indexed sample.
func (s *Segment) End() uint64 {
	if len(s.Frags) == 0 {
		return s.Start
	}
	return s.Frags[len(s.Frags)-1].End()
}

func segmentName(start uint64) string { return strconv.FormatUint(start/90, 10) + ".mp4" }

func indexPath(p string) string { return strings.TrimSuffix(p, ".mp4") + ".idx" }

// writeIndex stores the segment's index beside it, atomically and durably
// (synced temp, rename, synced directory: durable.go), so the next start need
// not scan the file.
func (s *Segment) writeIndex() error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := indexPath(s.Path) + ".tmp"
	if err := writeFileDurable(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, indexPath(s.Path)); err != nil {
		return err
	}
	return syncDir(filepath.Dir(s.Path))
}

// openSegment loads a closed segment's index, or rebuilds it by scanning the file
// when the index is missing or does not match (the segment being written when the
// server died). A torn tail is cut off so that the file stays a valid MP4.
func openSegment(path string) (*Segment, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if b, err := os.ReadFile(indexPath(path)); err == nil {
		var s Segment
		if json.Unmarshal(b, &s) == nil && s.Size == st.Size() && len(s.Frags) > 0 {
			s.Path = path
			return &s, nil
		}
	}
	s, good, err := scanSegment(path)
	if err != nil {
		return nil, err
	}
	if good < st.Size() {
		if err := truncateDurable(path, good); err != nil {
			return nil, fmt.Errorf("truncate torn segment: %w", err)
		}
	}
	if len(s.Frags) == 0 {
		return s, nil
	}
	if err := s.writeIndex(); err != nil {
		return nil, err
	}
	return s, nil
}

// scanSegment walks the top-level boxes and indexes every complete moof+mdat
// pair; good is the length of the valid prefix.
func scanSegment(path string) (s *Segment, good int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := st.Size()
	s = &Segment{Path: path}
	var off int64
	var hdr [8]byte
	var moof *mp4.MoofBox
	var moofOff int64
	sawMoov := false
	for off+8 <= size {
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			break
		}
		bsize := int64(binary.BigEndian.Uint32(hdr[:4]))
		typ := string(hdr[4:8])
		if bsize < 8 || off+bsize > size {
			break // torn or garbage
		}
		switch typ {
		case "ftyp":
		case "moov":
			sawMoov = true
			if bsize < 1<<20 {
				b := make([]byte, bsize)
				if _, err := f.ReadAt(b, off); err == nil {
					s.ACodec = audioCodecIn(b)
				}
			}
		case "moof":
			if !sawMoov {
				return s, 0, nil
			}
			b := make([]byte, bsize)
			if _, err := f.ReadAt(b, off); err != nil {
				return s, good, nil
			}
			box, err := mp4.DecodeBox(uint64(off), bytes.NewReader(b))
			m, ok := box.(*mp4.MoofBox)
			if err != nil || !ok || m.Traf == nil || m.Traf.Tfdt == nil || m.Traf.Trun == nil {
				s.Size = good
				return s, good, nil
			}
			moof, moofOff = m, off
		case "mdat":
			if moof == nil {
				s.Size = good
				return s, good, nil
			}
			fr := fragFromMoof(moof)
			fr.Off, fr.Size = moofOff, off+bsize-moofOff
			if moof.Traf.Tfhd != nil && moof.Traf.Tfhd.TrackID == audioTrackID {
				s.Audio = append(s.Audio, fr)
			} else {
				if len(s.Frags) == 0 {
					s.Start = fr.T
				}
				s.Frags = append(s.Frags, fr)
			}
			moof = nil
		default:
			s.Size = good
			return s, good, nil
		}
		off += bsize
		if moof == nil {
			good = off
		}
	}
	if !sawMoov {
		good = 0
	}
	s.Size = good
	return s, good, nil
}

func fragFromMoof(m *mp4.MoofBox) Frag {
	tr := m.Traf.Trun
	fr := Frag{T: m.Traf.Tfdt.BaseMediaDecodeTime(), N: int(tr.SampleCount())}
	for i, smp := range tr.Samples {
		fr.Dur += uint64(smp.Dur)
		if i == 0 {
			fr.Key = !mp4.DecodeSampleFlags(smp.Flags).SampleIsNonSync
		}
	}
	return fr
}

// segWriter appends fragments to an open segment file.
type segWriter struct {
	f    *os.File
	seg  *Segment
	seq  uint32
	size int64 // bytes written; the Segment's copy is updated under the store's lock
	buf  bytes.Buffer
	init *mp4.InitSegment
}

// audioCodecIn names the audio sample entry a moov declares ("" if none).
func audioCodecIn(moov []byte) string {
	for _, c := range []struct{ fourcc, codec string }{{"Opus", "opus"}, {"ulaw", "pcmu"}, {"alaw", "pcma"}, {"mp4a", "aac"}} {
		if bytes.Contains(moov, []byte(c.fourcc)) {
			return c.codec
		}
	}
	return ""
}

func createSegment(dir string, start uint64, sps, pps []byte, width, height int, audio *AudioConf) (*segWriter, error) {
	init := mp4.CreateEmptyInit()
	init.AddEmptyTrack(clock, "video", "und")
	trak := init.Moov.Trak
	if err := trak.SetAVCDescriptor("avc1", [][]byte{sps}, [][]byte{pps}, true); err != nil {
		return nil, fmt.Errorf("avc descriptor: %w", err)
	}
	acodec := ""
	if audio != nil {
		init.AddEmptyTrack(audioClock, "audio", "und")
		var entry mp4.Box
		switch audio.Codec {
		case "pcmu", "pcma":
			name := map[string]string{"pcmu": "ulaw", "pcma": "alaw"}[audio.Codec]
			entry = mp4.CreateAudioSampleEntryBox(name, 1, 16, 8000, nil)
		case "aac":
			ch := audio.Channels
			if ch <= 0 {
				ch = 1
			}
			entry = mp4.CreateAudioSampleEntryBox("mp4a", uint16(ch), 16, uint16(min(audio.Rate, 65535)), mp4.CreateEsdsBox(audio.ASC))
		default:
			e, err := OpusSampleEntry()
			if err != nil {
				return nil, err
			}
			entry = e
		}
		init.Moov.Traks[1].Mdia.Minf.Stbl.Stsd.AddChild(entry)
		acodec = audio.Codec
	}
	return writeInit(dir, start, init, acodec)
}

// writeInit creates the segment file for a recording starting at start and
// writes its init (ftyp+moov).
func writeInit(dir string, start uint64, init *mp4.InitSegment, acodec string) (*segWriter, error) {
	path := filepath.Join(dir, segmentName(start))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, os.ErrExist) {
		// Two segments in the same millisecond (a camera restarting): the later wins a suffix-free name by moving on.
		start += 90
		path = filepath.Join(dir, segmentName(start))
		f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	}
	if err != nil {
		return nil, err
	}
	w := &segWriter{f: f, seg: &Segment{Path: path, Start: start, ACodec: acodec, open: true}, init: init}
	if err := init.Encode(&w.buf); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Write(w.buf.Bytes()); err != nil {
		f.Close()
		return nil, err
	}
	w.size = int64(w.buf.Len())
	w.seg.Size = w.size
	return w, nil
}

// OpusSampleEntry is the Opus sample entry with its dOps box (Opus in
// ISO-BMFF, section 4.3), for a track of timescale 48 kHz; the camera's HTTP
// live fallback (camera/live.go) declares its audio with it too: mp4ff v0.47.0 knows neither, so dOps is built from
// its bytes and carried as a box mp4ff does not interpret. Stereo, as WebRTC's
// opus/48000/2 is declared; pre-skip 312 (libopus' usual), no gain, mapping
// family 0.
func OpusSampleEntry() (mp4.Box, error) {
	dops := []byte{0, 0, 0, 19, 'd', 'O', 'p', 's',
		0,       // version
		2,       // output channel count
		1, 0x38, // pre-skip 312
		0, 0, 0xbb, 0x80, // input sample rate 48000
		0, 0, // output gain
		0, // channel mapping family
	}
	box, err := mp4.DecodeBox(0, bytes.NewReader(dops))
	if err != nil {
		return nil, fmt.Errorf("dOps: %w", err)
	}
	return mp4.CreateAudioSampleEntryBox("Opus", 2, 16, audioClock, box), nil
}

// sample is one access unit on its way to a fragment.
type sample struct {
	t    uint64 // decode time, 90 kHz Unix
	dur  uint32
	key  bool
	data []byte
}

// writeFragment writes samples as one moof+mdat with a single write and indexes it.
func (w *segWriter) writeFragment(ss []sample) (Frag, error) { return w.writeTrack(1, ss) }

// writeTrack writes samples of track id as one moof+mdat.
func (w *segWriter) writeTrack(id uint32, ss []sample) (Frag, error) {
	w.seq++
	frag, err := mp4.CreateFragment(w.seq, id)
	if err != nil {
		return Frag{}, err
	}
	fr := Frag{T: ss[0].t, Off: w.size, N: len(ss), Key: ss[0].key}
	for _, s := range ss {
		flags := mp4.NonSyncSampleFlags
		if s.key {
			flags = mp4.SyncSampleFlags
		}
		frag.AddFullSample(mp4.FullSample{Sample: mp4.NewSample(flags, s.dur, uint32(len(s.data)), 0), DecodeTime: s.t, Data: s.data})
		fr.Dur += uint64(s.dur)
	}
	w.buf.Reset()
	if err := frag.Encode(&w.buf); err != nil {
		return Frag{}, err
	}
	if _, err := w.f.Write(w.buf.Bytes()); err != nil {
		return Frag{}, err
	}
	fr.Size = int64(w.buf.Len())
	w.size += fr.Size
	return fr, nil
}

// close syncs the file and writes its index: from here on a crash cannot lose it.
func (w *segWriter) close() error {
	err := w.f.Sync()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if len(w.seg.Frags) > 0 {
		if ierr := w.seg.writeIndex(); err == nil {
			err = ierr
		}
	}
	return err
}

// readFragment reads one indexed fragment's samples (data freshly allocated).
func readFragment(r io.ReaderAt, fr Frag) ([]sample, error) {
	if fr.Size <= 16 || fr.Size > 64<<20 {
		return nil, fmt.Errorf("fragment size %d", fr.Size)
	}
	b := make([]byte, fr.Size)
	if _, err := r.ReadAt(b, fr.Off); err != nil {
		return nil, err
	}
	br := bytes.NewReader(b)
	box, err := mp4.DecodeBox(uint64(fr.Off), br)
	if err != nil {
		return nil, fmt.Errorf("moof: %w", err)
	}
	moof, ok := box.(*mp4.MoofBox)
	if !ok {
		return nil, fmt.Errorf("expected moof, found %s", box.Type())
	}
	box, err = mp4.DecodeBox(uint64(fr.Off)+moof.Size(), br)
	if err != nil {
		return nil, fmt.Errorf("mdat: %w", err)
	}
	mdat, ok := box.(*mp4.MdatBox)
	if !ok {
		return nil, fmt.Errorf("expected mdat, found %s", box.Type())
	}
	f := mp4.NewFragment()
	f.AddChild(moof)
	f.AddChild(mdat)
	fs, err := f.GetFullSamples(nil)
	if err != nil {
		return nil, err
	}
	out := make([]sample, len(fs))
	for i, s := range fs {
		out[i] = sample{t: s.DecodeTime, dur: s.Dur, key: !mp4.DecodeSampleFlags(s.Flags).SampleIsNonSync, data: s.Data}
	}
	return out, nil
}
