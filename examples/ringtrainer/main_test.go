package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
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
	ringsideBin = filepath.Join(dir, "ringside")
	trainerBin = filepath.Join(dir, "ringtrainer")
	builds := [][]string{
		{"build", "-o", ringsideBin, "github.com/ringside/ringside/cmd/ringside"},
		{"build", "-o", trainerBin, "github.com/ringside/ringside/examples/ringtrainer"},
	}
	if raceEnabled {
		builds[1] = append([]string{"build", "-race"}, builds[1][1:]...)
	}
	for _, args := range builds {
		build := exec.Command("go", args...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building the binaries for the multi-process tests:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
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
