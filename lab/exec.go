package lab

import "os/exec"

// execCmd wraps exec.Cmd so Cancel can be called before or after Start.
type execCmd struct{ *exec.Cmd }

func (c *execCmd) Cancel() {
	if c.Process != nil && c.Cmd.Cancel != nil {
		c.Cmd.Cancel()
	}
}
