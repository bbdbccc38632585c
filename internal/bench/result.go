package bench

import (
	"encoding/json"
	"fmt"
	"io"
)

// Result is what a benchmark returns: one JSON line for scripts and the
// figures that matter in one sentence for people.
type Result interface {
	Summary() string
}

var (
	_ Result = RendezvousResult{}
	_ Result = DetectResult{}
	_ Result = RecoveryResult{}
	_ Result = GoodputResult{}
)

// WriteResult writes res as one JSON line, or its summary when asJSON is
// false.
func WriteResult(w io.Writer, res Result, asJSON bool) error {
	line := res.Summary()
	if asJSON {
		b, err := json.Marshal(res)
		if err != nil {
			return fmt.Errorf("encode result: %w", err)
		}
		line = string(b)
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// Summary says how long after the last join every member held the full
// generation, beyond the settle window, and what it cost etcd.
func (r RendezvousResult) Summary() string {
	return fmt.Sprintf("%d members: every member held the full generation %.3fs after the last join (settle window %.3fs, %.3fs beyond it); %d generations, %d etcd puts, %d txns",
		r.Members, r.JoinToCommitS, r.SettleS, r.JoinToCommitS-r.SettleS, r.Generations, r.EtcdPuts, r.EtcdTxns)
}

// Summary gives the detection and commit percentiles, the false alarms
// and the idle sidecars' footprint.
func (r DetectResult) Summary() string {
	return fmt.Sprintf("%d members, %d runs of %d kills: detected p50 %.3fs p95 %.3fs, committed p50 %.3fs p95 %.3fs; %d false suspicions, %d false evictions; the median sidecar idles at %.1f MiB RSS (%.1f MiB its own), %.2f%% CPU (the busiest %.2f%%)",
		r.Members, r.Runs, r.Kills, r.DetectP50S, r.DetectP95S, r.CommitP50S, r.CommitP95S, r.FalseSuspicions, r.FalseEvictions, r.SidecarRSSMiB, r.SidecarAnonMiB, r.SidecarCPUPct, r.SidecarCPUMaxPct)
}

// Summary gives the fault-to-resume percentiles, a newcomer's time to
// train and the steps a drain lost.
func (r RecoveryResult) Summary() string {
	return fmt.Sprintf("%d workers, %d x %s: resumed p50 %.3fs p95 %.3fs; join to train p50 %.3fs; drain lost %d steps",
		r.Workers, r.Kills, r.Fault, r.KillToResumeP50S, r.KillToResumeP95S, r.JoinToTrainP50S, r.DrainLostSteps)
}

// Summary gives the goodput, by steps and by samples, and the stalls.
func (r GoodputResult) Summary() string {
	return fmt.Sprintf("%d workers, %d x %s in %.0fs: goodput %.3f (%d useful of %.0f undisturbed steps), sample goodput %.3f; stall p50 %.3fs, max %.3fs",
		r.Workers, r.Faults, r.Fault, r.DurationS, r.Goodput, r.UsefulSteps, r.ExpectedSteps, r.SampleGoodput, r.StallP50S, r.StallMaxS)
}
