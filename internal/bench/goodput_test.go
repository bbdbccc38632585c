package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestTrainerSpecRefusesWhatCannotRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec TrainerSpec
		want string
	}{
		{"an unknown trainer", TrainerSpec{Trainer: "jax", Mode: "live"}, `trainer "jax"`},
		{"an unknown mode", TrainerSpec{Trainer: "pytorch", Mode: "lazy"}, `mode "lazy"`},
		{"the go trainer in restart mode", TrainerSpec{Trainer: "go", Mode: "restart"}, "use --trainer pytorch"},
		{"a python without torch", TrainerSpec{Trainer: "pytorch", Mode: "live", Python: "/bin/false"}, "cannot import torch.distributed"},
		{"a missing script", TrainerSpec{Trainer: "pytorch", Mode: "live", Python: "/bin/true", Script: "/nonexistent/train.py"}, "trainer script"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.spec.command(t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("command() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestTrainerSpecCommands(t *testing.T) {
	dir := t.TempDir()
	spec := TrainerSpec{Trainer: "pytorch", Mode: "live", Python: "/bin/true", Script: "../../examples/pytorch/train.py",
		StepTime: 20 * time.Millisecond}
	live, err := spec.command(dir)
	if err != nil {
		t.Fatal(err)
	}
	if live[0] != "/bin/true" || !strings.HasSuffix(live[1], "examples/pytorch/train.py") || live[3] != "0.02" {
		t.Errorf("live command %q", live)
	}
	spec.Mode = "restart"
	restart, err := spec.command(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(restart[1:], " ")
	for _, want := range []string{"exec ", " -- /bin/true ", "--mode restart", "--checkpoint " + dir} {
		if !strings.Contains(got, want) {
			t.Errorf("restart command %q lacks %q", got, want)
		}
	}
}

func TestGoodputRefusesBadConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*GoodputConfig)
		want string
	}{
		{"an unknown fault", func(c *GoodputConfig) { c.Fault = "drop" }, `fault "drop"`},
		{"stop in restart mode", func(c *GoodputConfig) { c.Mode, c.Fault = "restart", "stop" }, "use --fault kill"},
		{"one worker", func(c *GoodputConfig) { c.Workers = 1 }, "at least 2 workers"},
		{"no interval", func(c *GoodputConfig) { c.KillEvery = 0 }, "--kill-every"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultGoodputConfig()
			tc.edit(&cfg)
			_, err := Goodput(context.Background(), cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Goodput() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
