package jobstatus

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/golden"

	"github.com/ringside/ringside/coordinator/record"
)

func age(s float64) *float64 { return &s }

func TestRenderMatchesTheGoldenFiles(t *testing.T) {
	at := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
	tests := []struct {
		golden string
		s      Snapshot
		opts   RenderOptions
	}{{
		golden: "ring",
		s: Snapshot{
			Job: "llama", Namespace: "default", Time: at, Revision: 42,
			Generation: 7, Reason: "w3 left", Leader: "w1", CommittedBy: "w1", WorldSize: 6, Master: "10.0.0.11:29507",
			Members: []Member{
				{ID: "w1", Addr: "10.0.0.11", Rank: 0, Slots: 2, State: record.StateActive, Step: 1200, SamplesPerSec: 1500, StepTimeP50S: 0.105, LastHeartbeatAgeS: age(0.4)},
				{ID: "w0", Addr: "10.0.0.10", Rank: 2, Slots: 2, State: record.StateDraining, Step: 1198, SamplesPerSec: 1499.96, StepTimeP50S: 0.1071, LastHeartbeatAgeS: age(0.95)},
				{ID: "w3", Addr: "10.0.0.13", Rank: 4, Slots: 2, State: record.StateGone},
				{ID: "worker-long-name-12", Addr: "10.0.0.112", Rank: -1, Slots: 1, State: record.StateWaiting},
			},
			Standby:  []string{"w8", "w9"},
			Totals:   Totals{SamplesPerSec: 2999.96},
			Warnings: []string{"/ringside/default/llama/status/w5: malformed status: unexpected end of JSON input"},
		},
		opts: RenderOptions{Notes: []string{"  0.0s  generation 7: w3 left", "  1.2s  recovered in 0.412s"}},
	}, {
		golden: "paused",
		s: Snapshot{
			Job: "llama", Namespace: "prod", Time: at, Generation: 3, Paused: true, Reason: "below min world size 4",
			WorldSize: 2, Master: "[fd00::1]:29503",
			Members: []Member{{ID: "w0", Addr: "fd00::1", Rank: 0, Slots: 2, State: record.StateActive, Step: 10, SamplesPerSec: 0, StepTimeP50S: 0, LastHeartbeatAgeS: age(12)}},
		},
	}, {
		golden: "stopped",
		s: Snapshot{
			Job: "llama", Namespace: "default", Time: at, Generation: 9, Reason: "stop: trainer crashes", Restarts: 2,
			Stopped:   "every worker exits 1 before its first step, 3 generations in a row: EOFError: Ran out of input, at train.py:31: snapshot = torch.load(path)",
			WorldSize: 2, Master: "10.0.0.10:29509",
			Members: []Member{
				{ID: "w0", Addr: "10.0.0.10", Rank: 0, Slots: 1, State: record.StateActive},
				{ID: "w1", Addr: "10.0.0.11", Rank: 1, Slots: 1, State: record.StateActive},
			},
		},
	}, {
		golden: "straggler",
		s: Snapshot{
			Job: "llama", Namespace: "default", Time: at, Generation: 4, Reason: "join w2", Leader: "w0", WorldSize: 3, Master: "10.0.0.10:29504",
			Members: []Member{
				{ID: "w0", Addr: "10.0.0.10", Rank: 0, Slots: 1, State: record.StateActive, Step: 140, SamplesPerSec: 13.3, StepTimeP50S: 0.075, LastHeartbeatAgeS: age(0.2)},
				{ID: "w1", Addr: "10.0.0.11", Rank: 1, Slots: 1, State: record.StateActive, Step: 140, SamplesPerSec: 13.3, StepTimeP50S: 0.075, LastHeartbeatAgeS: age(0.3)},
				{ID: "w2", Addr: "10.0.0.12", Rank: 2, Slots: 1, State: record.StateActive, Step: 140, SamplesPerSec: 13.3, StepTimeP50S: 0.075, LastHeartbeatAgeS: age(0.1)},
			},
			Stragglers: []Straggler{{Member: "w2", Straggler: record.Straggler{Generation: 4, SinceStep: 101, Step: 132,
				ComputeTimeS: 0.075, MedianComputeTimeS: 0.05, Action: record.ActionReplace, Node: "gpu-node-7", Leader: "w0", Time: at}}},
			Totals: Totals{SamplesPerSec: 39.9},
		},
	}, {
		golden: "waiting",
		s: Snapshot{
			Job: "llama", Namespace: "default", Time: at,
			Members: []Member{{ID: "w0", Addr: "10.0.0.10", Rank: -1, Slots: 1, State: record.StateWaiting}},
		},
	}, {
		golden: "empty",
		s:      Snapshot{Job: "typo", Namespace: "default", Members: []Member{}},
	}}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			var b bytes.Buffer
			if err := Render(&b, tt.s, tt.opts); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", tt.golden+".golden"), b.String())
		})
	}
}

func TestRenderLiveClearsOnlyATerminal(t *testing.T) {
	s := Snapshot{Job: "j", Namespace: "default", Members: []Member{}}
	var b bytes.Buffer
	if err := RenderLive(&b, s, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "\x1b") {
		t.Errorf("RenderLive wrote an escape sequence to a buffer: %q", b.String())
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Error("IsTerminal(regular file) = true")
	}
	if IsTerminal(nil) {
		t.Error("IsTerminal(nil) = true")
	}
}

func TestChangedIgnoresProgress(t *testing.T) {
	base := Snapshot{
		Job: "j", Namespace: "default", Generation: 2, WorldSize: 2,
		Members: []Member{{ID: "w0", Rank: 0, Slots: 1, State: record.StateActive}, {ID: "w1", Rank: 1, Slots: 1, State: record.StateActive}},
	}
	tests := []struct {
		name   string
		mutate func(*Snapshot)
		want   bool
	}{
		{"nothing changes", func(*Snapshot) {}, false},
		{"steps, throughput, heartbeat and time move on", func(s *Snapshot) {
			s.Time, s.Revision, s.Totals.SamplesPerSec = time.Now(), 9, 50
			s.Members[0].Step, s.Members[0].SamplesPerSec, s.Members[0].StepTimeP50S, s.Members[0].LastHeartbeatAgeS = 5, 50, 0.1, age(1)
		}, false},
		{"a member starts draining", func(s *Snapshot) { s.Members[1].State = record.StateDraining }, true},
		{"a new generation", func(s *Snapshot) { s.Generation = 3 }, true},
		{"the leader changes", func(s *Snapshot) { s.Leader = "w1" }, true},
		{"a warning appears", func(s *Snapshot) { s.Warnings = []string{"x"} }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := base
			cur.Members = append([]Member(nil), base.Members...)
			tt.mutate(&cur)
			if got := Changed(base, cur); got != tt.want {
				t.Errorf("Changed = %v, want %v", got, tt.want)
			}
			if base.Members[0].LastHeartbeatAgeS != nil || base.Members[1].State != record.StateActive {
				t.Fatal("Changed or the test modified the base snapshot")
			}
		})
	}
}
