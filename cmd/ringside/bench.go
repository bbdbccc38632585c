package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/bench"
	"github.com/ringside/ringside/internal/chaos"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure ringside against its targets; each prints one JSON line last",
	}
	cmd.AddCommand(newBenchRendezvousCmd(), newBenchDetectCmd(), newBenchRecoveryCmd(), newBenchGoodputCmd(), newBenchChaosCmd(), newBenchAutoscaleCmd(), newBenchStragglerCmd(), newBenchPartitionCmd())
	return cmd
}

func newBenchRendezvousCmd() *cobra.Command {
	cfg := bench.DefaultRendezvousConfig()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rendezvous",
		Short: "Join N in-process members to an embedded etcd and time the generation that holds them all",
		Example: `  ringside bench rendezvous --members 1000 --json
  ringside bench rendezvous --members 10000 --ttl 10s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := bench.Rendezvous(cmd.Context(), cfg, os.Stderr)
			if err != nil {
				return err
			}
			return bench.WriteResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Members, "members", cfg.Members, "number of members")
	f.DurationVar(&cfg.Settle, "settle", cfg.Settle, "leader's settle window for joins")
	f.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "members' lease TTL (whole seconds)")
	f.IntVar(&cfg.Clients, "clients", cfg.Clients, "etcd clients the members share")
	f.IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "concurrent joins")
	f.BoolVar(&cfg.NoFsync, "unsafe-no-fsync", false, "run etcd without fsync")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up after this long")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON line")
	return cmd
}

func newBenchDetectCmd() *cobra.Command {
	cfg := bench.DefaultDetectConfig()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "detect",
		Short: "Kill -9 sidecar processes and time gossip detection and the generation without them",
		Long: `detect starts an embedded etcd and N sidecar processes of this binary, each
on its own loopback address; lets them idle (one sidecar's RSS and CPU),
then SIGKILLs one at a time and measures when every survivor was told the
victim is dead and when every survivor held the generation without it,
from the signal to the time each survivor's sidecar stamped on its event. A
new member replaces each victim. --runs repeats all of it, each time on a
fresh job. Every --node-size sidecars run their own copy of the executable,
as the pods of one node share their image and pods of different nodes share
nothing.

Throughout, it watches the job's keys in etcd and counts false alarms:
false suspicions (a vote against a member whose process was alive) and
false evictions (a generation that left out a member whose process was
alive and its network up). The JSON line gives them per run (per_run) and
in total, with the detection percentiles over every kill of every run.`,
		Example: `  ringside bench detect --members 8 --kills 5 --json
  ringside bench detect --members 32 --runs 20 --kills 3 --idle 20s --load 2 --json
  ringside bench detect --members 32 --load 2 --idle 20s --log-dir /tmp/detect --json   # keep the sidecars' logs
  ringside bench detect --members 8 --load 4 --idle 10m --json   # false alarms with every core busy`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			res, err := bench.Detect(cmd.Context(), cfg, os.Stderr)
			if err != nil {
				return err
			}
			return bench.WriteResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Members, "members", cfg.Members, fmt.Sprintf("sidecar processes (2-%d)", bench.MaxDetectMembers))
	f.IntVar(&cfg.Kills, "kills", cfg.Kills, "SIGKILLs per run, one at a time")
	f.IntVar(&cfg.Runs, "runs", cfg.Runs, fmt.Sprintf("runs, each on a fresh job (1-%d)", bench.MaxDetectRuns))
	f.DurationVar(&cfg.Idle, "idle", cfg.Idle, "idle time per run, for false alarms and resource use")
	f.IntVar(&cfg.Load, "load", cfg.Load, "busy processes spinning on the CPU while the job idles and members are killed (0: none)")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up on a run after this long")
	f.StringVar(&cfg.LogDir, "log-dir", "", "keep every sidecar's log in this directory, one subdirectory per run with --runs (default: a temporary one, removed)")
	f.IntVar(&cfg.NodeSize, "node-size", cfg.NodeSize, "sidecars per simulated node: each node's sidecars run a copy of this executable of their own, as pods of different nodes share no pages (0: all run this one)")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON line")
	return cmd
}

