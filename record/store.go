package record

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/petrel-sfu/petrel/protocol"
)

// Store holds every camera's segments under Dir/<camera id>/ and enforces
// retention by age and by total size over all cameras.
type Store struct {
	dir      string
	maxAge   time.Duration
	maxBytes int64
	log      *slog.Logger

	mu   sync.Mutex
	cams map[string]*camStore
}

// camStore is one camera's segments, oldest first.
type camStore struct {
	id   string
	dir  string
	mu   sync.Mutex
	segs []*Segment
}

// OpenStore loads (and repairs) what earlier runs recorded in dir.
func OpenStore(dir string, maxAge time.Duration, maxBytes int64, log *slog.Logger) (*Store, error) {
	if err := makeDirDurable(dir); err != nil {
		return nil, fmt.Errorf("recording dir: %w", err)
	}
	s := &Store{dir: dir, maxAge: maxAge, maxBytes: maxBytes, log: log, cams: map[string]*camStore{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !e.IsDir() || !validID(e.Name()) {
			continue
		}
		c := s.cam(e.Name())
		if err := c.load(log); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// validID is the camera id convention; it also keeps ids from naming paths
// outside the recording directory.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0) {
			return false
		}
	}
	return true
}

func (s *Store) cam(id string) *camStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cams[id]
	if c == nil {
		c = &camStore{id: id, dir: filepath.Join(s.dir, id)}
		s.cams[id] = c
	}
	return c
}

// lookup returns the camera's store, nil when nothing was ever recorded.
func (s *Store) lookup(id string) *camStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cams[id]
}

func (c *camStore) load(log *slog.Logger) error {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, ".idx.tmp") {
			_ = os.Remove(filepath.Join(c.dir, name))
			continue
		}
		if e.IsDir() || !strings.HasSuffix(name, ".mp4") {
			continue
		}
		path := filepath.Join(c.dir, name)
		seg, err := openSegment(path)
		if err != nil {
			log.Warn("recording segment unreadable, skipped", "path", path, "err", err)
			continue
		}
		if len(seg.Frags) == 0 {
			// Died before its first fragment: nothing to keep.
			log.Info("empty recording segment removed", "path", path)
			_ = os.Remove(path)
			_ = os.Remove(indexPath(path))
			continue
		}
		c.segs = append(c.segs, seg)
	}
	sort.Slice(c.segs, func(i, j int) bool { return c.segs[i].Start < c.segs[j].Start })
	return nil
}

func (c *camStore) add(seg *Segment) {
	c.mu.Lock()
	c.segs = append(c.segs, seg)
	sort.Slice(c.segs, func(i, j int) bool { return c.segs[i].Start < c.segs[j].Start })
	c.mu.Unlock()
}

// appendFrag publishes a written fragment to readers.
func (c *camStore) appendFrag(seg *Segment, fr Frag) {
	c.mu.Lock()
	seg.Frags = append(seg.Frags, fr)
	seg.Size = fr.Off + fr.Size
	c.mu.Unlock()
}

// appendAudio publishes a written audio fragment.
func (c *camStore) appendAudio(seg *Segment, fr Frag) {
	c.mu.Lock()
	seg.Audio = append(seg.Audio, fr)
	seg.Size = fr.Off + fr.Size
	c.mu.Unlock()
}

func (c *camStore) closeSeg(seg *Segment) {
	c.mu.Lock()
	seg.open = false
	c.mu.Unlock()
}

// Range is a stretch of continuous recording in Unix milliseconds.
type Range = protocol.Range

// gapTicks joins fragments closer than this into one range (frame timing jitter).
const gapTicks = clock / 2

// Ranges lists the camera's recorded time ranges, oldest first.
func (s *Store) Ranges(id string) []Range {
	c := s.lookup(id)
	out := []Range{}
	if c == nil {
		return out
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var cur *Range
	for _, seg := range c.segs {
		for _, fr := range seg.Frags {
			from, to := int64(fr.T/90), int64(fr.End()/90)
			if cur != nil && from*90 <= cur.To*90+gapTicks {
				cur.To = max(cur.To, to)
				continue
			}
			out = append(out, Range{From: from, To: to})
			cur = &out[len(out)-1]
		}
	}
	return out
}

// pos names one fragment of one segment.
type pos struct {
	seg  *Segment
	frag int
}

// seekKey finds the fragment holding the last keyframe at or before t, or, when
// t lies in a gap or before the recording, the first keyframe after t.
func (c *camStore) seekKey(t uint64) (pos, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best pos
	found := false
	for _, seg := range c.segs {
		if seg.Start > t && found {
			break
		}
		for i, fr := range seg.Frags {
			if !fr.Key {
				continue
			}
			if fr.T <= t {
				best, found = pos{seg, i}, true
				continue
			}
			if !found {
				return pos{seg, i}, true
			}
			return best, true
		}
	}
	return best, found
}

// next is the fragment after p (possibly in a later segment).
func (c *camStore) next(p pos) (pos, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.frag+1 < len(p.seg.Frags) {
		return pos{p.seg, p.frag + 1}, true
	}
	for i, seg := range c.segs {
		if seg == p.seg {
			for _, n := range c.segs[i+1:] {
				if len(n.Frags) > 0 {
					return pos{n, 0}, true
				}
			}
			return pos{}, false
		}
	}
	return pos{}, false
}

func (c *camStore) frag(p pos) Frag {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.seg.Frags[p.frag]
}

// Prune deletes the oldest closed segments beyond the age and size limits.
func (s *Store) Prune(now time.Time) {
	s.mu.Lock()
	cams := make([]*camStore, 0, len(s.cams))
	for _, c := range s.cams {
		cams = append(cams, c)
	}
	s.mu.Unlock()
	type cand struct {
		c   *camStore
		seg *Segment
	}
	var all []cand
	var total int64
	for _, c := range cams {
		c.mu.Lock()
		for _, seg := range c.segs {
			total += seg.Size
			if !seg.open {
				all = append(all, cand{c, seg})
			}
		}
		c.mu.Unlock()
	}
	sort.Slice(all, func(i, j int) bool { return all[i].seg.Start < all[j].seg.Start })
	cutoff := uint64(0)
	if s.maxAge > 0 {
		cutoff = uint64(now.Add(-s.maxAge).UnixMilli()) * 90
	}
	for _, x := range all {
		tooOld := s.maxAge > 0 && x.seg.End() < cutoff
		tooBig := s.maxBytes > 0 && total > s.maxBytes
		if !tooOld && !tooBig {
			break
		}
		x.c.remove(x.seg)
		total -= x.seg.Size
		if err := os.Remove(x.seg.Path); err != nil && !os.IsNotExist(err) {
			s.log.Warn("retention: remove segment", "path", x.seg.Path, "err", err)
		}
		_ = os.Remove(indexPath(x.seg.Path))
		s.log.Info("retention: segment removed", "camera", x.c.id, "path", x.seg.Path, "old", tooOld, "over_size", tooBig)
	}
}

// removeSegmentFiles deletes a segment and its index.
func removeSegmentFiles(path string) {
	_ = os.Remove(path)
	_ = os.Remove(indexPath(path))
}

func (c *camStore) remove(seg *Segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.segs {
		if x == seg {
			c.segs = append(c.segs[:i], c.segs[i+1:]...)
			return
		}
	}
}

// TotalBytes is the size of everything recorded.
func (s *Store) TotalBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, c := range s.cams {
		c.mu.Lock()
		for _, seg := range c.segs {
			n += seg.Size
		}
		c.mu.Unlock()
	}
	return n
}
