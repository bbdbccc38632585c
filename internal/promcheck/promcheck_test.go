package promcheck

import (
	"fmt"
	"testing"
)

func TestUpstreamToleratesOnlyNamingLintsOfItsPrefixes(t *testing.T) {
	o := options{upstream: []string{"etcd_"}}
	for _, tc := range []struct {
		name, line string
		want       bool
	}{
		{"a counter of etcd's without _total", `etcd_server_health_failures counter metrics should have "_total" suffix`, true},
		{"a gauge of etcd's ending in _total", `etcd_debugging_mvcc_keys_total non-counter metrics should not have "_total" suffix`, true},
		{"a duration of etcd's in milliseconds", `etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds use base unit "seconds" instead of "milliseconds"`, true},
		{"a series of etcd's twice", `etcd_server_has_leader metric not unique`, false},
		{"an etcd metric without help", `etcd_server_has_leader no help text`, false},
		{"a naming lint of a metric of ours", `ringside_things counter metrics should have "_total" suffix`, false},
		{"a parse error", `error while linting: text format parsing error in line 3: invalid label name`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := o.tolerates(tc.line); got != tc.want {
				t.Errorf("tolerates(%q) = %v, want %v", tc.line, got, tc.want)
			}
		})
	}
	if (options{}).tolerates(`etcd_server_health_failures counter metrics should have "_total" suffix`) {
		t.Error("without Upstream a naming lint is tolerated")
	}
}

func TestCheckFindsWhatPromtoolFinds(t *testing.T) {
	bad := []byte("# HELP ringside_things_count Things.\n# TYPE ringside_things_count counter\nringside_things_count 1\n")
	ft := &fakeTB{TB: t}
	Check(ft, bad)
	if len(ft.errors) == 0 {
		t.Fatal("a counter without _total passed")
	}
	good := []byte("# HELP ringside_things_total Things.\n# TYPE ringside_things_total counter\nringside_things_total 1\n")
	ft = &fakeTB{TB: t}
	Check(ft, good)
	if len(ft.errors) != 0 {
		t.Fatalf("a conventional counter failed: %v", ft.errors)
	}
}

// fakeTB records errors instead of failing the test.
type fakeTB struct {
	testing.TB
	errors []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}
