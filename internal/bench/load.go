package bench

import (
	"context"
	"fmt"
	"os/exec"
)

// busyLoad keeps n processes spinning on the CPU, as a trainer's data
// loaders or a noisy neighbour do, until stop is called. Each is a shell
// loop at normal priority: the sidecars compete with it for every core.
type busyLoad struct {
	cmds []*exec.Cmd
}

func startLoad(ctx context.Context, n int) (*busyLoad, error) {
	l := &busyLoad{}
	for range n {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			l.stop()
			return nil, fmt.Errorf("start load: %w", err)
		}
		l.cmds = append(l.cmds, cmd)
	}
	return l, nil
}

func (l *busyLoad) stop() {
	for _, c := range l.cmds {
		_ = c.Process.Kill()
		_ = c.Wait() // killed: its exit status says so
	}
	l.cmds = nil
}
