package sidecar_test

import (
	"os"
	"testing"

	"github.com/ringside/ringside/internal/testbin"
)

// ringsideBin is the ringside binary the multi-process tests run, built
// once by TestMain.
var ringsideBin string

func TestMain(m *testing.M) { os.Exit(testbin.WithRingside(m, &ringsideBin)) }
