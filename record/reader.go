package record

import (
	"errors"
	"io"
	"os"
)

// reader walks a camera's recorded samples in decode order across fragments and
// segments, starting at a keyframe.
type reader struct {
	cam  *camStore
	p    pos
	have bool // p is valid
	buf  []sample
	i    int
	f    *os.File
	path string
}

var errNoRecording = errors.New("nothing recorded there")

// openAt positions a reader at the keyframe fragment at or before t (or the
// first one after t when t lies in a gap).
func (c *camStore) openAt(t uint64) (*reader, error) {
	p, ok := c.seekKey(t)
	if !ok {
		return nil, errNoRecording
	}
	rd := &reader{cam: c, p: p, have: true}
	if err := rd.load(); err != nil {
		rd.close()
		return nil, err
	}
	return rd, nil
}

func (rd *reader) load() error {
	if rd.f == nil || rd.path != rd.p.seg.Path {
		if rd.f != nil {
			rd.f.Close()
		}
		f, err := os.Open(rd.p.seg.Path)
		if err != nil {
			rd.f = nil
			return err
		}
		rd.f, rd.path = f, rd.p.seg.Path
	}
	ss, err := readFragment(rd.f, rd.cam.frag(rd.p))
	if err != nil {
		return err
	}
	rd.buf, rd.i = ss, 0
	return nil
}

// next returns the next sample; io.EOF at the end of what is recorded so far.
// A fragment that cannot be read (a disk error) is skipped to the next keyframe.
func (rd *reader) next() (sample, error) {
	for rd.i >= len(rd.buf) {
		np, ok := rd.cam.next(rd.p)
		if !ok {
			return sample{}, io.EOF
		}
		rd.p = np
		if err := rd.load(); err != nil {
			rd.buf, rd.i = nil, 0
			continue
		}
	}
	s := rd.buf[rd.i]
	rd.i++
	return s, nil
}

// peek returns the next sample without consuming it.
func (rd *reader) peek() (sample, error) {
	s, err := rd.next()
	if err == nil {
		rd.i--
	}
	return s, err
}

func (rd *reader) close() {
	if rd.f != nil {
		rd.f.Close()
		rd.f = nil
	}
}
