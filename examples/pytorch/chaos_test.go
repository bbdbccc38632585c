// Package pytorch_test runs examples/pytorch/train.py in live mode next to
// real `ringside sidecar` processes on an embedded etcd, faults the workers
// and checks every line the trainers printed.
package pytorch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/ringside/ringside/coordinator/jobstatus"
	"github.com/ringside/ringside/internal/localjob"
	"github.com/ringside/ringside/internal/testbin"
)

// python is Debian's python3-torch interpreter.
const python = "/usr/bin/python3"

var (
	ringsideBin string
	// noTorch says why the PyTorch tests cannot run; empty when they can.
	noTorch string
)

func TestMain(m *testing.M) {
	out, err := exec.Command(python, "-c", "import torch.distributed as d; assert d.is_available()").CombinedOutput()
	if err != nil {
		noTorch = fmt.Sprintf("%s cannot import torch.distributed (%v: %s): install it with `apt-get install --no-install-recommends python3-torch` (make test does)",
			python, err, lastLine(out))
		goleak.VerifyTestMain(m)
	}
	os.Exit(testbin.WithRingside(m, &ringsideBin))
}

func lastLine(b []byte) string {
	s := string(b)
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			return s[i+1:]
		}
	}
	return s
}

// requireTorch skips a test where torch is missing, and fails it in CI,
// where a missing torch is a broken setup rather than a choice.
func requireTorch(t *testing.T) {
	t.Helper()
	if noTorch == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true: " + noTorch)
	}
	t.Skip(noTorch)
}

const (
	// resumeBound is how long any generation may take to train again: a
	// second or two typically. The collective timeout ends the collective
	// gloo (torch 1.13) sometimes leaves blocked after a connection
	// failure: a send waiting for a peer that went away is not failed with
	// the connection, here once in a few runs, right after a group formed.
	resumeBound = 30 * time.Second
	// importBound is how much longer a phase that starts a trainer may
	// take: a fresh interpreter imports torch in ~9 s on 2 idle cores, in
	// over 30 s while the rest of make test's packages run beside it.
	importBound       = 90 * time.Second
	collectiveTimeout = "10"
)

// chaos is a job under test and what its phases measured.
type chaos struct {
	t       *testing.T
	job     *localjob.Job
	tracker *localjob.Tracker
	etcd    *clientv3.Client
	lines   string
}

// resumed waits until every live worker stepped at world size world after
// since, within resumeBound, and returns how long that took.
func (c *chaos) resumed(what string, world int, since time.Time) time.Duration {
	c.t.Helper()
	return c.trainedWithin(resumeBound, what, world, since)
}

// joined is resumed for a phase that started a trainer: its bound has
// room for torch's import.
func (c *chaos) joined(what string, world int, since time.Time) time.Duration {
	c.t.Helper()
	return c.trainedWithin(resumeBound+importBound, what, world, since)
}

func (c *chaos) trainedWithin(bound time.Duration, what string, world int, since time.Time) time.Duration {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	done, err := c.tracker.AllStepAt(ctx, world, since)
	if err != nil {
		c.t.Fatalf("%s: the job did not train at world size %d within %s: %v (logs in %s)", what, world, bound, err, filepath.Dir(c.lines))
	}
	d := done.Sub(since)
	c.t.Logf("%s: every rank trained at world size %d after %.3fs", what, world, d.Seconds())
	return d
}

