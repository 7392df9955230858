package probe

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// HTTPLive measures the HTTP live fallback (fragmented MP4 over HTTP): the
// first byte stands for first RTP, the first complete moof+mdat after the init
// segment (a keyframe: the server starts there) for the first complete frame.
func HTTPLive(ctx context.Context, url, token string) (Result, error) {
	return httpLive(ctx, url, token, 0)
}

// HTTPLiveFrames reads the stream until n fragments (frames) arrived and
// returns how many it got.
func HTTPLiveFrames(ctx context.Context, url, token string, n int) (Result, int, error) {
	r, err := httpLive(ctx, url, token, n)
	return r, r.frames, err
}

func httpLive(ctx context.Context, url, token string, want int) (Result, error) {
	start := time.Now()
	var res Result
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return res, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return res, fmt.Errorf("live.mp4: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return res, fmt.Errorf("live.mp4: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	res.AnswerArrived = time.Since(start)
	res.Codec = resp.Header.Get("Content-Type")
	br := bufio.NewReader(resp.Body)
	var hdr [8]byte
	sawMoov, inFragment := false, false
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return res, fmt.Errorf("live.mp4: %w", err)
		}
		if res.FirstRTP == 0 {
			res.FirstRTP = time.Since(start)
		}
		size := binary.BigEndian.Uint32(hdr[:4])
		typ := string(hdr[4:])
		if size < 8 || size > 64<<20 {
			return res, fmt.Errorf("live.mp4: box %q of %d bytes", typ, size)
		}
		if _, err := io.CopyN(io.Discard, br, int64(size-8)); err != nil {
			return res, fmt.Errorf("live.mp4: %w", err)
		}
		switch typ {
		case "moov":
			sawMoov = true
		case "moof":
			inFragment = sawMoov
		case "mdat":
			if inFragment {
				res.frames++
				if res.FirstFrame == 0 {
					res.FirstFrame = time.Since(start)
				}
				if res.frames >= want {
					return res, nil
				}
			}
			inFragment = false
		}
	}
}
