package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/trainer/client"
	"github.com/ringside/ringside/trainer/launch"
)

// exitCodeError makes main exit with a code without printing anything.
type exitCodeError int

func (e exitCodeError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newExecCmd() *cobra.Command {
	cfg := launch.DefaultConfig()
	live := false
	cmd := &cobra.Command{
		Use:   "exec [flags] -- CMD [ARGS...]",
		Short: "Run a trainer per slot: restarted on every new generation, or once (--live) for the Python client",
		Long: `exec runs CMD once per slot of this member with torchrun's environment
contract (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
NODE_RANK, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
OMP_NUM_THREADS when unset) and netopt's NCCL settings, taken from the
sidecar's current generation. On every new generation it stops CMD (SIGTERM,
then SIGKILL after --stop-timeout) and starts it again with the new values.
Signals are forwarded.

A CMD that fails is reported to the sidecar at once, with its exit code, how
long it ran and the last lines of its stderr (which still reach exec's
stderr unchanged). The job's leader restarts every worker's CMD in a new
generation, as torchrun restarts all workers, and counts the restart
against the job's budget, --max-restarts, counted job-wide like torchrun's:
a crash right after a peer's death or drain is the peer's, several workers
failing in the same generation cost one restart, and deaths, drains and
joins never count. The next crash once the budget is spent stops the job;
so do --crash-loop generations in a row that end with CMD failing before
its first step (within --first-step-time of its start, having reported no
step to the sidecar), every worker's CMD failing so in the last of them
(one worker's CMD failing early time after time spends the budget). A stopped job is for good: every worker's exec exits
with the failed CMD's code, and the sidecars say why (their log,
/v1/events, ringside status, the ringside_coordinator_job_stopped metric),
naming the workers, their exit and the last stderr line, as in "every
worker exits 1 before its first step, 3 generations in a row: EOFError: Ran
out of input, at train.py:31: snapshot = torch.load(path)". It stays
stopped until its pods (sidecars) are replaced. Give every worker the same
--max-restarts and --crash-loop: the leader applies those of the crash it
counts.

With --live, exec is the launcher of trainers that follow the generations
themselves (ringside.elastic.run): it starts CMD once per slot (--slots, or
the member's slots from the sidecar) with LOCAL_RANK, LOCAL_WORLD_SIZE and
RINGSIDE_SOCKET set and CUDA_VISIBLE_DEVICES left as it is (each process
selects cuda:LOCAL_RANK itself), and never restarts it for a new generation.
A slot process that fails is restarted alone after --restart-backoff
(doubled with each failure of that slot in a row, up to 30 s), while its
member is out of the ring: the sidecar counts the member attached only while
every slot's process holds its event stream open. A process that exits 0
(its training returned, or the member was drained) is not restarted. Signals
are forwarded to every slot's process; after SIGTERM or SIGINT nothing is
restarted. exec exits once every process has, with the first failure's code
(0 when none failed), or the failing one's after --max-restarts failures of
this pod's processes (live mode counts them itself).
With a sidecar under --await-trainer, give --slots: the member enters the
ring only once its processes attach.`,
		Example: `  ringside exec -- python train.py --epochs 10
  ringside exec --socket /var/run/ringside/ringside.sock --max-restarts 5 -- torch_script.sh
  ringside exec --preload torch -- python train.py   # restarts in a process that imported torch already
  ringside exec --live --slots 8 -- python train_live.py   # one process per GPU, each following the generations`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("no command given: ringside exec [flags] -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateExec(cmd, cfg, live); err != nil {
				return err
			}
			cfg.Command = args
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
			defer signal.Stop(sigs)
			cfg.Signals = sigs
			run := launch.Run
			if live {
				run = launch.RunLive
			}
			code, err := run(context.WithoutCancel(cmd.Context()), cfg)
			if err != nil {
				return execFlagErrors(err, cfg.Socket)
			}
			if code != 0 {
				return exitCodeError(code)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Socket, "socket", cfg.Socket, "the sidecar's API socket")
	f.DurationVar(&cfg.SidecarWait, "socket-wait", cfg.SidecarWait, "how long to wait at start for the sidecar to answer on --socket, saying so every few seconds (0: wait until interrupted)")
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "time between SIGTERM and SIGKILL when stopping CMD")
	f.IntVar(&cfg.MaxRestarts, "max-restarts", cfg.MaxRestarts, "the job's restart budget (torchrun's --max-restarts): restarts of every worker after CMD failures, counted job-wide; the next failure stops the job. With --live: failures of this pod's processes before exec gives up")
	f.IntVar(&cfg.CrashLoop, "crash-loop", cfg.CrashLoop, "stop the job when this many generations in a row end with CMD failing before its first step, whatever restarts are left (0: never)")
	f.DurationVar(&cfg.FirstStepTime, "first-step-time", cfg.FirstStepTime, "for --crash-loop: a CMD that fails within this time of its start, having reported no step (heartbeat) to the sidecar, failed before its first step")
	f.StringVar(&cfg.RunID, "run-id", cfg.RunID, "TORCHELASTIC_RUN_ID")
	withEnv(f, "run-id", "RINGSIDE_RUN_ID", "RINGSIDE_JOB")
	f.DurationVar(&cfg.StartTimeout, "start-timeout", cfg.StartTimeout, "with --preload: how long a start waits for the warm process's imports before it starts cold")
	var crashGrace time.Duration
	f.DurationVar(&crashGrace, "crash-grace", 2*time.Second, "ignored")
	f.MarkDeprecated("crash-grace", "a failure is reported at once, and the job's leader tells a peer's death from a crash") //nolint:errcheck // the flag exists
	f.BoolVar(&live, "live", false, "live mode: start CMD once per slot, never restarted for a new generation (for trainers using ringside.elastic.run); a failed slot process is restarted alone")
	f.IntVar(&cfg.Slots, "slots", 0, "with --live: processes to start, one per slot (0: the member's slots, from the first generation it is active in)")
	f.DurationVar(&cfg.RestartBackoff, "restart-backoff", cfg.RestartBackoff, "with --live: wait before restarting a failed slot process, doubled with each failure of that slot in a row (up to 30s)")
	f.StringSliceVar(&cfg.Preload, "preload", nil, "Python modules (e.g. torch) a warm process per slot imports while CMD trains, so a restart skips the interpreter start and the imports; for `python [options] SCRIPT|-m MODULE` commands")
	return cmd
}

// validateExec checks exec's flags before anything starts.
func validateExec(cmd *cobra.Command, cfg launch.Config, live bool) error {
	var errs []error
	changed := cmd.Flags().Changed
	if !live && (changed("slots") || changed("restart-backoff")) {
		errs = append(errs, errors.New("--slots and --restart-backoff are for --live; restart mode runs a process per slot of each generation"))
	}
	if live && len(cfg.Preload) > 0 {
		errs = append(errs, fmt.Errorf("--preload: %w", launch.ErrPreloadLive))
	}
	if cfg.Socket == "" {
		errs = append(errs, errors.New("--socket is empty: give the sidecar's API socket"))
	}
	for _, d := range []struct {
		flag     string
		v        time.Duration
		positive bool
	}{
		{"--socket-wait", cfg.SidecarWait, false},
		{"--stop-timeout", cfg.StopTimeout, true},
		{"--start-timeout", cfg.StartTimeout, true},
		{"--first-step-time", cfg.FirstStepTime, false},
		{"--restart-backoff", cfg.RestartBackoff, true},
	} {
		switch {
		case d.positive && d.v <= 0:
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.flag, d.v))
		case d.v < 0:
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", d.flag, d.v))
		}
	}
	if cfg.MaxRestarts < 0 || cfg.MaxRestarts > record.MaxRestartBudget {
		errs = append(errs, fmt.Errorf("--max-restarts must be zero or more, at most %d, got %d", record.MaxRestartBudget, cfg.MaxRestarts))
	}
	if cfg.CrashLoop < 0 || cfg.CrashLoop > record.MaxRestartBudget {
		errs = append(errs, fmt.Errorf("--crash-loop must be zero (never) or more, at most %d, got %d", record.MaxRestartBudget, cfg.CrashLoop))
	}
	if live && (changed("crash-loop") || changed("first-step-time")) {
		errs = append(errs, errors.New("--crash-loop and --first-step-time are for restart mode: live mode restarts a failed process alone"))
	}
	if cfg.Slots < 0 {
		errs = append(errs, fmt.Errorf("--slots must be zero (the member's slots) or more, got %d", cfg.Slots))
	}
	return errors.Join(errs...)
}

