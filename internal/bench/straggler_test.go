package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/testbin"
)

func TestStragglerRefusesBadConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*StragglerConfig)
		want string
	}{
		{"two workers", func(c *StragglerConfig) { c.Workers = 2 }, "--workers 2"},
		{"a slow-down below the factor", func(c *StragglerConfig) { c.Slow = 1.2 }, "--slow 1.2"},
		{"a negative clean run", func(c *StragglerConfig) { c.Clean = -time.Second }, "--clean not negative"},
		{"a window of nothing", func(c *StragglerConfig) { c.Straggler.Window = 0 }, "straggler window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultStragglerConfig()
			tc.edit(&cfg)
			_, err := Straggler(context.Background(), cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Straggler() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A short run: a clean job, then one whose last worker slows down at step
// 150; the leader names it (after it slowed), it drains and a new worker
// takes its place. The figures that
// matter come from the full-length run (`ringside bench straggler`), not
// from here.
func TestStragglerBenchNamesAndReplacesTheSlowWorker(t *testing.T) {
	trainer, err := testbin.Build(t.TempDir(), "ringtrainer", "github.com/ringside/ringside/examples/ringtrainer")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultStragglerConfig()
	cfg.Ringside, cfg.TrainerBin = ringside, trainer
	cfg.Workers, cfg.SlowFrom, cfg.Clean, cfg.After, cfg.Timeout = 4, 150, 5*time.Second, 3*time.Second, 5*time.Minute
	var progress strings.Builder
	res, err := Straggler(context.Background(), cfg, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	t.Logf("%s\n%s", res.Summary(), progress.String())
	if !res.Detected || res.DetectSteps <= 0 {
		t.Errorf("detected %v after %d steps: want it named after it slowed down", res.Detected, res.DetectSteps)
	}
	if res.CleanSamplesPerS <= 0 || res.BeforeSamplesPerS <= 0 || res.AfterSamplesPerS <= 0 || res.ReplaceS <= 0 {
		t.Errorf("a phase without goodput: %+v", res)
	}
	var b bytes.Buffer
	if err := WriteResult(&b, res, true); err != nil || !strings.HasPrefix(b.String(), `{"bench":"straggler","workers":4,`) || !strings.Contains(b.String(), `"clean_false_positives":`) {
		t.Errorf("JSON %q (%v)", b.String(), err)
	}
}
