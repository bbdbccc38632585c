package sidecar_test

import (
	"flag"
	"os"
	"testing"

	"github.com/ringside/ringside/internal/testbin"
)

// ringsideBin is the ringside binary the multi-process tests run, built
// once by TestMain.
var ringsideBin string

// TestMain builds ringside, runs the tests and fails them on goroutines
// left behind (WithRingside checks with goleak). Run as a foreign caller
// (apiguard_test.go), the test binary only makes that caller's requests.
// A fuzzing run (-fuzz) runs only fuzz targets, which start no process:
// it builds nothing.
func TestMain(m *testing.M) {
	if target := os.Getenv(callerTargetEnv); target != "" {
		os.Exit(callAsForeigner(target))
	}
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	os.Exit(testbin.WithRingside(m, &ringsideBin))
}
