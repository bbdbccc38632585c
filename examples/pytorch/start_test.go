package pytorch_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/localjob"
	"github.com/ringside/ringside/internal/testbin"
)

// TestWorkersArrivingApartFormOneGenerationAtStart starts three workers
// whose trainers attach 0, 2 and 4 s apart, as pods started together by
// one workload do, with the sidecars told the job's expected size: the job
// forms exactly one generation, of all three, before its first step. In
// restart mode (train.py under `ringside exec --preload torch`) a second
// formation would restart every process while it loads; in live mode (the
// Go ring trainer) it would re-form every group.
func TestWorkersArrivingApartFormOneGenerationAtStart(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		trainer func(t *testing.T) []string
	}{
		{"restart", func(t *testing.T) []string {
			requireTorch(t)
			return []string{ringsideBin, "exec", "--preload", "torch", "--",
				python, "train.py", "--mode", "restart", "--step-time", "0.05", "--collective-timeout", collectiveTimeout}
		}},
		{"live", func(t *testing.T) []string {
			bin, err := testbin.Build(t.TempDir(), "ringtrainer", "github.com/ringside/ringside/examples/ringtrainer")
			if err != nil {
				t.Fatal(err)
			}
			return []string{bin, "--step-time", "20ms"}
		}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			trainer := tc.trainer(t)
			dir := logDir(t, "ringside-start-")
			ctx, cancel := context.WithTimeout(context.Background(), importBound+resumeBound)
			defer cancel()
			job, err := localjob.Start(ctx, localjob.Config{
				Ringside: ringsideBin, Trainer: trainer, Job: "start-" + tc.mode, Dir: dir,
				SidecarArgs: []string{"--expected-size", "3"},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer job.Close()

			start := time.Now()
			for i := range 3 {
				// The scenario, not a wait for a result: workers 2 s apart.
				time.Sleep(time.Until(start.Add(time.Duration(i) * 2 * time.Second)))
				if _, err := job.AddWorker(ctx); err != nil {
					t.Fatal(err)
				}
			}
			first := firstStep(ctx, t, job)
			t.Logf("first step %.3fs after the first worker started: generation %d, world size %d",
				first.Time().Sub(start).Seconds(), first.Generation, first.World)
			g, writes := storedGeneration(ctx, t, job, "start-"+tc.mode)
			if writes != 1 || first.Generation != g.Number || first.World != 3 {
				t.Errorf("the first step was in generation %d at world size %d, and the generation key written %d times (last %d): want one generation, of all three",
					first.Generation, first.World, writes, g.Number)
			}
		})
	}
}

// firstStep returns the first step line any trainer of job printed.
func firstStep(ctx context.Context, t *testing.T, job *localjob.Job) localjob.Line {
	t.Helper()
	for {
		select {
		case l := <-job.Lines():
			if l.Event == "" && l.Step > 0 {
				return l
			}
		case <-ctx.Done():
			t.Fatalf("no trainer stepped: %v", ctx.Err())
		}
	}
}

// storedGeneration returns job's generation and how many times its key
// was written: one per generation committed.
func storedGeneration(ctx context.Context, t *testing.T, job *localjob.Job, name string) (*record.Generation, int64) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: job.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, record.Prefix("default", name)+record.GenerationKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the generation: %v (%d keys)", err, len(resp.Kvs))
	}
	g, err := record.DecodeGeneration(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return g, resp.Kvs[0].Version
}
