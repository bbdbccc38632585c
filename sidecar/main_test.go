package sidecar_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// ringsideBin is the ringside binary the multi-process tests run, built
// once by TestMain.
var ringsideBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ringside-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ringsideBin = filepath.Join(dir, "ringside")
	build := exec.Command("go", "build", "-o", ringsideBin, "github.com/ringside/ringside/cmd/ringside")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building ringside for the multi-process tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
