package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(Config) bool
		wantErr string
	}{
		{"defaults", nil, nil, func(c Config) bool { return c == DefaultConfig() }, ""},
		{"the environment sets the socket and the local rank", nil,
			map[string]string{"RINGSIDE_SOCKET": "/run/rs.sock", "LOCAL_RANK": "3"},
			func(c Config) bool { return c.Socket == "/run/rs.sock" && c.LocalRank == 3 }, ""},
		{"flags win over the environment", []string{"--socket", "/a.sock", "--local-rank", "1"},
			map[string]string{"RINGSIDE_SOCKET": "/run/rs.sock", "LOCAL_RANK": "3"},
			func(c Config) bool { return c.Socket == "/a.sock" && c.LocalRank == 1 }, ""},
		{"all flags", []string{"--port", "30000", "--vector", "7", "--step-time", "5ms", "--steps", "9"}, nil,
			func(c Config) bool {
				return c.Port == 30000 && c.Vector == 7 && c.StepTime == 5*time.Millisecond && c.Steps == 9
			}, ""},
		{"a communication cost per worker", []string{"--comm-cost-per-worker", "10ms"}, nil,
			func(c Config) bool { return c.CommCostPerWorker == 10*time.Millisecond }, ""},
		{"a straggler", []string{"--slow", "1.5", "--slow-from", "200"}, nil,
			func(c Config) bool { return c.Slow == 1.5 && c.SlowFrom == 200 }, ""},
		{"a slow factor below 1", []string{"--slow", "0.5"}, nil, nil, "--slow 0.5"},
		{"a negative slow-from", []string{"--slow-from", "-1"}, nil, nil, "--slow-from -1"},
		{"a negative communication cost", []string{"--comm-cost-per-worker", "-1ms"}, nil, nil, "--comm-cost-per-worker -1ms"},
		{"a local rank that is not a number", nil, map[string]string{"LOCAL_RANK": "one"}, nil, "LOCAL_RANK"},
		{"an empty vector", []string{"--vector", "0"}, nil, nil, "--vector 0"},
		{"a port past 65535 with the local rank", []string{"--port", "65535", "--local-rank", "1"}, nil, nil, "--port 65535"},
		{"a negative step time", []string{"--step-time", "-1s"}, nil, nil, "--step-time"},
		{"negative steps", []string{"--steps", "-1"}, nil, nil, "--steps"},
		{"an empty socket", []string{"--socket", ""}, nil, nil, "--socket is empty"},
		{"an unknown log format", []string{"--log-format", "xml"}, nil, nil, "--log-format"},
		{"an unknown flag", []string{"--bogus"}, nil, nil, "bogus"},
		{"a positional argument", []string{"train"}, nil, nil, `unexpected argument "train"`},
		{"every bad flag is named", []string{"--vector", "-1", "--steps", "-1"}, nil, nil, "--steps -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(cfg) {
				t.Errorf("unexpected config %+v", cfg)
			}
		})
	}
}

func TestComputeTimeGrowsWithTheWorld(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StepTime = 50 * time.Millisecond
	cfg.CommCostPerWorker = 10 * time.Millisecond
	for world, want := range map[int]time.Duration{
		1: 50 * time.Millisecond, 2: 60 * time.Millisecond, 8: 120 * time.Millisecond, 0: 50 * time.Millisecond,
	} {
		if got := cfg.computeTime(world, 1); got != want {
			t.Errorf("world %d: %s, want %s", world, got, want)
		}
	}
	cfg.CommCostPerWorker = 0
	if got := cfg.computeTime(8, 1); got != cfg.StepTime {
		t.Errorf("no communication cost: %s, want the step time %s", got, cfg.StepTime)
	}
}

func TestASlowTrainerComputesLongerFromItsSlowStep(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StepTime = 40 * time.Millisecond
	cfg.CommCostPerWorker = 10 * time.Millisecond
	cfg.Slow, cfg.SlowFrom = 1.5, 100
	for step, want := range map[int64]time.Duration{
		1: 50 * time.Millisecond, 99: 50 * time.Millisecond, 100: 70 * time.Millisecond, 5000: 70 * time.Millisecond,
	} {
		if got := cfg.computeTime(2, step); got != want {
			t.Errorf("step %d: %s, want %s (only the compute is slowed, not the communication)", step, got, want)
		}
	}
}
