package loadtest

import (
	"context"
	"errors"
)

// runJanus drives Janus's EchoTest, VideoRoom and Streaming plugins.
func (r *Runner) runJanus(ctx context.Context) error {
	return errors.New("janus target: not implemented yet")
}