func (c *chaos) add() *localjob.Worker {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := c.job.AddWorker(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	return w
}

// leader returns the worker whose sidecar leads the job.
func (c *chaos) leader() *localjob.Worker {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := jobstatus.Read(ctx, c.etcd, "default", "chaos")
	if err != nil {
		c.t.Fatal(err)
	}
	w, ok := c.job.Workers()[s.Leader]
	if !ok {
		c.t.Fatalf("the leader %q is not a live worker", s.Leader)
	}
	return w
}

// TestLiveTrainingSurvivesChaos runs 4 workers, each a sidecar and
// train.py, through a SIGKILL of rank 0's worker, a scale-up, a SIGSTOP of
// the leader's worker, another scale-up and a SIGTERM drain, and checks:
// every generation trains again within a bound; all ranks hold the same
// parameters at every step and after every sync; no rank's step counter
// goes back past its last commit; the drain loses no step; the loss goes
// down.
func TestLiveTrainingSurvivesChaos(t *testing.T) {
	requireTorch(t)
	dir := logDir(t, "ringside-chaos-")
	c := &chaos{t: t, lines: filepath.Join(dir, "lines")}
	var err error
	ctx := context.Background()
	c.job, err = localjob.Start(ctx, localjob.Config{
		Ringside: ringsideBin,
		Trainer: []string{python, "train.py", "--step-time", "0.05", "--collective-timeout", collectiveTimeout,
			"--lines-dir", c.lines},
		Job: "chaos", Dir: dir,
		SidecarArgs: []string{"--settle", "300ms"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.job.Close()
	c.tracker = localjob.NewTracker(c.job)
	c.etcd, err = clientv3.New(clientv3.Config{Endpoints: c.job.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.etcd.Close()

	start := time.Now()
	for range 4 {
		c.add()
	}
	c.joined("start", 4, start)

	victim := c.tracker.ByRank(0)
	t0 := time.Now()
	c.job.Kill(victim)
	c.resumed("SIGKILL of rank 0 ("+victim.ID+")", 3, t0)

	t0 = time.Now()
	c.add()
	c.joined("scale-up to 4", 4, t0)

	frozen := c.leader()
	t0 = time.Now()
	c.job.Freeze(frozen)
	c.resumed("SIGSTOP of the leader's worker ("+frozen.ID+")", 3, t0)
	c.job.Kill(frozen)

	t0 = time.Now()
	c.add()
	c.joined("scale-up to 4 again", 4, t0)

	drained := c.tracker.ByRank(1)
	before := c.tracker.Last()
	t0 = time.Now()
	if err := c.job.Drain(drained); err != nil {
		t.Fatal(err)
	}
	c.resumed("SIGTERM drain of "+drained.ID, 3, t0)
	for id, first := range c.tracker.First() {
		if lost := before[id].Step + 1 - first.Step; lost > 0 {
			t.Errorf("drain: %s went on from step %d after completing step %d: %d steps lost", id, first.Step, before[id].Step, lost)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, resumeBound)
	defer cancel()
	if tr, sc, err := drained.Wait(dctx); err != nil {
		t.Error(err)
	} else if tr != 0 || sc != 0 {
		t.Errorf("drained worker exited with trainer %d, sidecar %d; want 0 and 0", tr, sc)
	}
	// Some more training, for the loss to go down.
	c.resumed("training on", 3, time.Now().Add(5*time.Second))

	checkLines(t, c.lines)
}

// trainerLine is a line train.py printed.
type trainerLine struct {
	Event      string  `json:"event"`
	Step       int64   `json:"step"`
	Generation int64   `json:"generation"`
	Rank       int     `json:"rank"`
	World      int     `json:"world"`
	Loss       float64 `json:"loss"`
	Checksum   string  `json:"checksum"`
	Member     string  `json:"member"`
	T          float64 `json:"t"`
}

// checkLines reads every trainer process's lines and checks the
// invariants that hold across ranks and generations.
func checkLines(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil || len(files) < 6 {
		t.Fatalf("want the lines of 6 trainer processes in %s, found %d (%v)", dir, len(files), err)
	}
	type at struct{ gen, step int64 }
	sums := map[at]map[string][]string{} // (generation, step) -> checksum -> members
	rings := map[int64]map[string][]string{}
	var all []trainerLine
	for _, f := range files {
		lines := readLines(t, f)
		var prev *trainerLine
		for i := range lines {
			l := &lines[i]
			if l.Event == "ring" {
				key := fmt.Sprintf("step %d checksum %s", l.Step, l.Checksum)
				if rings[l.Generation] == nil {
					rings[l.Generation] = map[string][]string{}
				}
				rings[l.Generation][key] = append(rings[l.Generation][key], l.Member)
				continue
			}
			if l.Event != "" {
				continue
			}
			k := at{l.Generation, l.Step}
			if sums[k] == nil {
				sums[k] = map[string][]string{}
			}
			sums[k][l.Checksum] = append(sums[k][l.Checksum], l.Member)
			// Every step a rank printed was committed; its next step is
			// the one after, or, in a later generation, a later one (a
			// rank a step behind when its group broke jumps to the
			// newest commit).
			if prev != nil && l.Step != prev.Step+1 && (l.Generation <= prev.Generation || l.Step <= prev.Step) {
				t.Errorf("%s went from step %d (generation %d) to step %d (generation %d): back past its last commit",
					l.Member, prev.Step, prev.Generation, l.Step, l.Generation)
			}
			prev = l
			all = append(all, *l)
		}
	}
	for k, v := range sums {
		if len(v) > 1 {
			t.Errorf("generation %d, step %d: ranks hold different parameters: %v", k.gen, k.step, v)
		}
	}
	for g, v := range rings {
		if len(v) > 1 {
			t.Errorf("generation %d: the ranks synced to different states: %v", g, v)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].T < all[j].T })
	if len(all) < 200 {
		t.Fatalf("only %d steps printed", len(all))
	}
	mean := func(ls []trainerLine) float64 {
		s := 0.0
		for _, l := range ls {
			s += l.Loss
		}
		return s / float64(len(ls))
	}
	early, late := mean(all[:50]), mean(all[len(all)-50:])
	t.Logf("%d step lines, %d generations synced; loss %.4f over the first 50 lines, %.4f over the last 50", len(all), len(rings), early, late)
	if late >= early/2 {
		t.Errorf("the loss did not go down: %.4f at first, %.4f at the end", early, late)
	}
}

func readLines(t *testing.T, path string) []trainerLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []trainerLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l trainerLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			continue // a line cut short by a SIGKILL
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		t.Fatal(err)
	}
	return out
}

// logDir makes a short temporary directory (unix socket paths are bounded)
// for a test's sidecar and trainer logs: removed after a pass, kept after a
// failure or with RINGSIDE_KEEP_LOGS set.
func logDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("RINGSIDE_KEEP_LOGS") != "" {
			t.Logf("sidecar and trainer logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}
