package bench

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestAutoscaleRingsideLeadsGoodputPerGPU(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		cfg := DefaultAutoscaleConfig()
		cfg.Seed = seed
		res, err := Autoscale(cfg)
		if err != nil {
			t.Fatal(err)
		}
		g := res.GoodputPerGPU
		if g.Ringside < g.HPACPU || g.Ringside < g.Fixed {
			t.Errorf("seed %d: goodput per GPU ringside %.1f, CPU-style HPA %.1f, fixed %.1f: want ringside highest", seed, g.Ringside, g.HPACPU, g.Fixed)
		}
		if res.Reversals > 1 {
			t.Errorf("seed %d: %d reversals within one stabilization window, want at most 1", seed, res.Reversals)
		}
		if res.ScaleEvents == 0 || res.MeanWorkers.HPACPU <= res.MeanWorkers.Ringside {
			t.Errorf("seed %d: %+v: want ringside to scale, and to a smaller job than the CPU-style HPA", seed, res)
		}
	}
}

func TestAutoscaleIsDeterministic(t *testing.T) {
	cfg := DefaultAutoscaleConfig()
	cfg.Duration = 30 * time.Minute
	a, err := Autoscale(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Autoscale(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs of seed %d differ:\n%+v\n%+v", cfg.Seed, a, b)
	}
	cfg.Seed = 2
	if c, _ := Autoscale(cfg); reflect.DeepEqual(a, c) {
		t.Error("seeds 1 and 2 gave the same run")
	}
}

func TestAutoscaleRejectsBadConfig(t *testing.T) {
	for name, f := range map[string]func(*AutoscaleConfig){
		"min above max":          func(c *AutoscaleConfig) { c.Min, c.Max = 8, 4 },
		"max off the unit":       func(c *AutoscaleConfig) { c.Unit, c.Max = 4, 30 },
		"a fixed size above max": func(c *AutoscaleConfig) { c.Fixed = 64 },
		"a target above 1":       func(c *AutoscaleConfig) { c.TargetEfficiency = 1.5 },
		"a sync longer than the run": func(c *AutoscaleConfig) {
			c.Duration, c.SyncPeriod = time.Minute, time.Hour
		},
		"low capacity above capacity": func(c *AutoscaleConfig) { c.LowCapacity = 64 },
	} {
		cfg := DefaultAutoscaleConfig()
		f(&cfg)
		if _, err := Autoscale(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestReversalsCountsDirectionChangesWithinAWindow(t *testing.T) {
	ev := func(t int, up bool) scaleEvent { return scaleEvent{t, up} }
	for _, tt := range []struct {
		name      string
		events    []scaleEvent
		most, all int
	}{
		{"growth only", []scaleEvent{ev(0, true), ev(15, true), ev(30, true)}, 0, 0},
		{"up then down within the window", []scaleEvent{ev(0, true), ev(120, false)}, 1, 1},
		{"up then down a window apart", []scaleEvent{ev(0, true), ev(300, false)}, 0, 1},
		{"two changes in one window", []scaleEvent{ev(0, true), ev(100, false), ev(200, true)}, 2, 2},
		{"changes spread out", []scaleEvent{ev(0, true), ev(100, false), ev(400, true), ev(500, false)}, 1, 3},
	} {
		most, all := reversals(tt.events, 300*time.Second)
		if most != tt.most || all != tt.all {
			t.Errorf("%s: %d in a window, %d in all; want %d, %d", tt.name, most, all, tt.most, tt.all)
		}
	}
}

func TestAutoscaleSummary(t *testing.T) {
	cfg := DefaultAutoscaleConfig()
	cfg.Duration = 10 * time.Minute
	res, err := Autoscale(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteResult(&b, res, true); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), `{"bench":"autoscale","goodput_per_gpu":{"ringside":`) || !strings.Contains(b.String(), `"reversals":`) || !strings.Contains(b.String(), `"scale_events":`) {
		t.Errorf("JSON line %s", b.String())
	}
	if s := res.Summary(); !strings.Contains(s, "ringside") || !strings.Contains(s, "fixed") {
		t.Errorf("summary %q", s)
	}
}
