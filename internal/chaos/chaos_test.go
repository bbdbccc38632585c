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
// every kind the harness plays here. Partitions need network namespaces
// the harness does not build yet.
var boundedKinds = []Kind{KillWorker, KillLeader, KillMany, StopWorker, StopLeader, KillTrainer, KillSidecar,
	Drain, ScaleUp, EtcdRestart, EtcdFreeze}

// TestChaosBoundedRunKeepsTheProtocol plays a few events on a small job and
// wants a history without a violation.
func TestChaosBoundedRunKeepsTheProtocol(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes for about a minute")
	}
	dir := t.TempDir()
	trainer, err := testbin.Build(dir, "ringtrainer", "github.com/ringside/ringside/examples/ringtrainer")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Ringside, cfg.TrainerBin = ringside, trainer
	cfg.Workers, cfg.Events, cfg.Seed, cfg.Kinds = 4, 10, 1, boundedKinds
	cfg.RequireAll = os.Getenv("CI") == "true"
	cfg.Timeout = 90 * time.Second
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
}
