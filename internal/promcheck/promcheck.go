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

// Check runs `promtool check metrics` on exposition (the text a /metrics
// endpoint serves) and fails tb with each problem promtool reports.
func Check(tb testing.TB, exposition []byte) {
	tb.Helper()
	if len(bytes.TrimSpace(exposition)) == 0 {
		tb.Fatal("no metrics to check: the exposition is empty")
	}
	cmd := exec.Command(Promtool(tb), "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			tb.Fatalf("promtool check metrics: %v", err)
		}
		tb.Errorf("promtool check metrics finds problems (%v):\n%s", err, strings.TrimSpace(out.String()))
	}
}
