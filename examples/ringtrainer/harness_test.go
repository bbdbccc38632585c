package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/internal/loopback"
	"github.com/ringside/ringside/internal/testbin"
	"github.com/ringside/ringside/sidecar/gossip"
)

// awaitTimeout bounds every wait for a process's output or exit.
const awaitTimeout = 30 * time.Second

// cluster is a job of real processes: an embedded etcd, and per worker a
// `ringside sidecar` and a ringtrainer, each worker on its own loopback
// address (127.0.0.N), as pods get their own IPs.
type cluster struct {
	t         *testing.T
	endpoints []string
	port      int    // the trainers' data port base
	keyFile   string // the job's gossip key
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	key, err := gossip.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, endpoints: etcdtest.Start(t).Endpoints(), port: freePort(t), keyFile: keyFile}
}

// freePort returns a TCP port that was free on loopback a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// worker is one pod: a sidecar and its trainer.
type worker struct {
	id      string
	sidecar *proc
	trainer *proc
	out     *lineLog
	args    []string // the trainer's
}

// loopbackBlock is this test process's block of loopback addresses: other
// test packages run jobs at the same time.
var loopbackBlock = sync.OnceValues(loopback.Acquire)

// start runs worker n's sidecar and trainer; the trainer waits for the
// sidecar's socket by itself.
func (c *cluster) start(n int, trainerArgs ...string) *worker {
	c.t.Helper()
	addrs, err := loopbackBlock()
	if err != nil {
		c.t.Fatal(err)
	}
	id := fmt.Sprintf("w%d", n)
	socket := filepath.Join(c.t.TempDir(), id+".sock")
	w := &worker{id: id, out: newLineLog()}
	w.sidecar = startProc(c.t, id+" sidecar", ringsideBin, nil,
		"sidecar", "--job", "ringtrainer", "--etcd-endpoints", c.endpoints[0],
		"--member-id", id, "--advertise", addrs.Addr(n),
		"--socket", socket, "--gossip-port", "0", "--gossip-key-file", c.keyFile,
		"--settle", "100ms", "--node-watch=false", "--sysfs-root", c.t.TempDir())
	w.args = append([]string{"--socket", socket, "--port", fmt.Sprint(c.port), "--step-time", "20ms"}, trainerArgs...)
	w.trainer = startProc(c.t, id+" trainer", trainerBin, w.out, w.args...)
	return w
}

// restartTrainer starts w's trainer again beside its sidecar, as the
// kubelet restarts a crashed training container; it prints to the same
// output.
func (c *cluster) restartTrainer(w *worker) {
	c.t.Helper()
	w.trainer = startProc(c.t, w.id+" trainer (restarted)", trainerBin, w.out, w.args...)
}

// proc is a child process; its stderr is kept for the failure report.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stderr *testbin.Buffer
	done   chan struct{} // closed once it exited
}

func startProc(t *testing.T, name, bin string, stdout *lineLog, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), stderr: &testbin.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = cleanEnv()
	p.cmd.Stderr = p.stderr
	if stdout != nil {
		p.cmd.Stdout = stdout
	} else {
		p.cmd.Stdout = p.stderr
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait() //nolint:errcheck // the exit status is read from ProcessState
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if strings.Contains(p.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race", name)
		}
		if t.Failed() {
			t.Logf("--- %s stderr:\n%s", name, p.stderr.String())
			if stdout != nil {
				t.Logf("--- %s stdout:\n%s", name, stdout.text())
			}
		}
	})
	return p
}

// cleanEnv is this process's environment without the variables the
// trainer and the sidecar read, so the flags alone configure them.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "LOCAL_RANK" || k == "POD_NAME" || k == "POD_IP" || k == "NODE_NAME" || strings.HasPrefix(k, "RINGSIDE_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// awaitExit waits for p to exit and returns its exit code.
func (p *proc) awaitExit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(awaitTimeout):
		t.Fatalf("%s did not exit within %s", p.name, awaitTimeout)
		return -1
	}
}

// outLine is a trainer's stdout line: a step, or a ring event.
type outLine struct {
	Event      string  `json:"event"`
	Step       int64   `json:"step"`
	Generation int64   `json:"generation"`
	Rank       int     `json:"rank"`
	World      int     `json:"world"`
	SumOK      *bool   `json:"sum_ok"`
	T          float64 `json:"t"`
}

