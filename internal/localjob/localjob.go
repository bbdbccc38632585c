// Package localjob runs a whole ringside job on one machine: an embedded
// etcd (or one the caller runs) and workers that are each a real `ringside sidecar` process plus a
// trainer process, every worker on its own loopback address (from a block
// no other job on the machine holds; see internal/loopback) as pods have
// their own IPs. The demo and the recovery benchmark drive it.
package localjob

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ringside/ringside/etcdserver"
	"github.com/ringside/ringside/internal/loopback"
	"github.com/ringside/ringside/sidecar/gossip"
	"github.com/ringside/ringside/trainer/client"
	"github.com/ringside/ringside/trainer/launch"
)

// Config describes the job.
type Config struct {
	// Ringside is the ringside binary the sidecars run; empty means this
	// executable.
	Ringside string
	// Trainer is the trainer command; each gets RINGSIDE_SOCKET and
	// LOCAL_RANK=0 in its environment. Empty runs sidecars alone.
	Trainer []string
	// Job names the job; Dir holds sockets and logs.
	Job, Dir string
	// SidecarArgs are extra `ringside sidecar` flags.
	SidecarArgs []string
	// Endpoints, when set, are the client URLs of an etcd the caller runs
	// (so that it can kill, freeze and restart it); Start then starts none.
	Endpoints []string
	// Place, when set, gives worker n its address and the command prefix
	// its sidecar and trainer run under (`ip netns exec NS`: a network
	// namespace per worker); unset, worker n gets a loopback address.
	Place func(n int) (addr string, wrap []string)
	// NodeSize, when above 0, has each NodeSize workers in turn run
	// their sidecars from a copy of Ringside of their own, as the pods of
	// one node share their image's pages and those of two nodes share
	// none. With every sidecar of a large job mapping one file, a kernel
	// walk over the mappings of one of its pages (memory reclaim, DAMON)
	// visits them all, with the page locked, and sidecars that fault it
	// in wait seconds for it: a machine of 128 nodes has no such page.
	// 0: every sidecar runs Ringside itself.
	NodeSize int
}

// gossipKeyFile is the job's gossip key, in Dir: Start makes a new one for
// every job, as a deployment gives each job a key of its own.
const gossipKeyFile = "gossip.key"

// Line is a line a trainer printed: the ring trainer's JSON lines, or
// Text, any other line (T is then when it was read).
type Line struct {
	Worker     string  `json:"-"`
	Text       string  `json:"-"`
	Event      string  `json:"event,omitempty"` // "ring" when a ring formed
	Step       int64   `json:"step"`
	Generation int64   `json:"generation"`
	Rank       int     `json:"rank"`
	World      int     `json:"world"`
	SumOK      bool    `json:"sum_ok"`
	T          float64 `json:"t"`
}

// Time is when the trainer printed the line.
func (l Line) Time() time.Time { return time.UnixMicro(int64(l.T * 1e6)) }

// Job is a running local job.
type Job struct {
	cfg   Config
	etcd  *etcdserver.Server // nil with Config.Endpoints
	addrs *loopback.Block
	lines chan Line

	// nodesMu guards nodes and copies apart from mu: a copy takes a
	// while to reach the disk, and the job's workers stay readable and
	// killable meanwhile.
	nodesMu sync.Mutex
	nodes   []string // node n's copy of Ringside (Config.NodeSize)
	copies  string   // their directory

	mu      sync.Mutex
	next    int
	workers map[string]*Worker // live
	all     []*Worker          // every worker started, for Close
	closing chan struct{}
	wg      sync.WaitGroup
}

// Worker is one sidecar and its trainer, each in its own process group.
type Worker struct {
	ID, Addr, Socket string
	API              *client.Client
	sidecar, trainer *launch.Process
}

