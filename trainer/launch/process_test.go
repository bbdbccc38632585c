package launch_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringside/ringside/trainer/launch"
)

func TestProcessExitCode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		want   int
	}{
		{"its own exit code", "exit 3", 3},
		{"128+N after signal N", "kill -9 $$", 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := launch.StartProcess(exec.Command("sh", "-c", tc.script))
			if err != nil {
				t.Fatal(err)
			}
			if got := p.ExitCode(); got != tc.want {
				t.Errorf("ExitCode = %d, want %d", got, tc.want)
			}
			if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
				t.Errorf("Signal after the end = %v, want os.ErrProcessDone", err)
			}
		})
	}
}

// startReady starts script in sh with its stdout on a pipe that every
// process of its group inherits, and returns once the script printed its
// first line; the pipe then reaches EOF once all of them ended.
func startReady(t *testing.T, script string) (*launch.Process, *bufio.Reader) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdout = w
	p, err := launch.StartProcess(cmd)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	r.SetReadDeadline(time.Now().Add(20 * time.Second))
	out := bufio.NewReader(r)
	if _, err := out.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return p, out
}

// A drain stops a trainer whose DataLoader workers share its process group:
// the SIGTERM must reach the trainer only, which finishes its step and
// ends its workers itself, never the workers mid-batch.
func TestProcessStopSignalsTheTrainerNotItsGroup(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "worker-ready")
	p, out := startReady(t, `sh -c 'trap "echo worker got SIGTERM; exit 1" TERM; touch `+ready+`; while :; do sleep 0.05; done' &
worker=$!
trap 'echo trainer got SIGTERM; sleep 0.5; kill -9 $worker; exit 0' TERM
while [ ! -e `+ready+` ]; do sleep 0.01; done
echo started
wait`)
	p.Stop(10 * time.Second)
	b, err := io.ReadAll(out)
	if err != nil {
		t.Fatalf("reading the output: %v", err)
	}
	got := string(b)
	if !strings.Contains(got, "trainer got SIGTERM") {
		t.Errorf("the trainer was not signalled; output %q", got)
	}
	if strings.Contains(got, "worker got SIGTERM") {
		t.Errorf("the trainer's worker (same process group) was signalled; output %q", got)
	}
	if code := p.ExitCode(); code != 0 {
		t.Errorf("ExitCode = %d, want 0 (the trainer left by itself)", code)
	}
}

func TestProcessKillReachesTheWholeGroup(t *testing.T) {
	p, out := startReady(t, "sleep 60 & echo started; wait")
	p.Kill()
	if _, err := io.ReadAll(out); err != nil {
		t.Fatalf("the shell's child outlived Kill: %v", err)
	}
	if got := p.ExitCode(); got != 128+9 {
		t.Errorf("ExitCode = %d, want 137 (SIGKILL)", got)
	}
}

func TestProcessStopKillsWhatIgnoresSIGTERM(t *testing.T) {
	p, _ := startReady(t, `trap "" TERM; echo ready; while :; do sleep 1; done`)
	p.Stop(100 * time.Millisecond)
	if got := p.ExitCode(); got != 128+9 {
		t.Errorf("ExitCode = %d, want 137 (SIGKILL after the grace)", got)
	}
}

// launcherEnv makes the test binary a launcher (TestMain): it starts
// `sleep 60` with StartProcess, prints its pid and waits to be killed.
const launcherEnv = "RINGSIDE_TEST_ACT_AS_LAUNCHER"

func actAsLauncher() int {
	p, err := launch.StartProcess(exec.Command("sleep", "60"))
	if err != nil {
		return 1
	}
	fmt.Println(p.Pid())
	<-p.Done()
	return 0
}

// A launcher killed whole (kill -9 of `ringside exec`, as of its pod)
// takes the processes it started along.
func TestAProcessDiesWithItsLauncher(t *testing.T) {
	launcher := exec.Command(os.Args[0])
	launcher.Env = append(os.Environ(), launcherEnv+"=1")
	out, err := launcher.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := launcher.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the launcher printed %q, not a pid", line)
	}
	defer syscall.Kill(child, syscall.SIGKILL) //nolint:errcheck // gone, if the test passes
	launcher.Process.Kill()                    //nolint:errcheck // checked by Wait
	launcher.Wait()                            //nolint:errcheck // killed
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(child, 0) == nil { // no event tells another process's end
		if time.Now().After(deadline) {
			t.Fatalf("the launcher's child %d lives on 10s after the launcher was killed", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