func (l outLine) isStep() bool { return l.Event == "" && l.SumOK != nil }

// lineLog collects a trainer's stdout as parsed lines. It never blocks
// the writer: a trainer stalled on its stdout would stall its ring.
type lineLog struct {
	mu      sync.Mutex
	raw     bytes.Buffer
	partial []byte
	lines   []outLine
	bad     []string
	changed chan struct{} // closed and replaced on every new line
}

func newLineLog() *lineLog { return &lineLog{changed: make(chan struct{})} }

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.raw.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		text := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		var line outLine
		if err := json.Unmarshal([]byte(text), &line); err != nil {
			l.bad = append(l.bad, text)
			continue
		}
		l.lines = append(l.lines, line)
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *lineLog) snapshot() ([]outLine, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines, l.changed
}

func (l *lineLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.raw.String()
}

// await returns the first line at or after *from that satisfies ok, and
// moves *from past it.
func (w *worker) await(t *testing.T, from *int, what string, ok func(outLine) bool) outLine {
	t.Helper()
	timeout := time.After(awaitTimeout)
	exited := false
	for {
		lines, changed := w.out.snapshot()
		for ; *from < len(lines); *from++ {
			if ok(lines[*from]) {
				*from++
				return lines[*from-1]
			}
		}
		if exited {
			t.Fatalf("%s: %s: the trainer exited first (code %d)", w.id, what, w.trainer.cmd.ProcessState.ExitCode())
		}
		select {
		case <-changed:
		case <-w.trainer.done: // look at what it printed last, once more
			exited = true
		case <-timeout:
			t.Fatalf("%s: %s: not within %s", w.id, what, awaitTimeout)
		}
	}
}

// awaitSteps waits for n more step lines at world size world.
func (w *worker) awaitSteps(t *testing.T, from *int, n, world int) []outLine {
	t.Helper()
	var got []outLine
	for range n {
		got = append(got, w.await(t, from, fmt.Sprintf("a step at world size %d", world), func(l outLine) bool {
			return l.isStep() && l.World == world
		}))
	}
	return got
}

// steps returns the step lines printed so far.
func (w *worker) steps() []outLine {
	lines, _ := w.out.snapshot()
	var out []outLine
	for _, l := range lines {
		if l.isStep() {
			out = append(out, l)
		}
	}
	return out
}

// firstAtWorld is the index, among w's step lines, of the first at
// world size world, or -1.
func (w *worker) firstAtWorld(world int) int {
	for i, l := range w.steps() {
		if l.World == world {
			return i
		}
	}
	return -1
}

// checkOutput asserts what holds for every trainer: well-formed lines,
// correct sums, and a step counter that only goes forward.
func (w *worker) checkOutput(t *testing.T) {
	t.Helper()
	w.out.mu.Lock()
	bad := w.out.bad
	w.out.mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("%s printed lines that are not JSON: %q", w.id, bad)
	}
	var last int64
	for _, l := range w.steps() {
		if !*l.SumOK {
			t.Errorf("%s: step %d has a wrong sum", w.id, l.Step)
		}
		if l.Step <= last {
			t.Errorf("%s: step %d after step %d: the step counter went back", w.id, l.Step, last)
		}
		if l.Rank < 0 || l.Rank >= l.World || l.Generation < 1 || l.T <= 0 {
			t.Errorf("%s: malformed step line %+v", w.id, l)
		}
		last = l.Step
	}
}

// checkNoStepLost asserts that w's steps are contiguous from its first
// step at world size from on: a drain loses no step.
func (w *worker) checkNoStepLost(t *testing.T, from int) {
	t.Helper()
	i := w.firstAtWorld(from)
	if i < 0 {
		t.Errorf("%s: no step at world size %d", w.id, from)
		return
	}
	steps := w.steps()[i:]
	for i := 1; i < len(steps); i++ {
		if steps[i].Step != steps[i-1].Step+1 {
			t.Errorf("%s: step %d (world %d) after step %d (world %d): a step was lost",
				w.id, steps[i].Step, steps[i].World, steps[i-1].Step, steps[i-1].World)
		}
	}
}