// Start runs the embedded etcd. Workers come with AddWorker.
func Start(ctx context.Context, cfg Config) (*Job, error) {
	if cfg.Ringside == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.Ringside = self
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	key, err := gossip.NewKey()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, gossipKeyFile), []byte(key+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("gossip key: %w", err)
	}
	addrs, err := loopback.Acquire()
	if err != nil {
		return nil, err
	}
	var srv *etcdserver.Server
	if len(cfg.Endpoints) == 0 {
		if srv, err = etcdserver.Start(ctx, etcdserver.EphemeralConfig(filepath.Join(cfg.Dir, "etcd"))); err != nil {
			addrs.Release()
			return nil, err
		}
	}
	return &Job{cfg: cfg, etcd: srv, addrs: addrs, lines: make(chan Line, 1<<16), workers: map[string]*Worker{},
		closing: make(chan struct{})}, nil
}

// Endpoints are the etcd client URLs.
func (j *Job) Endpoints() []string {
	if j.etcd == nil {
		return j.cfg.Endpoints
	}
	return j.etcd.Endpoints()
}

// Lines delivers every trainer's output lines. Read it steadily: trainers
// print a line per step.
func (j *Job) Lines() <-chan Line { return j.lines }

// Workers returns the live workers by id.
func (j *Job) Workers() map[string]*Worker {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.workers)
}

// AddWorker starts a sidecar, waits until it serves its API, then starts
// its trainer.
func (j *Job) AddWorker(ctx context.Context) (*Worker, error) { return j.AddWorkerArgs(ctx, nil) }

// AddWorkerArgs is AddWorker with trainerArgs appended to this worker's
// trainer command (a straggler's --slow).
func (j *Job) AddWorkerArgs(ctx context.Context, trainerArgs []string) (*Worker, error) {
	j.mu.Lock()
	n := j.next
	j.next++
	j.mu.Unlock()
	w := &Worker{
		ID:     fmt.Sprintf("w%d", n),
		Addr:   j.addrs.Addr(n),
		Socket: filepath.Join(j.cfg.Dir, fmt.Sprintf("w%d.sock", n)),
	}
	var wrap []string
	if j.cfg.Place != nil {
		w.Addr, wrap = j.cfg.Place(n)
	}
	command := func(name string, args ...string) *exec.Cmd {
		all := append(append(wrap[:len(wrap):len(wrap)], name), args...)
		return exec.Command(all[0], all[1:]...)
	}
	w.API = client.New(w.Socket)
	args := append([]string{"sidecar", "--job", j.cfg.Job, "--etcd-endpoints", strings.Join(j.Endpoints(), ","),
		"--member-id", w.ID, "--advertise", w.Addr, "--socket", w.Socket, "--gossip-port", "0",
		"--gossip-key-file", filepath.Join(j.cfg.Dir, gossipKeyFile),
		"--node-watch=false", "--sysfs-root", j.cfg.Dir, "--log-format", "json",
		"--master-port", strconv.Itoa(j.addrs.MasterPort())}, j.cfg.SidecarArgs...)
	if len(j.cfg.Trainer) > 0 {
		// The member enters the ring when its trainer is up, as in a pod.
		args = append(args, "--await-trainer")
	}
	bin, err := j.executable(n)
	if err != nil {
		return nil, err
	}
	if w.sidecar, err = j.spawn(w.ID+".sidecar", command(bin, args...), ""); err != nil {
		return nil, err
	}
	if err := waitAPI(ctx, w); err != nil {
		w.sidecar.Kill()
		return nil, err
	}
	if len(j.cfg.Trainer) > 0 {
		tr := command(j.cfg.Trainer[0], append(j.cfg.Trainer[1:len(j.cfg.Trainer):len(j.cfg.Trainer)], trainerArgs...)...)
		tr.Env = append(os.Environ(), "RINGSIDE_SOCKET="+w.Socket, "LOCAL_RANK=0")
		if w.trainer, err = j.spawn(w.ID+".trainer", tr, w.ID); err != nil {
			w.sidecar.Kill()
			return nil, err
		}
	}
	j.mu.Lock()
	j.workers[w.ID] = w
	j.all = append(j.all, w)
	j.mu.Unlock()
	return w, nil
}

// waitAPI waits for the sidecar's socket to answer.
func waitAPI(ctx context.Context, w *Worker) error {
	for {
		select {
		case <-w.sidecar.Done():
			return fmt.Errorf("sidecar %s exited at start (code %d)", w.ID, w.sidecar.ExitCode())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if _, err := os.Stat(w.Socket); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond) // the socket appears once the sidecar has joined
	}
}

