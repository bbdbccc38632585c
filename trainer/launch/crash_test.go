package launch_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar/sidecartest"
	"github.com/ringside/ringside/trainer/api"
	"github.com/ringside/ringside/trainer/client"
)

// tornCheckpoint is what a script prints that loads a checkpoint a stop
// tore (torch.load of an empty file).
const tornCheckpoint = `printf 'Traceback (most recent call last):\n  File "/work/train.py", line 31, in <module>\n    snapshot = torch.load(path)\n  File "/usr/lib/python3/dist-packages/torch/serialization.py", line 795, in load\n    return _legacy_load(opened_file, map_location, pickle_module, **pickle_load_args)\nEOFError: Ran out of input\n' >&2`

// observer reads a sidecar's events as a status tool does.
type observer struct {
	events <-chan api.Event
}

func observe(t *testing.T, socket string) *observer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := client.New(socket)
	t.Cleanup(func() {
		cancel()
		c.Close()
	})
	evs, err := c.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &observer{events: evs}
}

// await returns the first event that ok takes, failing after 30 s.
func (o *observer) await(t *testing.T, what string, ok func(api.Event) bool) api.Event {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e, open := <-o.events:
			if !open {
				t.Fatalf("event stream ended while waiting for %s", what)
			}
			if ok(e) {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s within 30s", what)
		}
	}
}

// worldSize matches a generation of n ranks.
func worldSize(n int) func(api.Event) bool {
	return func(e api.Event) bool { return e.Type == api.EventGeneration && e.Generation.WorldSize == n }
}

// startLines returns the "start" lines e printed, once it has exited.
func (e *execRun) startLines(t *testing.T) []string {
	t.Helper()
	<-e.eof
	var out []string
	for {
		select {
		case l := <-e.lines:
			if strings.HasPrefix(l, "start") {
				out = append(out, l)
			}
		default:
			return out
		}
	}
}

// A script that fails at start on every worker (a torn checkpoint) ends
// the job after --crash-loop generations, not when the budget or each
// worker's patience runs out, and says why.
func TestAJobWhoseEveryTrainerFailsAtStartStopsNamingTheCause(t *testing.T) {
	srv := etcdtest.Start(t)
	var sockets []string
	for _, id := range []string{"w0", "w1", "w2"} {
		sockets = append(sockets, sidecartest.Start(t, srv.Endpoints(), "torn", id).Socket)
	}
	o := observe(t, sockets[0])
	o.await(t, "the generation of all three", worldSize(3))
	// Every trainer of a generation gets as far as loading the checkpoint
	// before any fails, as the same script on every worker does.
	dir := t.TempDir()
	script := fmt.Sprintf(`echo "start $RINGSIDE_GENERATION"; touch %[1]s/$RINGSIDE_GENERATION-$RINGSIDE_MEMBER
while [ "$(ls %[1]s | grep -c "^$RINGSIDE_GENERATION-")" -lt 3 ]; do sleep 0.01; done
%[2]s; exit 1`, dir, tornCheckpoint)
	var execs []*execRun
	for _, socket := range sockets {
		execs = append(execs, startExec(t, socket, 10, script))
	}
	stop := o.await(t, "the job's stop", func(e api.Event) bool { return e.Type == api.EventJobStopped })
	want := "every worker exits 1 before its first step, 3 generations in a row: EOFError: Ran out of input, at train.py:31: snapshot = torch.load(path)"
	if stop.Reason != want || stop.ExitCode == nil || *stop.ExitCode != 1 {
		t.Fatalf("job stopped: %q, exit code %v; want %q, 1", stop.Reason, stop.ExitCode, want)
	}
	for i, e := range execs {
		if code := e.wait(t); code != 1 {
			t.Errorf("w%d's exec exited %d, want its trainer's 1", i, code)
		}
		if starts := e.startLines(t); len(starts) != 3 {
			t.Errorf("w%d's trainer started %d times (%q), want 3: one per failed generation", i, len(starts), starts)
		}
	}
}

// A crash is reported at once, with no grace for a new generation; the
// crashes of one generation's ranks restart the job once.
func TestCrashesOfOneGenerationAreReportedAtOnceAndRestartTheJobOnce(t *testing.T) {
	srv := etcdtest.Start(t)
	w0 := sidecartest.Start(t, srv.Endpoints(), "crash", "w0")
	w1 := sidecartest.Start(t, srv.Endpoints(), "crash", "w1")
	o := observe(t, w0.Socket)
	gen := o.await(t, "the generation of both", worldSize(2)).Generation.Generation
	// Each trainer crashes once, both in the same generation.
	dir := t.TempDir()
	script := fmt.Sprintf(`trap 'exit 0' TERM; echo "start $RINGSIDE_GENERATION $WORLD_SIZE"
if [ ! -e %[1]s/$RINGSIDE_MEMBER.crashed ]; then touch %[1]s/$RINGSIDE_MEMBER.crashed
while [ "$(ls %[1]s | grep -c 'crashed$')" -lt 2 ]; do sleep 0.01; done; %[2]s; exit 1; fi; `+loop, dir, tornCheckpoint)
	e0, e1 := startExec(t, w0.Socket, 3, script), startExec(t, w1.Socket, 3, script)
	first := fmt.Sprintf("start %d 2", gen)
	for _, e := range []*execRun{e0, e1} {
		if got := e.await(t, "start"); got != first {
			t.Fatalf("first start %q, want %q", got, first)
		}
	}
	restarted := fmt.Sprintf("start %d 2", gen+1)
	for _, e := range []*execRun{e0, e1} {
		if got := e.await(t, "start"); got != restarted {
			t.Fatalf("after both crashed: %q, want %q", got, restarted)
		}
	}
	// The next generation is the join's: the second crash restarted nothing.
	sidecartest.Start(t, srv.Endpoints(), "crash", "w2")
	joined := fmt.Sprintf("start %d 3", gen+2)
	for _, e := range []*execRun{e0, e1} {
		if got := e.await(t, "start"); got != joined {
			t.Fatalf("after w2 joined: %q, want %q", got, joined)
		}
	}
	for _, e := range []*execRun{e0, e1} {
		e.signals <- syscall.SIGTERM
		if code := e.wait(t); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
	}
}
