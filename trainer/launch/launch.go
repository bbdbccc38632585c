package launch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/trainer/api"
	"github.com/ringside/ringside/trainer/client"
)

// Config says what to run and how.
type Config struct {
	// Socket is the sidecar's API socket.
	Socket string
	// Command is the trainer command and its arguments.
	Command []string
	// StopTimeout is how long a stopped command gets after SIGTERM before
	// SIGKILL.
	StopTimeout time.Duration
	// MaxRestarts is the job's restart budget, torchrun's --max-restarts:
	// how many times the job restarts every trainer after trainer
	// crashes, counted job-wide by its leader (a crash right after a
	// peer's death or drain, or in a generation that the job changed
	// meanwhile, is not counted; deaths and joins never are). Once it is
	// spent, the next crash stops the job. exec hands it to the sidecar
	// with every crash it reports: give every worker the same.
	MaxRestarts int
	// CrashLoop stops the job when this many generations in a row ended
	// with a trainer failing before its first step, every trainer of the
	// last of them failing so, whatever restarts are left (0: never).
	CrashLoop int
	// FirstStepTime is how long a trainer takes at most to reach its
	// first step, for CrashLoop: one that fails sooner after its start,
	// and reported no step (heartbeat) to its sidecar, failed before its
	// first step.
	FirstStepTime time.Duration
	// RunID is TORCHELASTIC_RUN_ID.
	RunID string
	// SidecarWait bounds the wait for a reachable sidecar at start (0:
	// until ctx ends).
	SidecarWait time.Duration
	// StartTimeout bounds the wait for a warm process's imports (Preload)
	// before a start goes on without it.
	StartTimeout time.Duration
	// Preload names Python modules to import ahead of time: while the
	// command trains, a warm process per slot imports them, and the next
	// restart runs the command in it. Only for `python [options] SCRIPT`
	// and `python [options] -m MODULE` commands.
	Preload []string
	// Slots is the number of processes live mode starts (RunLive); 0:
	// the member's slots, from the first generation it is active in.
	Slots int
	// RestartBackoff is how long live mode waits before it restarts a
	// failed slot process, doubled with each failure in a row of that
	// slot up to MaxRestartBackoff: a process that fails at once (a bad
	// device, a full disk) does not spin, while a one-off crash is back
	// within a second. A process that ran RestartBackoffReset before it
	// failed starts from RestartBackoff again.
	RestartBackoff, MaxRestartBackoff, RestartBackoffReset time.Duration
	// Signals are forwarded to the command; SIGINT and SIGTERM also end
	// the run once the command has exited.
	Signals        <-chan os.Signal
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
}

// DefaultConfig returns the defaults of `ringside exec`.
func DefaultConfig() Config {
	return Config{
		Socket:      api.DefaultSocket,
		SidecarWait: client.DefaultWait,
		StopTimeout: 10 * time.Second,
		MaxRestarts: api.DefaultMaxRestarts,
		CrashLoop:   api.DefaultCrashLoop,
		// A minute: a script that failed sooner was most often still
		// importing, loading its checkpoint or forming its group.
		FirstStepTime: time.Minute,
		RunID:         "ringside",
		StartTimeout:  60 * time.Second,
		// 1 s: about what a trainer takes to die and its peers to re-form
		// without it, so a restarted process finds the ring settled.
		RestartBackoff:      time.Second,
		MaxRestartBackoff:   30 * time.Second,
		RestartBackoffReset: time.Minute,
		Stdout:              os.Stdout,
		Stderr:              os.Stderr,
	}
}

// Run runs the command under the sidecar's generations until the job ends
// for this member, and returns the exit code to leave with: the command's
// own when it exits by itself, 0 after a drain.
func Run(ctx context.Context, cfg Config) (int, error) {
	if len(cfg.Command) == 0 {
		return 2, ErrNoCommand
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &runner{cfg: cfg, api: client.New(cfg.Socket), log: cfg.Logger}
	defer r.api.Close()
	return r.run(ctx)
}

type runner struct {
	cfg Config
	api *client.Client
	log *slog.Logger

	events   <-chan api.Event
	gen      *api.Rendezvous
	draining bool
	restarts int // TORCHELASTIC_RESTART_COUNT
	// restartPending: a failure was reported; wait for the generation
	// the job commits for it (or its stop).
	restartPending bool
	spares         []*spare // warm processes by slot (Preload)
}

func (r *runner) run(ctx context.Context) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer r.stopSpares()
	if _, _, ok := pythonCommand(r.cfg.Command); len(r.cfg.Preload) > 0 && !ok {
		r.log.Warn("preloading needs a `python [options] SCRIPT|-m MODULE` command; starting cold", "command", r.cfg.Command[0], "preload", r.cfg.Preload)
	}
	r.warmUp(ctx)
	if err := r.connect(ctx); err != nil {
		return 1, err
	}
	if code, done := r.awaitActive(ctx); done {
		return code, nil
	}
	for {
		o := EnvOptions{RestartCount: r.restarts, MaxRestarts: r.cfg.MaxRestarts, RunID: r.cfg.RunID, Socket: r.cfg.Socket}
		g, err := r.startGroup(o)
		if err != nil {
			return 1, err
		}
		r.startSpares(r.gen, o)
		r.log.Info("started", "generation", r.gen.Generation, "rank", r.gen.Rank, "world_size", r.gen.WorldSize,
			"processes", len(g.procs), "restart_count", r.restarts)
		code, next := r.supervise(ctx, g)
		if !next {
			return code, nil
		}
		r.restarts++
		if r.gen.State == record.StateActive && !r.restartPending {
			continue
		}
		r.restartPending = false
		if code, done := r.awaitActive(ctx); done {
			return code, nil
		}
	}
}

