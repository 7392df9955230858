package record

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/Eyevinn/mp4ff/mp4"

	"github.com/petrel-sfu/petrel/protocol"
)

// A room recording exports as one fragmented MP4 holding every track: the
// init declares one track per recorded track (its sample entry copied from
// the track's first segment), and the fragments of all tracks follow in time
// order, each rewritten under its track's new id with decode times counted
// from the recording's first sample (so that players show 0:00 at the start
// and every track keeps its place). Samples are copied, never re-encoded.

type exportFrag struct {
	track uint32
	path  string
	fr    Frag
}

// ExportRoom writes recording id as one MP4 file with every track to w.
func (r *Recorder) ExportRoom(id string, w io.Writer) error {
	rr, err := r.roomRecording(id)
	if err != nil {
		return err
	}
	info := rr.snapshot()
	init := mp4.CreateEmptyInit()
	var frags []exportFrag
	base := ^uint64(0)
	for _, t := range info.Tracks {
		c := rr.store.lookup(t.Key)
		if c == nil {
			continue
		}
		c.mu.Lock()
		var mine []exportFrag
		first := ""
		for _, seg := range c.segs {
			for _, fr := range seg.Frags {
				if first == "" {
					first = seg.Path
				}
				mine = append(mine, exportFrag{path: seg.Path, fr: fr})
			}
		}
		c.mu.Unlock()
		if first == "" {
			continue
		}
		entry, media, err := sampleEntryOf(first)
		if err != nil {
			return fmt.Errorf("track %s: %w", t.Key, err)
		}
		init.AddEmptyTrack(clock, media, "und")
		trak := init.Moov.Traks[len(init.Moov.Traks)-1]
		trak.Mdia.Minf.Stbl.Stsd.AddChild(entry)
		if v, ok := entry.(*mp4.VisualSampleEntryBox); ok {
			trak.Tkhd.Width, trak.Tkhd.Height = mp4.Fixed32(uint32(v.Width)<<16), mp4.Fixed32(uint32(v.Height)<<16)
		}
		for i := range mine {
			mine[i].track = trak.Tkhd.TrackID
			base = min(base, mine[i].fr.T)
		}
		frags = append(frags, mine...)
	}
	if len(frags) == 0 {
		return protocol.Errorf(protocol.CodeNotFound, "recording %q has nothing recorded", id)
	}
	sort.SliceStable(frags, func(i, j int) bool { return frags[i].fr.T < frags[j].fr.T })
	bw := bufio.NewWriterSize(w, 256<<10)
	if err := init.Encode(bw); err != nil {
		return err
	}
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for i, x := range frags {
		f := files[x.path]
		if f == nil {
			if f, err = os.Open(x.path); err != nil {
				return err
			}
			files[x.path] = f
		}
		ss, err := readFragment(f, x.fr)
		if err != nil {
			return fmt.Errorf("%s: %w", x.path, err)
		}
		out, err := mp4.CreateFragment(uint32(i+1), x.track)
		if err != nil {
			return err
		}
		for _, s := range ss {
			flags := mp4.NonSyncSampleFlags
			if s.key {
				flags = mp4.SyncSampleFlags
			}
			out.AddFullSample(mp4.FullSample{Sample: mp4.NewSample(flags, s.dur, uint32(len(s.data)), 0), DecodeTime: s.t - base, Data: s.data})
		}
		if err := out.Encode(bw); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// sampleEntryOf reads a segment's init and returns its track's sample entry
// and media type ("video" or "audio").
func sampleEntryOf(path string) (mp4.Box, string, error) {
	n, err := initLength(path)
	if err != nil {
		return nil, "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, "", err
	}
	mf, err := mp4.DecodeFile(bytes.NewReader(b))
	if err != nil {
		return nil, "", err
	}
	if mf.Init == nil || mf.Init.Moov == nil || mf.Init.Moov.Trak == nil {
		return nil, "", fmt.Errorf("%s: no track in the init", path)
	}
	trak := mf.Init.Moov.Trak
	stsd := trak.Mdia.Minf.Stbl.Stsd
	if stsd == nil || len(stsd.Children) == 0 {
		return nil, "", fmt.Errorf("%s: no sample entry", path)
	}
	media := "video"
	if trak.Mdia.Hdlr != nil && trak.Mdia.Hdlr.HandlerType == "soun" {
		media = "audio"
	}
	return stsd.Children[0], media, nil
}