// spawn starts cmd with its stderr (and stdout, unless lines is set) in a
// log file; with lines set, stdout is parsed into Lines from that worker.
func (j *Job) spawn(name string, cmd *exec.Cmd, lines string) (*launch.Process, error) {
	logf, err := os.Create(filepath.Join(j.cfg.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	var stdout *os.File
	if lines == "" {
		cmd.Stdout = logf
	} else {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdout, stdout = w, r
		defer w.Close()
	}
	p, err := launch.StartProcess(cmd)
	if err != nil {
		logf.Close()
		if stdout != nil {
			stdout.Close()
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	// The process's stderr passes through this process (its last lines
	// are kept for its exit): the log stays open until it ended.
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		<-p.Done()
		logf.Close()
	}()
	if stdout != nil {
		j.wg.Add(1)
		go func() {
			defer j.wg.Done()
			defer stdout.Close()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var l Line
				if json.Unmarshal(sc.Bytes(), &l) != nil {
					l = Line{Text: sc.Text(), T: float64(time.Now().UnixMicro()) / 1e6}
				}
				l.Worker = lines
				select {
				case j.lines <- l:
				case <-j.closing:
					return
				}
			}
		}()
	}
	return p, nil
}

// SidecarPID is the sidecar process's id.
func (w *Worker) SidecarPID() int { return w.sidecar.Pid() }

// Sidecar is the sidecar's process, for faults that hit it alone.
func (w *Worker) Sidecar() *launch.Process { return w.sidecar }

// Trainer is the trainer's process, nil when the job runs none.
func (w *Worker) Trainer() *launch.Process { return w.trainer }

// procs are the worker's running processes.
func (w *Worker) procs() []*launch.Process {
	if w.trainer == nil {
		return []*launch.Process{w.sidecar}
	}
	return []*launch.Process{w.sidecar, w.trainer}
}

// Kill SIGKILLs the worker's sidecar and trainer, as a lost pod, waits
// until both have exited, and returns when the signals were sent.
func (j *Job) Kill(w *Worker) (killed time.Time) {
	j.forget(w)
	// Both at once, as a pod is lost, then wait for both.
	w.sigkill()
	killed = time.Now()
	w.wait()
	return killed
}

// sigkill sends SIGKILL to the worker's processes, without waiting.
func (w *Worker) sigkill() {
	for _, p := range w.procs() {
		p.Signal(syscall.SIGKILL) //nolint:errcheck // one already gone is what a kill wants
	}
}

// wait waits until the worker's processes have exited.
func (w *Worker) wait() {
	for _, p := range w.procs() {
		<-p.Done()
	}
}

// KillTrainer SIGKILLs the worker's trainer process alone, its sidecar
// alive: a crashed training script. The worker trains no more (its
// sidecar takes it out of the ring); Kill it afterwards.
func (j *Job) KillTrainer(w *Worker) error {
	if w.trainer == nil {
		return fmt.Errorf("%s runs no trainer", w.ID)
	}
	j.forget(w)
	if err := w.trainer.SignalProcess(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill the trainer of %s: %w", w.ID, err)
	}
	<-w.trainer.Done()
	return nil
}

// KillScript SIGKILLs the script that the worker's trainer command,
// `ringside exec`, runs: the oldest of exec's children (any other is a
// warm process waiting to run the next one). exec restarts it, so the
// worker stays in the job.
func (j *Job) KillScript(w *Worker) error {
	if w.trainer == nil {
		return fmt.Errorf("%s runs no trainer", w.ID)
	}
	pid, err := oldestChild(w.trainer.Pid())
	if err != nil {
		return fmt.Errorf("the script of %s: %w", w.ID, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill the script of %s (pid %d): %w", w.ID, pid, err)
	}
	return nil
}

// oldestChild returns the child of pid that started first. The kernel
// lists children by the thread that forked them: every thread's count.
func oldestChild(pid int) (int, error) {
	lists, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil || len(lists) == 0 {
		return 0, fmt.Errorf("process %d: no task list", pid)
	}
	var children []string
	for _, l := range lists {
		b, _ := os.ReadFile(l) // a thread that exited meanwhile has none
		children = append(children, strings.Fields(string(b))...)
	}
	oldest, start := 0, uint64(math.MaxUint64)
	for _, f := range children {
		child, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue // exited meanwhile
		}
		// Field 22, starttime, counted after the command's closing parenthesis.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 20 {
			continue
		}
		if t, err := strconv.ParseUint(fields[19], 10, 64); err == nil && t < start {
			oldest, start = child, t
		}
	}
	if oldest == 0 {
		return 0, fmt.Errorf("process %d has no children", pid)
	}
	return oldest, nil
}

// Freeze SIGSTOPs the worker's processes: a silent peer, like a lost node.
// Kill it afterwards.
func (j *Job) Freeze(w *Worker) {
	j.forget(w)
	for _, p := range w.procs() {
		p.Signal(syscall.SIGSTOP) //nolint:errcheck // one already gone is frozen enough
	}
}

// Drain SIGTERMs the worker's sidecar, as Kubernetes does on preemption,
// and returns at once: the sidecar drains and its trainer follows. Wait
// tells how they ended.
func (j *Job) Drain(w *Worker) error {
	j.forget(w)
	if err := w.sidecar.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("drain of %s: %w", w.ID, err)
	}
	return nil
}