// connect opens the event stream, waiting for the sidecar to come up.
func (r *runner) connect(ctx context.Context) error {
	w := client.Waiting{Limit: r.cfg.SidecarWait, Log: r.log}
	return r.api.Wait(ctx, w, func(ctx context.Context) error {
		evs, err := r.api.RestartModeEvents(ctx)
		r.events = evs
		return err
	})
}

// awaitActive reads events until a generation newer than the current one
// makes this member active. done reports that the run is over instead
// (drained out of the job, the sidecar gone, or a signal).
func (r *runner) awaitActive(ctx context.Context) (code int, done bool) {
	for {
		select {
		case e, open := <-r.events:
			if !open {
				r.log.Error("sidecar event stream ended")
				return 1, true
			}
			if code, stopped := r.jobStopped(e); stopped {
				return code, true
			}
			switch e.Type {
			case api.EventDrain:
				r.draining = true
			case api.EventGeneration:
				if r.gen != nil && e.Generation.Generation <= r.gen.Generation {
					continue
				}
				r.gen = e.Generation
				switch {
				case r.gen.State == record.StateActive:
					return 0, false
				case r.draining:
					r.log.Info("drained out of the job")
					return 0, true
				}
				r.log.Info("waiting: this member is not active", "generation", r.gen.Generation, "state", r.gen.State)
			}
		case sig := <-r.cfg.Signals:
			if isTerminal(sig) {
				return 128 + int(sig.(syscall.Signal)), true
			}
		case <-ctx.Done():
			return 1, true
		}
	}
}

// supervise watches a running group. It returns next=true when the group
// was stopped for a new generation (or a restart after a failure), else
// the code to exit with.
func (r *runner) supervise(ctx context.Context, g *group) (code int, next bool) {
	terminating := false
	for {
		select {
		case e, open := <-r.events:
			if !open {
				g.stop(r.cfg.StopTimeout)
				r.log.Error("sidecar event stream ended; stopping the command")
				return 1, false
			}
			if code, stopped := r.jobStopped(e); stopped {
				g.stop(r.cfg.StopTimeout)
				return code, false
			}
			if e.Type == api.EventDrain {
				r.draining = true
			}
			if e.Type == api.EventGeneration && e.Generation.Generation > r.gen.Generation && terminating {
				// Asked to stop (the signal reached the command, which is
				// finishing): a new generation restarts nothing.
				r.gen = e.Generation
				g.stop(r.cfg.StopTimeout)
				return g.firstFailure(), false
			}
			if e.Type == api.EventGeneration && e.Generation.Generation > r.gen.Generation {
				r.log.Info("new generation; restarting the command", "generation", e.Generation.Generation, "reason", e.Generation.Reason)
				g.stop(r.cfg.StopTimeout)
				r.gen = e.Generation
				if r.gen.State != record.StateActive && r.draining {
					r.log.Info("drained out of the job")
					return 0, false
				}
				return 0, true
			}
		case ex := <-g.exits:
			g.note(ex)
			if ex.code == 0 || terminating {
				if g.left > 0 {
					continue
				}
				code := g.firstFailure()
				if code == 0 && !terminating && !r.draining {
					r.reportFinished(ctx, g)
				}
				return code, false
			}
			// A crash: tell the sidecar at once, then stop the others. The
			// job's leader decides whether it counts (a peer that died under
			// it makes it the peer's) and commits the next generation, or
			// the job's stop.
			err := r.reportCrash(ctx, g.procs[ex.slot], ex)
			g.stop(r.cfg.StopTimeout)
			if err != nil {
				r.log.Error("could not report the failure to the sidecar", "exit_code", ex.code, "err", err)
				return ex.code, false
			}
			r.restartPending = true
			return 0, true
		case sig := <-r.cfg.Signals:
			g.signal(sig)
			if isTerminal(sig) {
				terminating = true
			}
		case <-ctx.Done():
			g.stop(r.cfg.StopTimeout)
			return 1, false
		}
	}
}

