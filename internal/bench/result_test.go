package bench

import (
	"strings"
	"testing"
)

func TestWriteResult(t *testing.T) {
	tests := []struct {
		name   string
		res    Result
		asJSON bool
		want   string
	}{
		{"rendezvous for people", RendezvousResult{Members: 1000, SettleS: 0.5, JoinToCommitS: 0.6234, Generations: 3, EtcdPuts: 1002, EtcdTxns: 4}, false,
			"1000 members: every member held the full generation 0.623s after the last join (settle window 0.500s, 0.123s beyond it); 3 generations, 1002 etcd puts, 4 txns\n"},
		{"rendezvous as JSON", RendezvousResult{Bench: "rendezvous", Members: 2, SettleS: 0.5, JoinToCommitS: 0.75, JoinS: 0.01}, true,
			`{"bench":"rendezvous","members":2,"settle_s":0.5,"join_to_commit_s":0.75,"etcd_txns":0,"etcd_puts":0,"generations":0,"join_s":0.01}` + "\n"},
		{"detect", DetectResult{Members: 8, Runs: 2, Kills: 5, DetectP50S: 1.2, DetectP95S: 1.5, CommitP50S: 1.3, CommitP95S: 1.7, FalseSuspicions: 3, FalseEvictions: 1, SidecarRSSMiB: 31.25, SidecarAnonMiB: 9.5, SidecarCPUPct: 0.5, SidecarCPUMaxPct: 0.75}, false,
			"8 members, 2 runs of 5 kills: detected p50 1.200s p95 1.500s, committed p50 1.300s p95 1.700s; 3 false suspicions, 1 false evictions; the median sidecar idles at 31.2 MiB RSS (9.5 MiB its own), 0.50% CPU (the busiest 0.75%)\n"},
		{"recovery", RecoveryResult{Workers: 8, Kills: 8, Fault: "kill", KillToResumeP50S: 1.1, KillToResumeP95S: 2.2, JoinToTrainP50S: 3.3, DrainLostSteps: 0}, false,
			"8 workers, 8 x kill: resumed p50 1.100s p95 2.200s; join to train p50 3.300s; drain lost 0 steps\n"},
		{"goodput", GoodputResult{Workers: 4, Faults: 6, Fault: "stop", DurationS: 120, Goodput: 0.9, UsefulSteps: 900, ExpectedSteps: 1000, SampleGoodput: 0.85, StallP50S: 2, StallMaxS: 4.5}, false,
			"4 workers, 6 x stop in 120s: goodput 0.900 (900 useful of 1000 undisturbed steps), sample goodput 0.850; stall p50 2.000s, max 4.500s\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteResult(&b, tt.res, tt.asJSON); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got  %q\nwant %q", b.String(), tt.want)
			}
		})
	}
}
