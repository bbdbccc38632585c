package chaos

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/testbin"
)

// boundedKinds are the fault kinds of the bounded run in `make test`:
// every kind (partitions need root and iptables: without them the run
// leaves them out, except in CI, where it fails).
var boundedKinds = AllKinds

// runChaos plays cfg's schedule with the test's binaries and fails on any
// violation.
func runChaos(t *testing.T, cfg Config) Result {
	t.Helper()
	dir := t.TempDir()
	trainer, err := testbin.Build(dir, "ringtrainer", "github.com/ringside/ringside/examples/ringtrainer")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Ringside, cfg.TrainerBin = ringside, trainer
	cfg.RequireAll = os.Getenv("CI") == "true"
	var progress strings.Builder
	res, err := Run(context.Background(), cfg, &progress)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	t.Logf("%s\n%s", res.Summary(), progress.String())
	if len(res.Violations) > 0 {
		t.Fatalf("violations:\n%s", strings.Join(res.Violations, "\n"))
	}
	if res.Events != cfg.Events {
		t.Fatalf("played %d of %d events", res.Events, cfg.Events)
	}
	return res
}

// A gossip-only partition (etcd and the trainers' connections still work)
// evicts nobody and commits no generation: each side suspects the other,
// and every suspect refutes through etcd.
func TestGossipPartitionEvictsNobody(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	if err := canPartition(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skip(err)
	}
	cfg := DefaultConfig()
	cfg.Workers, cfg.Events, cfg.Seed, cfg.Kinds = 4, 2, 1, []Kind{Partition}
	cfg.HoldScale = 2 // 2-8 s: several probe rounds and suspicion timeouts on each side
	cfg.Timeout = 2 * time.Minute
	runChaos(t, cfg) // an eviction or a generation would be a violation
}

// TestChaosBoundedRunKeepsTheProtocol plays a few events on a small job and
// wants a history without a violation.
func TestChaosBoundedRunKeepsTheProtocol(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes for about a minute")
	}
	cfg := DefaultConfig()
	cfg.Workers, cfg.Events, cfg.Seed, cfg.Kinds = 4, 10, 1, boundedKinds
	cfg.Timeout = 90 * time.Second
	runChaos(t, cfg)
}