// Wait waits until the worker's sidecar and trainer both ended and returns
// their exit codes (the trainer's is 0 when it has none).
func (w *Worker) Wait(ctx context.Context) (trainer, sidecar int, err error) {
	for _, p := range w.procs() {
		select {
		case <-p.Done():
		case <-ctx.Done():
			return -1, -1, fmt.Errorf("%s still running: %w", w.ID, ctx.Err())
		}
	}
	if w.trainer != nil {
		trainer = w.trainer.ExitCode()
	}
	return trainer, w.sidecar.ExitCode(), nil
}

func (j *Job) forget(w *Worker) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.workers, w.ID)
}

// executable returns the binary worker n's sidecar runs: Ringside, or its
// node's copy of it (Config.NodeSize), made on first use.
func (j *Job) executable(n int) (string, error) {
	if j.cfg.NodeSize <= 0 {
		return j.cfg.Ringside, nil
	}
	node := n / j.cfg.NodeSize
	j.nodesMu.Lock()
	defer j.nodesMu.Unlock()
	if node < len(j.nodes) {
		return j.nodes[node], nil
	}
	if j.copies == "" {
		// Not in Dir: that may be kept, and these are tens of MiB each.
		dir, err := os.MkdirTemp("", "ringside-nodes-")
		if err != nil {
			return "", err
		}
		j.copies = dir
	}
	for len(j.nodes) <= node {
		dst := filepath.Join(j.copies, fmt.Sprintf("node%d", len(j.nodes)), "ringside")
		if err := copyExecutable(j.cfg.Ringside, dst); err != nil {
			return "", fmt.Errorf("copy of the executable for node %d: %w", len(j.nodes), err)
		}
		j.nodes = append(j.nodes, dst)
	}
	return j.nodes[node], nil
}

// copyExecutable copies the file src to dst, executable, and waits until
// it is on disk. A node's image was pulled long before its pods start; a
// copy still being written back would keep its pages locked while the
// kernel writes them, and a sidecar faulting one in would stall for as
// long (seconds, on a busy disk), which no node sees.
func copyExecutable(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// Close kills every worker (frozen ones too), stops etcd and waits for the
// output readers.
func (j *Job) Close() {
	close(j.closing)
	j.mu.Lock()
	all := j.all
	j.mu.Unlock()
	// Every process at once, then wait for them: one by one, each death
	// would set off a re-formation among all the others still alive.
	for _, w := range all {
		j.forget(w)
		w.sigkill()
	}
	for _, w := range all {
		w.wait()
		w.API.Close()
	}
	if j.etcd != nil {
		j.etcd.Close()
	}
	j.wg.Wait()
	j.addrs.Release()
	j.nodesMu.Lock()
	defer j.nodesMu.Unlock()
	if j.copies != "" {
		os.RemoveAll(j.copies) //nolint:errcheck // a temporary directory
	}
}