func newBenchRecoveryCmd() *cobra.Command {
	cfg := bench.DefaultRecoveryConfig()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "recovery",
		Short: "Kill (or freeze) training workers and time until the survivors train again",
		Long: `recovery runs N workers (a sidecar process and a ring all-reduce trainer
process each, on their own loopback addresses) against an embedded etcd,
then SIGKILLs (--fault kill) or SIGSTOPs (--fault stop) one worker at a time,
or SIGKILLs its trainer process alone, its sidecar alive (--fault trainer),
rotating through the ranks, and measures from the fault until every survivor
finished a step at the smaller world size (in restart mode after a trainer
kill: until every worker, the victim's script restarted by exec, finished a
step at the same world size). A new worker replaces each victim
(join_to_train: its start to its first step in the full ring). Last, one
worker drains; drain_lost_steps counts steps the survivors had to redo.

--trainer pytorch runs examples/pytorch/train.py (an MLP under
DistributedDataParallel, gloo on CPU) with Debian's python3-torch: in live
mode through ringside.elastic.run, in restart mode (--mode restart) under
` + "`ringside exec --preload torch`" + `, restarted from its checkpoint on every generation.`,
		Example: `  ringside bench recovery --trainer go --workers 8 --kills 8 --json
  ringside bench recovery --trainer go --workers 8 --kills 4 --fault stop --json
  ringside bench recovery --trainer pytorch --workers 8 --kills 8 --json
  ringside bench recovery --trainer pytorch --workers 8 --kills 4 --mode restart --pause 15s --json
  ringside bench recovery --trainer pytorch --workers 4 --kills 8 --mode restart --fault trainer --pause 5s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bench.CheckFault(cfg.Fault, cfg.Mode); err != nil {
				return fmt.Errorf("--fault: %w", err)
			}
			res, err := bench.Recovery(cmd.Context(), cfg, os.Stderr)
			if err != nil {
				return err
			}
			return bench.WriteResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	f := cmd.Flags()
	trainerFlags(cmd, &cfg.TrainerSpec)
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "workers")
	f.IntVar(&cfg.Kills, "kills", cfg.Kills, "faults, one at a time")
	f.StringVar(&cfg.Fault, "fault", cfg.Fault, "kill (SIGKILL of the worker), stop (SIGSTOP of the worker: a silent peer) or trainer (SIGKILL of its trainer process alone)")
	f.DurationVar(&cfg.Pause, "pause", cfg.Pause, "how long the full job trains before each fault (lets restart mode's --preload processes get ready)")
	f.DurationVar(&cfg.Settle, "settle", cfg.Settle, "the leader's settle window for joins")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up after this long")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON line")
	return cmd
}

func newBenchStragglerCmd() *cobra.Command {
	cfg := bench.DefaultStragglerConfig()
	var asJSON bool
	policy := string(cfg.Straggler.Action)
	cmd := &cobra.Command{
		Use:   "straggler",
		Short: "Slow one training worker down and time until the leader names it, count false positives, and measure goodput around its replacement",
		Long: `straggler runs N workers (a sidecar process and a ring all-reduce trainer
process each, on their own loopback addresses) against an embedded etcd, twice.

First a clean run of --clean (0: none): every member the leader names a
straggler in it is a false positive; its goodput (samples per second, every
step counting the world size it ran at) is the reference.

Then a run where one trainer computes --slow times as long from step
--slow-from on: detect_steps counts the job's steps from that step until the
leader named it (the window, --straggler-window, plus up to one status
interval). With --straggler-policy replace (the default) its sidecar drains
it out of the ring, no step lost, and a new worker takes its place, as its
pod's controller would recreate it elsewhere; goodput is measured before the
slow-down, while it slows the ring, while it is replaced (world-1), and for
--after once the ring is whole again. after_vs_clean compares the last with
the clean run.`,
		Example: `  ringside bench straggler --workers 8 --slow 1.5 --json
  ringside bench straggler --workers 4 --slow 1.5 --clean 30s --after 20s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			action, err := record.ParseStragglerAction(policy)
			if err != nil {
				return fmt.Errorf("--straggler-policy: %w", err)
			}
			cfg.Straggler.Action = action
			res, err := bench.Straggler(cmd.Context(), cfg, os.Stderr)
			if err != nil {
				return err
			}
			return bench.WriteResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "workers (at least 3)")
	f.Float64Var(&cfg.Slow, "slow", cfg.Slow, "the straggler computes this many times as long as the others (above --straggler-factor)")
	f.Int64Var(&cfg.SlowFrom, "slow-from", cfg.SlowFrom, "the straggler's first slow step")
	f.DurationVar(&cfg.StepTime, "step-time", cfg.StepTime, "the trainers' simulated compute per step")
	f.DurationVar(&cfg.Clean, "clean", cfg.Clean, "length of the clean run that counts false positives (0: skip it)")
	f.DurationVar(&cfg.After, "after", cfg.After, "how long goodput is measured once the straggler's replacement trains")
	f.DurationVar(&cfg.StatusInterval, "status-interval", cfg.StatusInterval, "the sidecars' --status-interval: detection waits up to one interval past the window")
	f.StringVar(&policy, "straggler-policy", policy, "the sidecars' --straggler-policy: replace, or report (named only)")
	f.Float64Var(&cfg.Straggler.Factor, "straggler-factor", cfg.Straggler.Factor, "the sidecars' --straggler-factor")
	f.Int64Var(&cfg.Straggler.Window, "straggler-window", cfg.Straggler.Window, "the sidecars' --straggler-window (steps)")
	f.StringVar(&cfg.TrainerBin, "trainer-bin", "", "ring trainer binary (default: ringtrainer next to ringside, or in PATH)")
	f.StringVar(&cfg.LogDir, "log-dir", "", "keep every process's log in this directory (default: a temporary one, removed)")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up after this long")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON line")
	return cmd
}

