package launch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/trainer/api"
	"github.com/ringside/ringside/trainer/client"
)

// Live mode (`ringside exec --live`) is for trainers that follow the
// generations themselves (the Python client's run()): each slot's process
// is started once and lives through every resize, so a new generation
// costs a group re-form, not an interpreter start and `import torch`. The
// launcher only keeps one process per slot alive:
//
//   - A slot process that fails is restarted alone, after a backoff that
//     doubles with each failure in a row of that slot, while the others
//     train on. The sidecar takes the member out of the ring while that
//     process's event stream is closed (trainer.go: every slot's process
//     must be attached), so the survivors re-form without this member's
//     ranks and it enters again once the process is back.
//   - A process that exits 0 has finished (train_fn returned, or the
//     member was drained out of the job) and is not restarted; the
//     launcher exits once every slot's process has.
//   - Signals are forwarded to every slot's process; after SIGTERM or
//     SIGINT nothing is restarted and the launcher exits once all have.
//
// The exit code is exec's: the first failing slot's code (or 0), or the
// failing one's once MaxRestarts failures are spent.

// liveEnv returns base with what a live-mode process of slot needs:
// LOCAL_RANK selects its GPU (the Python client sets cuda:LOCAL_RANK;
// CUDA_VISIBLE_DEVICES is left as it is, so every process sees all the
// pod's GPUs, as NCCL wants for intra-node transports), and torchrun's
// RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (with GROUP_RANK and the
// rest of its contract), so that code reading them before elastic.run
// works as it does under torchrun. They are the values of gen, the
// generation current when the process starts, when this member is placed
// in it; else this member's alone (RANK = the slot, WORLD_SIZE = slots,
// rank 0 on 127.0.0.1). They are a start only: the generation changes
// without a restart, and elastic.run asks the sidecar for each one.
func liveEnv(base []string, slot, slots int, o EnvOptions, gen *api.Rendezvous) []string {
	r := gen
	if r == nil || r.Rank < 0 || (r.State != record.StateActive && r.State != record.StatePaused) {
		r = &api.Rendezvous{Rank: 0, WorldSize: slots, LocalWorldSize: slots, NumGroups: 1,
			MasterAddr: "127.0.0.1", MasterPort: defaultMasterPort}
	}
	set := rankVars(r, slot)
	if gen != r { // no generation places this member: nothing to name
		delete(set, "RINGSIDE_GENERATION")
		delete(set, "RINGSIDE_MEMBER")
	}
	maps.Copy(set, map[string]string{
		"LOCAL_RANK":                 strconv.Itoa(slot),
		"LOCAL_WORLD_SIZE":           strconv.Itoa(slots),
		"TORCHELASTIC_RESTART_COUNT": strconv.Itoa(o.RestartCount),
		"TORCHELASTIC_MAX_RESTARTS":  strconv.Itoa(o.MaxRestarts),
		"TORCHELASTIC_RUN_ID":        o.RunID,
		"RINGSIDE_SOCKET":            o.Socket,
	})
	if !envKeys(base)["OMP_NUM_THREADS"] { // as torchrun and restart mode do
		set["OMP_NUM_THREADS"] = "1"
	}
	return setEnv(base, set)
}

// defaultMasterPort is torchrun's MASTER_PORT default.
const defaultMasterPort = 29500

// peekWait bounds how long a live launcher started with --slots waits for
// the sidecar's current generation, for the processes' RANK and
// WORLD_SIZE.
const peekWait = time.Second

