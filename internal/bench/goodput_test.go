package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/localjob"
)

func newTestRecorder() *stepRecorder {
	return &stepRecorder{done: make(chan struct{}), changed: make(chan struct{}),
		last: map[string]localjob.Line{}, world: map[int64]int{}, genAt: map[int64]time.Time{}}
}

func line(worker string, step, gen int64, world int, at time.Time) localjob.Line {
	return localjob.Line{Worker: worker, Step: step, Generation: gen, World: world, SumOK: true,
		T: float64(at.UnixMicro()) / 1e6}
}

func TestStepRecorderCountsEachStepOnceAtItsLastWorld(t *testing.T) {
	r := newTestRecorder()
	t0 := time.Now()
	for _, l := range []localjob.Line{
		line("w0", 1, 1, 4, t0), line("w1", 1, 1, 4, t0),
		line("w0", 2, 1, 4, t0), // w1 never finished step 2 at world 4
		line("w1", 2, 2, 3, t0), // redone at world 3 after a fault
		line("w1", 3, 2, 3, t0),
		{Worker: "w1", Event: "ring", Generation: 3}, // not a step
	} {
		r.note(l)
	}
	if got := r.top(); got != 3 {
		t.Errorf("top = %d, want 3", got)
	}
	if got := r.samples(0, 3); got != 4+3+3 {
		t.Errorf("samples(0, 3) = %d, want 10 (a redone step counts once, at the world it last ran at)", got)
	}
	if got := r.generation(); got != 2 {
		t.Errorf("generation = %d, want 2", got)
	}
}

func TestStepRecorderTimesTheFirstStepOfTheNextGeneration(t *testing.T) {
	r := newTestRecorder()
	t0 := time.Now()
	r.note(line("w0", 5, 1, 4, t0))
	r.note(line("w0", 6, 1, 4, t0.Add(10*time.Millisecond))) // in flight at the fault: not a resume
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(20 * time.Millisecond) // the wait below starts first
		r.note(line("w0", 6, 2, 3, t0.Add(200*time.Millisecond)))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stall, err := r.awaitGenerationAbove(ctx, 1, t0, t0.Add(time.Minute))
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if d := stall - 200*time.Millisecond; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("stall = %s, want 200ms: the first step of generation 2", stall)
	}
}

func TestStepRecorderStallEndsAtTheDeadline(t *testing.T) {
	r := newTestRecorder()
	t0 := time.Now()
	stall, err := r.awaitGenerationAbove(context.Background(), 1, t0, t0.Add(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if d := stall - 50*time.Millisecond; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("stall = %s, want the 50ms to the deadline", stall)
	}
}

func TestTrainerSpecRefusesWhatCannotRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec TrainerSpec
		want string
	}{
		{"an unknown trainer", TrainerSpec{Trainer: "jax", Mode: "live"}, `trainer "jax"`},
		{"an unknown mode", TrainerSpec{Trainer: "pytorch", Mode: "lazy"}, `mode "lazy"`},
		{"the go trainer in restart mode", TrainerSpec{Trainer: "go", Mode: "restart"}, "use --trainer pytorch"},
		{"a python without torch", TrainerSpec{Trainer: "pytorch", Mode: "live", Python: "/bin/false"}, "cannot import torch.distributed"},
		{"a missing script", TrainerSpec{Trainer: "pytorch", Mode: "live", Python: "/bin/true", Script: "/nonexistent/train.py"}, "trainer script"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.spec.command(t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("command() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestTrainerSpecCommands(t *testing.T) {
	dir := t.TempDir()
	spec := TrainerSpec{Trainer: "pytorch", Mode: "live", Python: "/bin/true", Script: "../../examples/pytorch/train.py",
		StepTime: 20 * time.Millisecond}
	live, err := spec.command(dir)
	if err != nil {
		t.Fatal(err)
	}
	if live[0] != "/bin/true" || !strings.HasSuffix(live[1], "examples/pytorch/train.py") || live[3] != "0.02" {
		t.Errorf("live command %q", live)
	}
	spec.Mode = "restart"
	restart, err := spec.command(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(restart[1:], " ")
	for _, want := range []string{"exec ", " -- /bin/true ", "--mode restart", "--checkpoint " + dir} {
		if !strings.Contains(got, want) {
			t.Errorf("restart command %q lacks %q", got, want)
		}
	}
}

func TestGoodputRefusesBadConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*GoodputConfig)
		want string
	}{
		{"an unknown fault", func(c *GoodputConfig) { c.Fault = "drop" }, `fault "drop"`},
		{"stop in restart mode", func(c *GoodputConfig) { c.Mode, c.Fault = "restart", "stop" }, "use --fault kill"},
		{"one worker", func(c *GoodputConfig) { c.Workers = 1 }, "at least 2 workers"},
		{"no interval", func(c *GoodputConfig) { c.KillEvery = 0 }, "--kill-every"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultGoodputConfig()
			tc.edit(&cfg)
			_, err := Goodput(context.Background(), cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Goodput() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
