// Package promcheck holds metrics to Prometheus' naming conventions with
// the checker Prometheus and Kubernetes use, `promtool check metrics`
// (counters end in _total, units are base units and named last, every
// metric has a HELP), built from github.com/prometheus/prometheus (pinned in
// internal/tools/promtool, a module of its own) once into the user's cache
// directory. Each component's test feeds it that component's real /metrics.
//
// Without a go command to build promtool, tests skip, or fail when CI=true.
package promcheck

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/ringside/ringside/internal/testbin"
)

// Version is the Prometheus whose promtool checks the metrics
// (internal/tools/promtool/go.mod).
const Version = "v0.316.0"

var promtool = &testbin.Tool{Name: "promtool", Version: Version, Package: "github.com/prometheus/prometheus/cmd/promtool"}

// Promtool returns the path of the promtool binary, building it on first
// use (about three and a half minutes cold, seconds from the cache).
func Promtool(tb testing.TB) string {
	tb.Helper()
	return promtool.Path(tb)
}

// Option adjusts what Check holds an exposition to.
type Option func(*options)

type options struct {
	upstream []string
}

// Upstream names the prefixes of metrics that are another project's (etcd_
// for those etcd's server registers): promtool's naming lints of them
// (suffixes, units, case; see namingProblems) are logged, not failed, since
// only that project can rename them and its users' dashboards use the names
// it has. They must still parse and be unique, as everything else must
// pass every lint.
func Upstream(prefixes ...string) Option {
	return func(o *options) { o.upstream = append(o.upstream, prefixes...) }
}

// namingProblems are the texts of promtool's lints (client_golang's
// promlint) about a metric's name alone. A lint not listed here fails even
// for an Upstream metric: a newer promtool's new lint is looked at, not
// passed over.
var namingProblems = []string{
	`counter metrics should have "_total" suffix`,
	`non-counter metrics should not have "_total" suffix`,
	`use base unit `,
	`metric name should not include type `,
	`metric names should not contain ':'`,
	`metric names should be written in 'snake_case'`,
	`metric names should not contain abbreviated units`,
}

// Check runs `promtool check metrics` on exposition (the text a /metrics
// endpoint serves) and fails tb with each problem promtool reports, except
// those opts tolerate.
func Check(tb testing.TB, exposition []byte, opts ...Option) {
	tb.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if len(bytes.TrimSpace(exposition)) == 0 {
		tb.Fatal("no metrics to check: the exposition is empty")
	}
	cmd := exec.Command(Promtool(tb), "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil {
		return
	}
	exit, ok := err.(*exec.ExitError)
	if !ok {
		tb.Fatalf("promtool check metrics: %v", err)
	}
	// Exit status 3 is lint problems only, one "metric problem" a line;
	// any other is an exposition promtool could not read.
	var failed, tolerated []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if exit.ExitCode() == lintExitCode && o.tolerates(line) {
			tolerated = append(tolerated, line)
		} else {
			failed = append(failed, line)
		}
	}
	if len(tolerated) > 0 {
		tb.Logf("promtool check metrics: %d naming problems of upstream metrics tolerated:\n%s", len(tolerated), strings.Join(tolerated, "\n"))
	}
	if len(failed) > 0 {
		tb.Errorf("promtool check metrics finds problems (%v):\n%s", err, strings.Join(failed, "\n"))
	}
}

// lintExitCode is promtool's exit status when the metrics parse but fail
// a lint.
const lintExitCode = 3

// tolerates reports whether line, a problem promtool reports, is a naming
// lint of an Upstream metric.
func (o options) tolerates(line string) bool {
	metric, problem, ok := strings.Cut(line, " ")
	if !ok {
		return false
	}
	return slices.ContainsFunc(o.upstream, func(p string) bool { return strings.HasPrefix(metric, p) }) &&
		slices.ContainsFunc(namingProblems, func(n string) bool { return strings.HasPrefix(problem, n) })
}
