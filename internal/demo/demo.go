// Package demo runs ringside's end-to-end demonstration: an embedded etcd
// and several workers (a real sidecar process and a real ring all-reduce
// trainer process each) that lose a worker, grow by two and drain one,
// shown live with the time each recovery took.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/ringside/ringside/internal/localjob"
)

// Config tunes the demo.
type Config struct {
	Workers int
	// TrainerBin is the ring trainer; empty finds it next to ringside.
	TrainerBin string
	StepTime   time.Duration
	Settle     time.Duration
	// Live redraws a view in place (for a terminal); otherwise only the
	// events are printed.
	Live bool
}

// DefaultConfig is what `ringside demo` runs.
func DefaultConfig() Config {
	return Config{Workers: 4, StepTime: 100 * time.Millisecond, Settle: 500 * time.Millisecond}
}

type run struct {
	w     io.Writer
	cfg   Config
	start time.Time
	job   *localjob.Job
	track *localjob.Tracker
	notes []string
}

// Run plays the demo on w and returns nil when every step produced what
// it should.
func Run(ctx context.Context, w io.Writer, cfg Config) error {
	bin, err := localjob.FindTrainer(cfg.TrainerBin)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ringside-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	job, err := localjob.Start(ctx, localjob.Config{
		Trainer: []string{bin, "--step-time", cfg.StepTime.String()}, Job: "demo", Dir: dir,
		SidecarArgs: []string{"--settle", cfg.Settle.String()},
	})
	if err != nil {
		return err
	}
	defer job.Close()
	r := &run{w: w, cfg: cfg, start: time.Now(), job: job, track: localjob.NewTracker(job)}
	if cfg.Live {
		r.track.Every(250*time.Millisecond, r.draw)
	}
	r.note("embedded etcd at %s; starting %d workers (sidecar + ring all-reduce trainer each)",
		strings.Join(job.Endpoints(), ","), cfg.Workers)

	t0 := time.Now()
	for range cfg.Workers {
		if _, err := job.AddWorker(ctx); err != nil {
			return err
		}
	}
	if _, err := r.track.AllStepAt(ctx, cfg.Workers, t0); err != nil {
		return err
	}
	formed := time.Since(t0)
	r.note("%d workers train together: ring formed %.2fs after start", cfg.Workers, formed.Seconds())
	r.settle(ctx)

	victim := r.track.ByRank(cfg.Workers / 2)
	r.note("kill -9 %s (sidecar and trainer, rank %d)", victim.ID, cfg.Workers/2)
	t0 = time.Now()
	job.Kill(victim)
	done, err := r.track.AllStepAt(ctx, cfg.Workers-1, t0)
	if err != nil {
		return err
	}
	crash := done.Sub(t0)
	r.note("survivors train at world size %d after %.3fs", cfg.Workers-1, crash.Seconds())
	r.settle(ctx)

	r.note("two new workers join")
	t0 = time.Now()
	for range 2 {
		if _, err := job.AddWorker(ctx); err != nil {
			return err
		}
	}
	done, err = r.track.AllStepAt(ctx, cfg.Workers+1, t0)
	if err != nil {
		return err
	}
	scale := done.Sub(t0)
	r.note("world size %d after %.3fs (settle window %s included)", cfg.Workers+1, scale.Seconds(), cfg.Settle)
	r.settle(ctx)

	drained := r.track.ByRank(0)
	before := r.track.Last()
	r.note("SIGTERM %s's sidecar, as on preemption: it drains", drained.ID)
	t0 = time.Now()
	if err := job.Drain(drained); err != nil {
		return err
	}
	done, err = r.track.AllStepAt(ctx, cfg.Workers, t0)
	if err != nil {
		return err
	}
	drain := done.Sub(t0)
	if trainer, sidecar, err := drained.Wait(ctx); err != nil {
		return err
	} else if trainer != 0 || sidecar != 0 {
		return fmt.Errorf("drained worker exited with trainer %d, sidecar %d; want 0 and 0", trainer, sidecar)
	}
	var lost int64
	for id, first := range r.track.First() {
		if l := before[id].Step + 1 - first.Step; l > 0 {
			lost += l
		}
	}
	r.note("survivors train at world size %d after %.3fs; %s exited 0; %d steps lost", cfg.Workers, drain.Seconds(), drained.ID, lost)
	r.draw()

	fmt.Fprintf(w, "\nsummary (%.1fs in all)\n", time.Since(r.start).Seconds())
	fmt.Fprintf(w, "  ring of %d formed       %6.3fs\n", cfg.Workers, formed.Seconds())
	fmt.Fprintf(w, "  kill -9 to training    %6.3fs   (torchrun on this machine: 47 s, 18 s tuned)\n", crash.Seconds())
	fmt.Fprintf(w, "  two joins to training  %6.3fs\n", scale.Seconds())
	fmt.Fprintf(w, "  drain to training      %6.3fs   (%d steps lost)\n", drain.Seconds(), lost)
	if lost != 0 {
		return fmt.Errorf("the drain lost %d steps", lost)
	}
	return nil
}

// settle lets the job train for a moment so the view shows it.
func (r *run) settle(ctx context.Context) {
	world := len(r.job.Workers())
	r.track.AllStepAt(ctx, world, time.Now().Add(time.Second)) //nolint:errcheck // only a pause
}

func (r *run) note(format string, args ...any) {
	line := fmt.Sprintf("[%6.2fs] %s", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
	r.notes = append(r.notes, line)
	if r.cfg.Live {
		r.draw()
	} else {
		fmt.Fprintln(r.w, line)
	}
}

// draw redraws the live view: workers in ring order, then the events.
func (r *run) draw() {
	if !r.cfg.Live {
		return
	}
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J")
	live := r.job.Workers()
	ids := make([]string, 0, len(live))
	var gen int64
	var world int
	for id := range live {
		ids = append(ids, id)
		if l := r.track.LastOf(id); l.Generation > gen {
			gen, world = l.Generation, l.World
		}
	}
	// Workers of the current generation in ring order, then those still
	// joining.
	key := func(id string) int {
		if l := r.track.LastOf(id); l.Generation == gen {
			return l.Rank
		}
		return 1 << 30
	}
	sort.Slice(ids, func(i, j int) bool {
		ki, kj := key(ids[i]), key(ids[j])
		return ki < kj || ki == kj && ids[i] < ids[j]
	})
	fmt.Fprintf(&b, "ringside demo   generation %d   world size %d   %.1fs\n\n", gen, world, time.Since(r.start).Seconds())
	fmt.Fprintf(&b, "  %-5s %-6s %-12s %8s %8s\n", "rank", "worker", "address", "step", "steps/s")
	for _, id := range ids {
		l := r.track.LastOf(id)
		if l.Generation != gen {
			fmt.Fprintf(&b, "  %-5s %-6s %-12s %8s %8s\n", "-", id, live[id].Addr, "joining", "-")
			continue
		}
		fmt.Fprintf(&b, "  %-5d %-6s %-12s %8d %8.1f\n", l.Rank, id, live[id].Addr, l.Step, r.track.Rate(id))
	}
	b.WriteString("\n")
	for _, n := range r.notes {
		b.WriteString(n + "\n")
	}
	io.WriteString(r.w, b.String())
}
