package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/ringside/ringside/internal/testbin"
)

// ringsideBin and trainerBin are the binaries the multi-process tests run,
// built once by TestMain. The trainer is built with the race detector when
// the tests are.
var ringsideBin, trainerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ringtrainer-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ringsideBin, err = testbin.Build(dir, "ringside", testbin.Ringside)
	if err == nil {
		trainerBin = filepath.Join(dir, "ringtrainer")
		err = buildTrainer(trainerBin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries for the multi-process tests:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildTrainer builds the trainer under test, with the race detector when
// the tests have it.
func buildTrainer(path string) error {
	args := []string{"build", "-o", path}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/ringside/ringside/examples/ringtrainer")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}