// trainerFlags are the flags that pick a benchmark's trainer.
func trainerFlags(cmd *cobra.Command, spec *bench.TrainerSpec) {
	f := cmd.Flags()
	f.StringVar(&spec.Trainer, "trainer", spec.Trainer, "trainer: go (the ring all-reduce trainer) or pytorch (examples/pytorch/train.py)")
	f.StringVar(&spec.Mode, "mode", spec.Mode, "live (the trainer re-forms in place) or restart (pytorch only: under `ringside exec`)")
	f.StringVar(&spec.TrainerBin, "trainer-bin", "", "ring trainer binary (default: ringtrainer next to ringside, or in PATH)")
	f.StringVar(&spec.Python, "python", spec.Python, "the Python with torch that runs the pytorch trainer")
	f.StringVar(&spec.Script, "trainer-script", "", "the pytorch trainer (default: examples/pytorch/train.py here or next to ringside)")
	f.DurationVar(&spec.StepTime, "step-time", spec.StepTime, "the trainers' simulated compute per step")
	f.StringVar(&spec.LogDir, "log-dir", "", "keep every process's log (and its JSON lines) in this directory (default: a temporary one, removed)")
}

func newBenchGoodputCmd() *cobra.Command {
	cfg := bench.DefaultGoodputConfig()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "goodput",
		Short: "Fault a training job at a fixed interval and measure its useful steps against an undisturbed run",
		Long: `goodput runs N workers (a sidecar process and a trainer process each) against
an embedded etcd, measures their undisturbed step rate for --baseline, then
for --duration SIGKILLs (or SIGSTOPs) one worker every --kill-every, rotating
through the ranks (rank 0 included), and starts a replacement at once, as a
pod's controller would. goodput = useful steps (how far the job's step
counter advanced) / the steps the undisturbed job makes in the same time;
sample_goodput weighs each step by the world size it ran at.`,
		Example: `  ringside bench goodput --trainer pytorch --workers 8 --duration 10m --kill-every 60s --json
  ringside bench goodput --trainer pytorch --workers 4 --duration 2m --kill-every 20s --baseline 20s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := bench.Goodput(cmd.Context(), cfg, os.Stderr)
			if err != nil {
				return err
			}
			return bench.WriteResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	trainerFlags(cmd, &cfg.TrainerSpec)
	f := cmd.Flags()
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "workers")
	f.DurationVar(&cfg.Baseline, "baseline", cfg.Baseline, "how long the undisturbed job is measured first")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "the disturbed phase")
	f.DurationVar(&cfg.KillEvery, "kill-every", cfg.KillEvery, "one fault per interval")
	f.StringVar(&cfg.Fault, "fault", cfg.Fault, "kill (SIGKILL) or stop (SIGSTOP, then SIGKILL once the job stepped again)")
	f.DurationVar(&cfg.Settle, "settle", cfg.Settle, "the leader's settle window for joins")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up after this long")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON line")
	return cmd
}

func newBenchChaosCmd() *cobra.Command {
	cfg := chaos.DefaultConfig()
	var asJSON bool
	faults := "all"
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Play a seeded random schedule of faults on a training job and check the recorded history",
		Long: `chaos runs N workers (a sidecar process and a ring all-reduce trainer process
each, on their own loopback addresses) against an etcd in a process of its own,
and plays --events events drawn with --seed from --faults: SIGKILL or SIGSTOP
(SIGCONT after a while) of a worker, of the leader, of several workers at once,
of only the trainer or only the sidecar; drains (SIGTERM); scale-ups; etcd
killed and restarted on the same data and port, or frozen. Dead workers are
replaced, so the job keeps going. It records every generation commit, every
generation a sidecar streamed to its trainer, every eviction and every step,
checks the generation history with porcupine and counts deadlocks,
divergences, lost committed steps, split brain, spurious generations and live
evictions; the time from each fault until every survivor steps again gives
the resume figures. Each violation is printed on stderr.`,
		Example: `  ringside bench chaos --workers 8 --events 100 --seed 1 --json
  ringside bench chaos --workers 4 --events 10 --faults kill,kill-leader,stop --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kinds, err := chaos.ParseKinds(faults)
			if err != nil {
				return err
			}
			cfg.Kinds = kinds
			res, err := chaos.Run(cmd.Context(), cfg, os.Stderr)
			if err != nil {
				return err
			}
			return bench.WriteResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "workers the job keeps")
	f.IntVar(&cfg.Events, "events", cfg.Events, "events of the schedule")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the schedule")
	f.StringVar(&faults, "faults", faults, "comma-separated fault kinds to draw from, or all: "+strings.Join(kindNames(), ", "))
	f.StringVar(&cfg.TrainerBin, "trainer-bin", "", "ring trainer binary (default: ringtrainer next to ringside, or in PATH)")
	f.DurationVar(&cfg.StepTime, "step-time", cfg.StepTime, "the trainers' simulated compute per step")
	f.DurationVar(&cfg.Settle, "settle", cfg.Settle, "the leader's settle window for joins")
	f.IntVar(&cfg.Min, "min", cfg.Min, "the policy's smallest world size")
	f.Float64Var(&cfg.HoldScale, "hold-scale", cfg.HoldScale, "stretch each freeze and etcd outage (drawn between 1 and 4 s) by this factor")
	f.DurationVar(&cfg.Check.DeadlockAfter, "deadlock-after", cfg.Check.DeadlockAfter, "a stall of training longer than this is a deadlock")
	f.DurationVar(&cfg.Check.DivergenceBound, "divergence-bound", cfg.Check.DivergenceBound, "how long live members may disagree on the generation")
	f.StringVar(&cfg.LogDir, "log-dir", "", "keep every process's log in this directory (default: a temporary one, removed)")
	f.BoolVar(&cfg.RequireAll, "require-all", os.Getenv("CI") == "true", "fail when a fault kind cannot be played here instead of leaving it out (default: CI=true)")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up after this long")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON line")
	return cmd
}

