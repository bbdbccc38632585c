package sidecar_test

import (
	"os"
	"testing"

	"github.com/ringside/ringside/internal/testbin"
)

// ringsideBin is the ringside binary the multi-process tests run, built
// once by TestMain.
var ringsideBin string

// TestMain builds ringside, runs the tests and fails them on goroutines
// left behind (WithRingside checks with goleak).
func TestMain(m *testing.M) { os.Exit(testbin.WithRingside(m, &ringsideBin)) }
