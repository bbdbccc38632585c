package bench

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestInRunBaseline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// samples every 100ms at rate steps/s from `from` for d, in gen.
	run := func(from time.Duration, d time.Duration, gen int64, rate float64, top0 int64, full bool) []rateSample {
		var out []rateSample
		for x := time.Duration(0); x <= d; x += 100 * time.Millisecond {
			out = append(out, rateSample{at: t0.Add(from + x), top: top0 + int64(rate*x.Seconds()), gen: gen, fullWorld: full})
		}
		return out
	}
	tests := []struct {
		name    string
		samples []rateSample
		want    float64
		windows int
	}{
		{"one long generation: its rate after the first second", run(0, 10*time.Second, 1, 20, 0, true), 20, 1},
		{"a stall between two generations does not count",
			append(run(0, 5*time.Second, 1, 20, 0, true), run(6*time.Second, 5*time.Second, 2, 20, 100, true)...), 20, 2},
		{"a generation short of the full world does not count",
			append(run(0, 5*time.Second, 1, 10, 0, true), run(6*time.Second, 5*time.Second, 2, 40, 50, false)...), 10, 1},
		{"a window under two seconds does not count", run(0, 2500*time.Millisecond, 1, 20, 0, true), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rates, _ := inRunBaseline(tt.samples)
			if math.Abs(got-tt.want) > 0.5 || len(rates) != tt.windows {
				t.Errorf("got %.2f steps/s over %d windows, want %.2f over %d", got, len(rates), tt.want, tt.windows)
			}
		})
	}
}

func TestReadTrainerCosts(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"w0-1.jsonl": `{"member":"w0","generation":1,"sync_bytes":0,"commits":10,"commit_s":0.01}
{"member":"w0","generation":2,"sync_bytes":300,"commits":20,"commit_s":0.02}
`,
		"w1-2.jsonl": `{"member":"w1","generation":2,"sync_bytes":300,"commits":10,"commit_s":0.04}
{"member":"w1","generation":3,"sync_bytes":100,"commits":30,"commit`, // cut by a kill
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := readTrainerCosts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(c.CommitMs-2.0) > 1e-9 { // (0.02 + 0.04) s over 30 commits
		t.Errorf("commit %.3f ms, want 2", c.CommitMs)
	}
	if p50, top := syncBytesFigures(c); p50 != 300 || top != 300 || c.Generations != 2 {
		t.Errorf("sync bytes p50 %d max %d over %d generations, want 300, 300, 2", p50, top, c.Generations)
	}
}
