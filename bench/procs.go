package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ringside/ringside/sidecar/client"
)

// worker is one `ringside sidecar` process of a benchmark.
type worker struct {
	id     string
	cmd    *exec.Cmd
	api    *client.Client
	done   chan struct{}
	logDir string
}

// startSidecar runs the ringside binary as a sidecar of job on its own
// loopback address 127.0.0.(n+2), like a pod on its own IP.
func startSidecar(dir, endpoint, job string, n int, extra ...string) (*worker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	id := fmt.Sprintf("w%02d", n)
	socket := filepath.Join(dir, id+".sock")
	logf, err := os.Create(filepath.Join(dir, id+".log"))
	if err != nil {
		return nil, err
	}
	args := append([]string{"sidecar", "--job", job, "--etcd-endpoints", endpoint,
		"--member-id", id, "--advertise", loopbackAddr(n), "--socket", socket,
		"--gossip-port", "0", "--node-watch=false", "--sysfs-root", dir, "--log-format", "json"}, extra...)
	w := &worker{id: id, cmd: exec.Command(self, args...), api: client.New(socket), done: make(chan struct{}), logDir: dir}
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	if err := w.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { w.cmd.Wait(); logf.Close(); close(w.done) }()
	return w, nil
}

// loopbackAddr gives worker n an address of its own: 127.0.0.2 upwards.
func loopbackAddr(n int) string {
	return fmt.Sprintf("127.0.%d.%d", (n+2)/250, (n+2)%250+2)
}

func (w *worker) waitReady(ctx context.Context) error {
	for {
		select {
		case <-w.done:
			return fmt.Errorf("%s exited at start; see %s", w.id, filepath.Join(w.logDir, w.id+".log"))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", w.id, ctx.Err())
		default:
		}
		if w.api.Ready(ctx) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // the socket appears once the process has joined
	}
}

func (w *worker) kill() { w.cmd.Process.Kill(); <-w.done }

func (w *worker) signal(s syscall.Signal) { w.cmd.Process.Signal(s) }

// rssMiB reads the resident set size of pid.
func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuSeconds reads the user+system CPU time of pid.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}