// reportCrash reports the crash of slot ex.slot's process p to the
// sidecar.
func (r *runner) reportCrash(ctx context.Context, p *Process, ex exit) error {
	signal, ran, stderr := p.Ended()
	code, maxRestarts, crashLoop := ex.code, r.cfg.MaxRestarts, r.cfg.CrashLoop
	rr := api.RestartReport{
		Error:      fmt.Sprintf("local rank %d exited with %d", ex.slot, ex.code),
		Generation: r.gen.Generation, ExitCode: &code, Signal: signal,
		RanS: ran.Seconds(), FirstStep: ran >= r.cfg.FirstStepTime, Stderr: stderr,
		MaxRestarts: &maxRestarts, CrashLoop: &crashLoop,
	}
	r.log.Warn("command failed; reporting it to the job", "exit_code", ex.code, "local_rank", ex.slot,
		"generation", r.gen.Generation, "ran", ran.Round(time.Millisecond))
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return r.api.ReportCrash(rctx, rr)
}

// reportFinished tells the sidecar that every process of g exited 0: the
// job is finishing, so that this member leaving as exec exits restarts
// nobody. A sidecar that cannot be told is logged: the others restart
// into a generation without this member then, and load its last save.
func (r *runner) reportFinished(ctx context.Context, g *group) {
	_, ran, _ := g.procs[0].Ended()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := r.api.ReportFinished(rctx, api.FinishReport{Generation: r.gen.Generation, RanS: ran.Seconds()})
	if err != nil {
		r.log.Warn("could not tell the sidecar that the command finished", "err", err)
		return
	}
	r.log.Info("command finished; the job is finishing", "generation", r.gen.Generation, "ran", ran.Round(time.Millisecond))
}

// jobStopped reports whether e says that trainer crashes stopped the
// job, and the code to exit with then: the crashed trainer's.
func (r *runner) jobStopped(e api.Event) (code int, stopped bool) {
	if e.Type != api.EventJobStopped {
		return 0, false
	}
	code = 1
	if e.ExitCode != nil && *e.ExitCode != 0 {
		code = *e.ExitCode
	}
	r.log.Error("the job stopped: "+e.Reason, "exit_code", code)
	return code, true
}

func isTerminal(sig os.Signal) bool {
	return sig == syscall.SIGTERM || sig == syscall.SIGINT
}

// exit is one process's end.
type exit struct {
	slot, code int
}

// group is the command's processes, one per slot.
type group struct {
	procs []*Process
	exits chan exit
	left  int
	codes []int
}

// startGroup starts the command for every slot of the current generation.
func (r *runner) startGroup(o EnvOptions) (*group, error) {
	n := r.gen.LocalWorldSize
	g := &group{exits: make(chan exit, n), codes: make([]int, n)}
	for slot := range n {
		p, err := r.startSlot(slot, Env(baseEnv(), r.gen, slot, o))
		if err != nil {
			g.stop(r.cfg.StopTimeout)
			return nil, fmt.Errorf("start %s: %w", r.cfg.Command[0], err)
		}
		g.procs = append(g.procs, p)
		g.left++
		go func() { g.exits <- exit{slot: slot, code: p.ExitCode()} }()
	}
	return g, nil
}

// startSlot runs the command for slot in its warm process, or starts it.
func (r *runner) startSlot(slot int, env []string) (*Process, error) {
	if s := r.takeSpare(slot); s != nil {
		err := s.start(env)
		if err == nil {
			return s.p, nil
		}
		r.log.Warn("could not hand the command to its warm process; starting cold", "err", err)
		s.p.Kill()
	}
	cmd := exec.Command(r.cfg.Command[0], r.cfg.Command[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = r.cfg.Stdout, r.cfg.Stderr
	return StartProcess(cmd)
}

// firstFailure returns the first non-zero exit code, by slot, or 0.
func (g *group) firstFailure() int {
	for _, c := range g.codes {
		if c != 0 {
			return c
		}
	}
	return 0
}

func (g *group) signal(sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	for _, p := range g.procs {
		p.SignalProcess(s) //nolint:errcheck // a process already gone needs no signal
	}
}

// stop stops every process still running (SIGTERM, then SIGKILL after
// grace) and reads all their exits.
func (g *group) stop(grace time.Duration) {
	if g.left == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, p := range g.procs {
		wg.Go(func() { p.Stop(grace) })
	}
	wg.Wait()
	for g.left > 0 {
		g.note(<-g.exits)
	}
}

// note records an exit read from g.exits.
func (g *group) note(ex exit) {
	g.left--
	g.codes[ex.slot] = ex.code
}
