package footprint

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // a fragment of the message; "" means valid
	}{
		{"the default config is valid", func(*Config) {}, ""},
		{"the zero config leaves the runtime alone and is valid", func(c *Config) { *c = Config{} }, ""},
		{"a collector turned off is valid", func(c *Config) { c.GCPercent = -1 }, ""},
		{"a GC percent below -1 is rejected", func(c *Config) { c.GCPercent = -2 }, "GC percent -2"},
		{"a negative memory limit is rejected", func(c *Config) { c.MemoryLimit = -1 }, "memory limit -1"},
		{"a negative max procs is rejected", func(c *Config) { c.MaxProcs = -1 }, "max procs -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			tt.edit(&cfg)
			err := cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestPlanLeavesWhatTheEnvironmentSet(t *testing.T) {
	t.Parallel()
	intp := func(v int) *int { return &v }
	tests := []struct {
		name  string
		cfg   Config
		env   map[string]string
		procs int // the runtime's GOMAXPROCS
		want  settings
	}{
		{
			name:  "the defaults are applied on a large node",
			cfg:   DefaultConfig(),
			procs: 96,
			want:  settings{gcPercent: intp(100), memoryLimit: 64 * MiB, maxProcs: 1},
		},
		{
			name:  "GOMAXPROCS is never raised",
			cfg:   Config{GCPercent: 100, MemoryLimit: 64 * MiB, MaxProcs: 4},
			procs: 2,
			want:  settings{gcPercent: intp(100), memoryLimit: 64 * MiB},
		},
		{
			name:  "GOGC, GOMEMLIMIT and GOMAXPROCS in the environment win",
			cfg:   DefaultConfig(),
			env:   map[string]string{"GOGC": "200", "GOMEMLIMIT": "1GiB", "GOMAXPROCS": "8"},
			procs: 8,
			want:  settings{},
		},
		{
			name:  "a variable set to empty still counts as set",
			cfg:   DefaultConfig(),
			env:   map[string]string{"GOGC": ""},
			procs: 1,
			want:  settings{memoryLimit: 64 * MiB},
		},
		{
			name:  "zero memory limit and max procs leave the runtime's own",
			cfg:   Config{GCPercent: 50},
			procs: 96,
			want:  settings{gcPercent: intp(50)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lookup := func(key string) (string, bool) {
				v, ok := tt.env[key]
				return v, ok
			}
			got := plan(tt.cfg, lookup, tt.procs)
			if (got.gcPercent == nil) != (tt.want.gcPercent == nil) ||
				(got.gcPercent != nil && *got.gcPercent != *tt.want.gcPercent) ||
				got.memoryLimit != tt.want.memoryLimit || got.maxProcs != tt.want.maxProcs {
				t.Errorf("plan() = %s, want %s", got, tt.want)
			}
		})
	}
}

// String shows s in failure messages.
func (s settings) String() string {
	gc := "unset"
	if s.gcPercent != nil {
		gc = strconv.Itoa(*s.gcPercent)
	}
	return fmt.Sprintf("{gogc %s, memory limit %d, max procs %d}", gc, s.memoryLimit, s.maxProcs)
}
