package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/netsplit"
	"github.com/ringside/ringside/internal/testbin"
)

// namespaces lists the network namespaces a partition run names (rsp<N>-).
func namespaces(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ip netns list: %v: %s", err, out)
		}
		t.Skipf("no network namespaces here: ip netns list: %v: %s", err, out)
	}
	return regexp.MustCompile(`(?m)^rsp\d+-\S+`).FindAllString(string(out), -1)
}

// A short run of every case on a job of 8: the split, a member cut off
// alone, a one-way cut, packet loss. The promises that do not depend on
// timing are asserted here: no step completed in two generations (no
// split, no committed step lost), every generation's members agree, the
// cut side never trains on its own, the majority trains again during the
// cut and everyone together after the heal, loss alone evicts nobody.
// How fast (resume within 1 s, rejoin within 2 s) is for the full run,
// `ringside bench partition`, to measure.
func TestPartitionNeverSplitsTheJob(t *testing.T) {
	if err := netsplit.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bench partition needs network namespaces under CI=true: %v", err)
		}
		t.Skip(err)
	}
	before := namespaces(t)
	trainer, err := testbin.Build(t.TempDir(), "ringtrainer", "github.com/ringside/ringside/examples/ringtrainer")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultPartitionConfig()
	cfg.Ringside, cfg.TrainerBin = ringside, trainer
	cfg.Cut, cfg.LossFor, cfg.Timeout = 4*time.Second, 8*time.Second, 3*time.Minute
	var progress testbin.Buffer
	res, err := Partition(context.Background(), cfg, &progress)
	if err != nil && !errors.Is(err, ErrPromiseBroken) {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	t.Logf("%s\n%s", res.Summary(), progress.String())
	if len(res.Cases) != len(PartitionCases) {
		t.Fatalf("%d cases played, want %d", len(res.Cases), len(PartitionCases))
	}
	for _, c := range res.Cases {
		if c.StepsInTwoGenerations != 0 || c.GenerationDisagreements != 0 || c.CutSideSteps != 0 {
			t.Errorf("%s: %d steps in two generations, %d disagreements, %d cut-side steps: %q",
				c.Case, c.StepsInTwoGenerations, c.GenerationDisagreements, c.CutSideSteps, c.Broken)
		}
		if c.RejoinS <= 0 {
			t.Errorf("%s: the job did not train together again after the heal: %q", c.Case, c.Broken)
		}
		if c.Case != CaseLoss && c.ResumeS <= 0 {
			t.Errorf("%s: the majority did not train again during the %.0fs cut", c.Case, c.DurationS)
		}
		if c.Case == CaseLoss && (c.FalseEvictions != 0 || c.Steps <= 0) {
			t.Errorf("loss: %d false evictions, %d steps: want none and some", c.FalseEvictions, c.Steps)
		}
	}
	var b bytes.Buffer
	if err := WriteResult(&b, res, true); err != nil || !strings.HasPrefix(b.String(), `{"bench":"partition","members":8,`) || !strings.Contains(b.String(), `"jitter":"each packet a member receives is held for a time drawn uniformly from [0, 50ms]`) {
		t.Errorf("JSON %q (%v)", b.String(), err)
	}
	if after := namespaces(t); len(after) > len(before) {
		t.Errorf("namespaces left behind: %q (before the run: %q)", after, before)
	}
}

func TestPartitionRefusesBadConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*PartitionConfig)
		want string
	}{
		{"too few members", func(c *PartitionConfig) { c.Members = 3 }, "--members 3 is out of range"},
		{"too many members", func(c *PartitionConfig) { c.Members = 33 }, "--members 33 is out of range"},
		{"an unknown case", func(c *PartitionConfig) { c.Cases = []string{"split", "flood"} }, `unknown case "flood"`},
		{"no case", func(c *PartitionConfig) { c.Cases = nil }, "--cases is empty"},
		{"a cut too short", func(c *PartitionConfig) { c.Cut = 100 * time.Millisecond }, "--cut 100ms"},
		{"loss as a percentage", func(c *PartitionConfig) { c.Loss = 5 }, "--loss 5 is out of range"},
		{"a negative jitter", func(c *PartitionConfig) { c.Jitter = -time.Millisecond }, "--jitter -1ms is out of range"},
		{"jitter in seconds", func(c *PartitionConfig) { c.Jitter = 50 * time.Second }, "--jitter 50s is out of range"},
		{"the pytorch trainer", func(c *PartitionConfig) { c.Trainer = "pytorch" }, "go ring trainer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultPartitionConfig()
			tc.edit(&cfg)
			_, err := Partition(context.Background(), cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Partition() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