// execFlagErrors names the flags behind the launcher's errors.
func execFlagErrors(err error, socket string) error {
	var absent *client.WaitError
	switch {
	case errors.As(err, &absent):
		return fmt.Errorf("%w\nIs `ringside sidecar` running with --socket %s? Point --socket (env RINGSIDE_SOCKET) at its socket, or wait longer with --socket-wait (env RINGSIDE_SOCKET_WAIT)", err, socket)
	case errors.Is(err, launch.ErrSlotsUnknown):
		return fmt.Errorf("%w: give --slots", err)
	}
	return err
}

func newDiscoverHostsCmd() *cobra.Command {
	socket := launch.DefaultConfig().Socket
	cmd := &cobra.Command{
		Use:   "discover-hosts",
		Short: "Print the current generation's members as host:slots lines, for horovodrun",
		Long: `discover-hosts prints one "host:slots" line per member of the current
generation, in ring order: the format horovodrun --host-discovery-script
reads. It prints nothing while there is no generation, and exits non-zero
only when the sidecar cannot be reached.`,
		Example: `  horovodrun -np 8 --min-np 4 --host-discovery-script 'ringside discover-hosts' python train.py`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := client.New(socket).Rendezvous(cmd.Context(), 0, 0)
			if errors.Is(err, client.ErrNoGeneration) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, m := range r.Members {
				fmt.Fprintf(cmd.OutOrStdout(), "%s:%d\n", m.Addr, m.Slots)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&socket, "socket", socket, "the sidecar's API socket")
	return cmd
}
