// Package promcheck holds metrics to Prometheus' naming conventions with
// the linter behind `promtool check metrics`, client_golang's promlint
// (counters end in _total, units are base units and named last, every
// metric has a HELP, no series twice). Each component's test feeds it that
// component's real /metrics. Being a library, it needs no promtool build:
// `make promtool` still builds the real tool for checking a running
// component by hand.
package promcheck

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// Option adjusts what Check holds an exposition to.
type Option func(*options)

type options struct {
	upstream []string
}

// Upstream names the prefixes of metrics that are another project's (etcd_
// for those etcd's server registers): the naming lints of them
// (suffixes, units, case; see namingProblems) are logged, not failed, since
// only that project can rename them and its users' dashboards use the names
// it has. They must still parse and be unique, as everything else must
// pass every lint.
func Upstream(prefixes ...string) Option {
	return func(o *options) { o.upstream = append(o.upstream, prefixes...) }
}

// namingProblems are the texts of promlint's lints about a metric's name
// alone. A lint not listed here fails even for an Upstream metric: a newer
// client_golang's new lint is looked at, not passed over.
var namingProblems = []string{
	`counter metrics should have "_total" suffix`,
	`non-counter metrics should not have "_total" suffix`,
	`use base unit `,
	`metric name should not include type `,
	`metric names should not contain ':'`,
	`metric names should be written in 'snake_case'`,
	`metric names should not contain abbreviated units`,
}

// Check lints exposition (the text a /metrics endpoint serves) and fails
// tb with each problem found, except those opts tolerate.
func Check(tb testing.TB, exposition []byte, opts ...Option) {
	tb.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if len(bytes.TrimSpace(exposition)) == 0 {
		tb.Fatal("no metrics to check: the exposition is empty")
	}
	problems, err := promlint.New(bytes.NewReader(exposition)).Lint()
	if err != nil {
		tb.Fatalf("the metrics do not parse: %v", err)
	}
	var failed, tolerated []string
	for _, p := range problems {
		line := p.Metric + " " + p.Text
		if o.tolerates(line) {
			tolerated = append(tolerated, line)
		} else {
			failed = append(failed, line)
		}
	}
	if len(tolerated) > 0 {
		tb.Logf("%d naming problems of upstream metrics tolerated:\n%s", len(tolerated), strings.Join(tolerated, "\n"))
	}
	if len(failed) > 0 {
		tb.Errorf("the metrics break Prometheus' conventions:\n%s", strings.Join(failed, "\n"))
	}
}

// tolerates reports whether line, a problem the linter reports, is a naming
// lint of an Upstream metric.
func (o options) tolerates(line string) bool {
	metric, problem, ok := strings.Cut(line, " ")
	if !ok {
		return false
	}
	return slices.ContainsFunc(o.upstream, func(p string) bool { return strings.HasPrefix(metric, p) }) &&
		slices.ContainsFunc(namingProblems, func(n string) bool { return strings.HasPrefix(problem, n) })
}
