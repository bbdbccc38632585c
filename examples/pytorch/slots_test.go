package pytorch_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/localjob"
)

// TestTwoSlotMembersUnderLiveExec runs 2 workers of 2 slots, each a
// sidecar and `ringside exec --live` starting train.py once per slot, and
// SIGKILLs one slot's process: its member leaves the ring (the other
// member trains alone at world size 2), exec restarts that process alone,
// and the member comes back (world size 4), while the member's other
// process and exec itself live on.
func TestTwoSlotMembersUnderLiveExec(t *testing.T) {
	requireTorch(t)
	dir := logDir(t, "ringside-slots-")
	ctx := context.Background()
	job, err := localjob.Start(ctx, localjob.Config{
		Ringside: ringsideBin,
		Trainer: []string{ringsideBin, "exec", "--live", "--slots", "2", "--restart-backoff", "100ms", "--",
			python, "train.py", "--step-time", "0.05", "--collective-timeout", collectiveTimeout, "--measure-gns"},
		Job: "slots", Dir: dir,
		SidecarArgs: []string{"--settle", "300ms", "--slots", "2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	var ws []*localjob.Worker
	for range 2 {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		w, err := job.AddWorker(actx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	w0, w1 := ws[0], ws[1]
	steps := stepsAt(t, job)
	steps.await("both members train", 4, time.Time{}, w0.ID, w1.ID)

	slot0, slot1 := slotProcess(t, w1, 0), slotProcess(t, w1, 1)
	killed := time.Now()
	if err := syscall.Kill(-slot1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	steps.await("the other member trains without the one whose slot process died", 2, killed, w0.ID)
	out := time.Now()
	steps.await("the member is back once its slot process is", 4, out, w0.ID, w1.ID)
	t.Logf("%s left the ring %.3fs after its slot 1 was killed, and was back %.3fs after", w1.ID, out.Sub(killed).Seconds(), time.Since(killed).Seconds())

	if got := slotProcess(t, w1, 0); got != slot0 {
		t.Errorf("slot 0's process is %d, was %d: only the killed slot's process may be restarted", got, slot0)
	}
	if got := slotProcess(t, w1, 1); got == slot1 {
		t.Errorf("slot 1's process is still %d, the one killed", got)
	}
	select {
	case <-w1.Trainer().Done():
		t.Fatalf("exec ended with %d; it should have restarted the slot process", w1.Trainer().ExitCode())
	default:
	}
	// train.py --measure-gns: the heartbeats carry the gradient noise
	// scale, and the sidecar keeps it in the member's status.
	t0 := time.Now()
	if gns := awaitGNS(t, job, w0.ID); gns < 0 {
		t.Errorf("%s's status holds the gradient noise scale %g, want it finite and not negative", w0.ID, gns)
	} else {
		t.Logf("%s's gradient noise scale: %.1f samples (in its status %.3fs after the check began)", w0.ID, gns, time.Since(t0).Seconds())
	}
}

// awaitGNS watches member's status in etcd until it holds a gradient
// noise scale, and returns it.
func awaitGNS(t *testing.T, job *localjob.Job, member string) float64 {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: job.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := coordinator.DefaultConfig("default", "slots").Prefix() + "status/" + member
	resp, err := c.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	gnsOf := func(v []byte) (float64, bool) {
		st, err := record.DecodeStatus(v)
		if err != nil || st.GNS == nil {
			return 0, false
		}
		return *st.GNS, true
	}
	for _, kv := range resp.Kvs {
		if g, ok := gnsOf(kv.Value); ok {
			return g
		}
	}
	for wr := range c.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		for _, ev := range wr.Events {
			if g, ok := gnsOf(ev.Kv.Value); ok {
				return g
			}
		}
	}
	t.Fatalf("%s's status held no gradient noise scale within 30s", member)
	return 0
}

// steps follows the job's step lines.
type steps struct {
	t     *testing.T
	lines <-chan localjob.Line
}

func stepsAt(t *testing.T, job *localjob.Job) *steps { return &steps{t: t, lines: job.Lines()} }

// await waits until each of workers printed a step at world size world
// after since.
func (s *steps) await(what string, world int, since time.Time, workers ...string) {
	s.t.Helper()
	left := map[string]bool{}
	for _, w := range workers {
		left[w] = true
	}
	timeout := time.After(resumeBound + importBound) // + torch's import in the restarted process
	for len(left) > 0 {
		select {
		case l := <-s.lines:
			if l.Event == "" && l.World == world && l.Time().After(since) {
				delete(left, l.Worker)
			}
		case <-timeout:
			s.t.Fatalf("%s: no step at world size %d from %v", what, world, left)
		}
	}
}

// slotProcess returns the pid of the process exec runs for slot of w,
// waiting for it while it is restarted.
func slotProcess(t *testing.T, w *localjob.Worker, slot int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if pid := childWithEnv(w.Trainer().Pid(), "LOCAL_RANK="+strconv.Itoa(slot)); pid != 0 {
			return pid
		}
		time.Sleep(50 * time.Millisecond) // /proc has no event to wait for
	}
	t.Fatalf("%s: no process for slot %d under exec", w.ID, slot)
	return 0
}

// childWithEnv returns the pid of a child of parent whose environment holds
// kv, 0 when there is none.
func childWithEnv(parent int, kv string) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		env, err := os.ReadFile(filepath.Join(filepath.Dir(st), "environ"))
		if err != nil {
			continue
		}
		for _, e := range strings.Split(string(env), "\x00") {
			if e == kv {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
				return pid
			}
		}
	}
	return 0
}