func newBenchAutoscaleCmd() *cobra.Command {
	cfg := bench.DefaultAutoscaleConfig()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "autoscale",
		Short: "Simulate a training job under the ringside policy, a CPU-style HPA and a fixed size, and compare goodput per GPU",
		Long: `autoscale simulates one training job for --duration, with a sync every
--sync-period, under three controllers that see the same cluster: the
ringside policy (the ElasticScaler's Observe and Decide, default behavior), a
HorizontalPodAutoscaler on CPU utilization (a training worker reads about
--cpu-utilization at any size, so it grows to --max), and a fixed size
(--fixed, default the midpoint of [--min, --max]).

The job's throughput bends with communication cost, n*rate/(1 + comm-cost*(n-1))
samples/s, read with --noise and stragglers' outliers; its gradient noise scale
grows from --gns-start to --gns-end, so the statistical efficiency
(gns + batch)/(gns + n*batch) of a bigger batch rises as training goes on.
--preemptions each kill 1-4 pods and withhold their GPUs for 5-20 minutes;
--pending-periods each cut the GPUs free for the job to --low-capacity for
20-40 minutes, leaving pods Pending. Every change of the members costs
--reform-time of training.

goodput_per_gpu = useful samples (samples x statistical efficiency) / GPU-seconds
allocated (placed pods hold a GPU, pending ones do not). reversals is the most
direction changes of ringside's scale events within one scale-down
stabilization window (300 s). The run is deterministic given --seed.`,
		Example: `  ringside bench autoscale --json
  ringside bench autoscale --seed 2 --duration 8h --comm-cost 0.02
  ringside bench autoscale --max 64 --unit 4 --preemptions 20 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := bench.Autoscale(cfg)
			if err != nil {
				return err
			}
			return bench.WriteResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the traces and the measurement noise")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "simulated time")
	f.DurationVar(&cfg.SyncPeriod, "sync-period", cfg.SyncPeriod, "how often each controller decides")
	f.Int32Var(&cfg.Min, "min", cfg.Min, "fewest replicas")
	f.Int32Var(&cfg.Max, "max", cfg.Max, "most replicas")
	f.Int32Var(&cfg.Unit, "unit", cfg.Unit, "step of every change (min and max are multiples of it)")
	f.Int32Var(&cfg.Fixed, "fixed", cfg.Fixed, "the fixed baseline's replicas (0: the midpoint of [min, max])")
	f.Float64Var(&cfg.TargetEfficiency, "target-efficiency", cfg.TargetEfficiency, "the ringside policy's least marginal efficiency of one more unit")
	f.Float64Var(&cfg.RatePerWorker, "rate", cfg.RatePerWorker, "one worker's samples per second")
	f.Float64Var(&cfg.CommCost, "comm-cost", cfg.CommCost, "communication cost per extra worker: throughput n*rate/(1 + comm-cost*(n-1))")
	f.Float64Var(&cfg.BatchPerWorker, "batch", cfg.BatchPerWorker, "samples per step of one worker")
	f.Float64Var(&cfg.GNSStart, "gns-start", cfg.GNSStart, "gradient noise scale (samples) at the start")
	f.Float64Var(&cfg.GNSEnd, "gns-end", cfg.GNSEnd, "gradient noise scale (samples) at the end")
	f.Float64Var(&cfg.Noise, "noise", cfg.Noise, "relative standard deviation of a throughput reading")
	f.Float64Var(&cfg.OutlierRate, "outlier-rate", cfg.OutlierRate, "share of readings a straggler cuts to 30%")
	f.DurationVar(&cfg.StartupTime, "startup-time", cfg.StartupTime, "from a pod placed to its worker in the job")
	f.DurationVar(&cfg.ReformTime, "reform-time", cfg.ReformTime, "training lost at every change of the members")
	f.DurationVar(&cfg.DrainTime, "drain-time", cfg.DrainTime, "how long a leaving pod holds its GPU")
	f.IntVar(&cfg.Preemptions, "preemptions", cfg.Preemptions, "preemptions over the run (each kills 1-4 pods, their GPUs withheld 5-20 min)")
	f.IntVar(&cfg.PendingPeriods, "pending-periods", cfg.PendingPeriods, "capacity shortages over the run (20-40 min at --low-capacity)")
	f.Int32Var(&cfg.Capacity, "capacity", cfg.Capacity, "GPUs the cluster has for the job")
	f.Int32Var(&cfg.LowCapacity, "low-capacity", cfg.LowCapacity, "GPUs the cluster has for the job during a shortage")
	f.DurationVar(&cfg.PendingTimeout, "pending-timeout", cfg.PendingTimeout, "the ringside policy's pendingTimeoutSeconds")
	f.Float64Var(&cfg.CPUUtilization, "cpu-utilization", cfg.CPUUtilization, "utilization a training worker reads at any size")
	f.Float64Var(&cfg.CPUTarget, "cpu-target", cfg.CPUTarget, "the CPU-style HPA's target utilization")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON line")
	return cmd
}

func kindNames() []string {
	names := make([]string, len(chaos.AllKinds))
	for i, k := range chaos.AllKinds {
		names[i] = string(k)
	}
	return names
}

func newBenchPartitionCmd() *cobra.Command {
	cfg := bench.DefaultPartitionConfig()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "partition",
		Short: "Partition a job's network (namespaces, veth pairs, iptables) and check it never splits",
		Long: `partition runs a job of N workers (a sidecar process and a ring all-reduce
trainer process each), every worker in a network namespace of its own,
joined by veth pairs to a bridge where an embedded etcd listens, and plays
these cases one after another on it, each cut for --cut, then healed:

  split   the job split in a majority and a minority (5|3 of 8), the
          minority (which holds the leader) cut off from etcd too
  alone   one member cut off from everything
  oneway  nobody hears one member (etcd neither); it hears everyone
  loss    every member's link loses --loss of its packets for --loss-for,
          and delays each packet it keeps by up to --jitter

It checks on every step line: a step is completed in one generation only
(never two sides training, no committed step lost), each generation's
members agree on it, the cut side trains in no generation of its own; the
side that keeps etcd and a majority trains again within 1s of the cut,
every member trains together again within 2s of the heal, and packet loss
alone evicts nobody. The JSON line gives the figures per case and what
broke; a broken promise also makes the command fail.

The jitter is a netfilter queue served in user space (every received
packet held for a time drawn uniformly from [0, --jitter]), so it needs no
sch_netem qdisc. It needs root. Namespaces, links
and rules are removed on exit, on Ctrl-C and on failure, and a crashed
run's are swept at the next start.`,
		Example: `  sudo bin/ringside bench partition --json
  sudo bin/ringside bench partition --cases split,alone --cut 5s --json
  sudo bin/ringside bench partition --cases loss --loss 0.05 --jitter 50ms --loss-for 1m --log-dir /tmp/partition --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			res, err := bench.Partition(cmd.Context(), cfg, os.Stderr)
			if res.Cases != nil {
				if werr := bench.WriteResult(cmd.OutOrStdout(), res, asJSON); werr != nil {
					return werr
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Members, "members", cfg.Members, fmt.Sprintf("workers (%d-%d)", bench.MinPartitionMembers, bench.MaxPartitionMembers))
	f.StringSliceVar(&cfg.Cases, "cases", cfg.Cases, "cases to play, in order: "+strings.Join(bench.PartitionCases, ","))
	f.DurationVar(&cfg.Cut, "cut", cfg.Cut, "how long the split, alone and oneway cases hold the cut")
	f.Float64Var(&cfg.Loss, "loss", cfg.Loss, "the fraction of packets each link loses in the loss case (0.05: 5%)")
	f.DurationVar(&cfg.Jitter, "jitter", cfg.Jitter, "in the loss case, the most each packet a member receives is delayed (uniformly from 0; 0: none)")
	f.DurationVar(&cfg.LossFor, "loss-for", cfg.LossFor, "how long the loss case lasts")
	f.DurationVar(&cfg.Settle, "settle", cfg.Settle, "the leader's settle window for joins")
	f.StringVar(&cfg.TrainerBin, "trainer-bin", "", "ring trainer binary (default: ringtrainer next to ringside, or in PATH)")
	f.DurationVar(&cfg.StepTime, "step-time", cfg.StepTime, "the trainers' simulated compute per step")
	f.StringVar(&cfg.LogDir, "log-dir", "", "keep every process's log in this directory (default: a temporary one, removed)")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up after this long")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON line")
	return cmd
}