// peekGeneration returns this member's view of the current generation, or
// nil when the sidecar has none to give within wait.
func peekGeneration(ctx context.Context, cfg Config, wait time.Duration) *api.Rendezvous {
	c := client.New(cfg.Socket)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	evs, err := c.Observe(ctx)
	if err != nil {
		return nil
	}
	for {
		select {
		case e, open := <-evs:
			if !open {
				return nil
			}
			if e.Type == api.EventGeneration && e.Generation != nil {
				return e.Generation // a stream starts with the current generation
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// RunLive runs the command in live mode (see above) until every slot's
// process has exited, and returns the code to exit with.
func RunLive(ctx context.Context, cfg Config) (int, error) {
	if len(cfg.Command) == 0 {
		return 2, ErrNoCommand
	}
	if len(cfg.Preload) > 0 {
		return 2, ErrPreloadLive
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	slots := cfg.Slots
	var gen *api.Rendezvous
	if slots <= 0 {
		g, err := observeSlots(ctx, cfg)
		var stopped stoppedBy
		if errors.As(err, &stopped) {
			return 128 + int(stopped.sig), nil
		}
		if err != nil {
			return 1, err
		}
		gen, slots = g, g.LocalWorldSize
	} else {
		gen = peekGeneration(ctx, cfg, peekWait)
	}
	l := &live{cfg: cfg, gen: gen, slots: make([]*liveSlot, slots), exits: make(chan exit, slots), due: make(chan int, slots)}
	return l.run(ctx)
}

// observeSlots reads the member's slots from the first generation it is
// active in, on a stream that does not stand for the trainer (the member
// of a sidecar under --await-trainer enters the ring only once its
// processes attach: give it --slots).
func observeSlots(ctx context.Context, cfg Config) (*api.Rendezvous, error) {
	c := client.New(cfg.Socket)
	defer c.Close()
	// A terminal signal ends the wait as it ends the watch below.
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case sig := <-cfg.Signals:
				if s, ok := sig.(syscall.Signal); ok && isTerminal(sig) {
					stop(stoppedBy{s})
					return
				}
			case <-done:
				return
			}
		}
	})
	var evs <-chan api.Event
	err := c.Wait(wctx, client.Waiting{Limit: cfg.SidecarWait, Log: cfg.Logger}, func(ctx context.Context) error {
		var err error
		evs, err = c.Observe(ctx)
		return err
	})
	close(done)
	wg.Wait()
	var stopped stoppedBy
	if errors.As(context.Cause(wctx), &stopped) {
		return nil, stopped
	}
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("waiting for a generation this member is active in to learn its slots (Slots not set)")
	for {
		select {
		case e, open := <-evs:
			if !open {
				return nil, fmt.Errorf("sidecar at %s ended its event stream before this member was active: %w", cfg.Socket, ErrSlotsUnknown)
			}
			if e.Type == api.EventGeneration && e.Generation.State == record.StateActive {
				return e.Generation, nil
			}
		case sig := <-cfg.Signals:
			if s, ok := sig.(syscall.Signal); ok && isTerminal(sig) {
				return nil, stoppedBy{s}
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// The errors of a config the launcher cannot run, for the command line to
// name its flags.
var (
	// ErrNoCommand: Command is empty.
	ErrNoCommand = errors.New("launch: no command given")
	// ErrPreloadLive: Preload set in live mode, whose processes start once.
	ErrPreloadLive = errors.New("launch: Preload is for restart mode: live-mode processes are started once")
	// ErrSlotsUnknown: live mode without Slots could not learn the
	// member's slots from the sidecar.
	ErrSlotsUnknown = errors.New("launch: the member's slots are unknown")
)

// stoppedBy is a SIGTERM or SIGINT that came before any process started:
// the launcher exits with 128+sig, as a shell reports it.
type stoppedBy struct{ sig syscall.Signal }

func (s stoppedBy) Error() string { return "stopped by " + s.sig.String() }

type live struct {
	cfg   Config
	gen   *api.Rendezvous // the generation current at start (RANK, WORLD_SIZE, ...), or nil
	slots []*liveSlot
	exits chan exit
	// due receives a slot once its restart's backoff ended; buffered for
	// every slot, so a timer never blocks.
	due         chan int
	failures    int
	terminating bool
	code        int // the first failure's, for the exit
}

// liveSlot is one slot's process and its restarts.
type liveSlot struct {
	p        *Process // nil while down
	started  time.Time
	restarts int                         // TORCHELASTIC_RESTART_COUNT
	wait     *backoff.ExponentialBackOff // RestartBackoff doubled per failure in a row
	backoff  *time.Timer                 // set while a restart waits out its backoff
	done     bool                        // exited 0, or not to be restarted
}

func (l *live) run(ctx context.Context) (int, error) {
	defer l.cancelRestarts()
	for k := range l.slots {
		l.slots[k] = &liveSlot{}
	}
	for k := range l.slots {
		if err := l.start(k); err != nil {
			l.stopAll()
			return 1, err
		}
	}
	l.cfg.Logger.Info("started in live mode", "processes", len(l.slots))
	for !l.over() {
		select {
		case ex := <-l.exits:
			l.exited(ex)
		case k := <-l.due:
			l.slots[k].backoff = nil
			if l.terminating || l.slots[k].done {
				continue
			}
			if err := l.start(k); err != nil {
				l.cfg.Logger.Error("could not restart the command", "local_rank", k, "err", err)
				l.slots[k].done = true
				l.note(1)
				l.stopAll()
			}
		case sig := <-l.cfg.Signals:
			l.signal(sig)
		case <-ctx.Done():
			l.stopAll()
			return 1, nil
		}
	}
	return l.code, nil
}

// over reports whether no slot's process runs or waits to.
func (l *live) over() bool {
	for _, s := range l.slots {
		if s.p != nil || (s.backoff != nil && !s.done) {
			return false
		}
	}
	return true
}

func (l *live) start(k int) error {
	s := l.slots[k]
	o := EnvOptions{RestartCount: s.restarts, MaxRestarts: l.cfg.MaxRestarts, RunID: l.cfg.RunID, Socket: l.cfg.Socket}
	cmd := exec.Command(l.cfg.Command[0], l.cfg.Command[1:]...)
	cmd.Env = liveEnv(baseEnv(), k, len(l.slots), o, l.gen)
	cmd.Stdout, cmd.Stderr = l.cfg.Stdout, l.cfg.Stderr
	p, err := StartProcess(cmd)
	if err != nil {
		return fmt.Errorf("start %s: %w", l.cfg.Command[0], err)
	}
	s.p, s.started = p, time.Now()
	go func() { l.exits <- exit{slot: k, code: p.ExitCode()} }()
	return nil
}

// exited handles the exit of slot ex.slot's process: it is done, or
// restarted alone after its backoff, or the run ends once the failures
// are spent.
func (l *live) exited(ex exit) {
	s := l.slots[ex.slot]
	ran := time.Since(s.started)
	s.p = nil
	switch {
	case ex.code == 0:
		s.done = true
		l.cfg.Logger.Info("slot process finished", "local_rank", ex.slot)
		return
	case l.terminating || s.done:
		s.done = true
		l.note(ex.code)
		return
	}
	l.failures++
	if l.failures > l.cfg.MaxRestarts {
		l.cfg.Logger.Error("slot process failed; no restarts left", "local_rank", ex.slot, "exit_code", ex.code, "max_restarts", l.cfg.MaxRestarts)
		s.done = true
		l.note(ex.code)
		l.stopAll()
		return
	}
	if s.wait == nil {
		s.wait = backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(l.cfg.RestartBackoff), backoff.WithMaxInterval(l.cfg.MaxRestartBackoff),
			backoff.WithMultiplier(2), backoff.WithRandomizationFactor(0), backoff.WithMaxElapsedTime(0))
	}
	if ran >= l.cfg.RestartBackoffReset {
		s.wait.Reset()
	}
	wait := s.wait.NextBackOff()
	s.restarts++
	l.cfg.Logger.Warn("slot process failed; restarting it alone, its member out of the ring until it attaches again",
		"local_rank", ex.slot, "exit_code", ex.code, "failures", l.failures, "backoff", wait)
	k := ex.slot
	s.backoff = time.AfterFunc(wait, func() { l.due <- k })
}

// note keeps the first failure's code as the exit code.
func (l *live) note(code int) {
	if l.code == 0 {
		l.code = code
	}
}

// signal forwards sig to every slot's process; after SIGTERM or SIGINT
// nothing is restarted, and the run ends once all have exited.
func (l *live) signal(sig os.Signal) {
	if isTerminal(sig) {
		l.terminating = true
		l.cancelRestarts()
	}
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	for _, sl := range l.slots {
		if sl.p != nil {
			// The trainer only, not its process group: a drain's SIGTERM
			// lets it finish its step and leave, and its DataLoader
			// workers end with it instead of mid-batch.
			sl.p.SignalProcess(s) //nolint:errcheck // a process already gone needs no signal
		}
	}
}

// stopAll stops every slot's process (SIGTERM, then SIGKILL after
// StopTimeout) and reads their exits; none is restarted.
func (l *live) stopAll() {
	l.terminating = true
	l.cancelRestarts()
	g := &group{exits: l.exits, codes: make([]int, len(l.slots))}
	for _, s := range l.slots {
		if s.p != nil {
			g.procs = append(g.procs, s.p)
			g.left++
		}
	}
	g.stop(l.cfg.StopTimeout)
	for k, s := range l.slots {
		if s.p != nil {
			s.p, s.done = nil, true
			l.note(g.codes[k])
		}
	}
}

// cancelRestarts stops the restarts waiting out their backoff.
func (l *live) cancelRestarts() {
	for _, s := range l.slots {
		if s != nil && s.backoff != nil {
			s.backoff.Stop()
			s.backoff = nil
		}
	}
}
