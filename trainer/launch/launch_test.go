package launch_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/sidecartest"
	"github.com/ringside/ringside/trainer/client"
	"github.com/ringside/ringside/trainer/launch"
)

func TestMain(m *testing.M) {
	if os.Getenv(launcherEnv) != "" {
		os.Exit(actAsLauncher())
	}
	goleak.VerifyTestMain(m)
}

// execRun is a launch.Run in the background, its stdout as lines.
type execRun struct {
	lines   chan string
	eof     chan struct{} // closed once every line is in lines
	signals chan os.Signal
	done    chan int
	err     error
}

func startExec(t *testing.T, socket string, maxRestarts int, script string, mutate ...func(*launch.Config)) *execRun {
	t.Helper()
	return startRun(t, launch.Run, socket, maxRestarts, script, mutate...)
}

// startRun starts run (restart or live mode) on script.
func startRun(t *testing.T, run func(context.Context, launch.Config) (int, error), socket string, maxRestarts int, script string, mutate ...func(*launch.Config)) *execRun {
	t.Helper()
	pr, pw := io.Pipe()
	e := &execRun{lines: make(chan string, 100), eof: make(chan struct{}), signals: make(chan os.Signal, 4), done: make(chan int, 1)}
	cfg := launch.DefaultConfig()
	cfg.Socket = socket
	cfg.Command = []string{"sh", "-c", script}
	cfg.MaxRestarts = maxRestarts
	cfg.StopTimeout = 5 * time.Second
	cfg.Signals = e.signals
	cfg.Stdout, cfg.Stderr = pw, io.Discard
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, f := range mutate {
		f(&cfg)
	}
	go func() {
		defer close(e.eof)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			e.lines <- sc.Text()
		}
	}()
	go func() {
		code, err := run(context.Background(), cfg)
		e.err = err
		pw.Close()
		e.done <- code
	}()
	return e
}

func (e *execRun) await(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l := <-e.lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("no line %q within 30s", prefix)
		}
	}
}

func (e *execRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-e.done:
		if e.err != nil {
			t.Fatalf("exec failed: %v", e.err)
		}
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("exec did not end within 30s")
		return -1
	}
}

// loop keeps the command alive while letting its traps run promptly.
const loop = `while :; do sleep 0.05; done`

func TestExecRestartsTheCommandOnEveryNewGeneration(t *testing.T) {
	srv := etcdtest.Start(t)
	w0 := sidecartest.Start(t, srv.Endpoints(), "exec", "w0")
	e := startExec(t, w0.Socket, 0, `trap 'echo stopped; exit 0' TERM; echo "start $RANK $WORLD_SIZE $TORCHELASTIC_RESTART_COUNT $MASTER_ADDR"; `+loop)
	if got := e.await(t, "start"); got != "start 0 1 0 127.0.0.1" {
		t.Fatalf("first start %q, want rank 0 of 1, restart count 0", got)
	}
	sidecartest.Start(t, srv.Endpoints(), "exec", "w1")
	e.await(t, "stopped")
	if got := e.await(t, "start"); got != "start 0 2 1 127.0.0.1" {
		t.Fatalf("restart %q, want rank 0 of 2, restart count 1", got)
	}
	e.signals <- syscall.SIGTERM
	if code := e.wait(t); code != 0 {
		t.Fatalf("exit code %d, want the command's 0", code)
	}
}

func TestExecForwardsSignalsAndExitsWithTheCommandsCode(t *testing.T) {
	srv := etcdtest.Start(t)
	w0 := sidecartest.Start(t, srv.Endpoints(), "exec", "w0")
	e := startExec(t, w0.Socket, 0, `trap 'echo usr1' USR1; trap 'exit 7' TERM; echo ready; `+loop)
	e.await(t, "ready")
	e.signals <- syscall.SIGUSR1
	e.await(t, "usr1")
	e.signals <- syscall.SIGTERM
	if code := e.wait(t); code != 7 {
		t.Fatalf("exit code %d, want the command's 7", code)
	}
}

func TestExecRunsOneProcessPerSlotAndEndsWithTheJob(t *testing.T) {
	srv := etcdtest.Start(t)
	w0 := sidecartest.Start(t, srv.Endpoints(), "exec", "w0", func(c *sidecar.Config) { c.Slots = 2 })
	e := startExec(t, w0.Socket, 0, `echo "slot $LOCAL_RANK of $LOCAL_WORLD_SIZE rank $RANK"`)
	seen := map[string]bool{e.await(t, "slot"): true, e.await(t, "slot"): true}
	if !seen["slot 0 of 2 rank 0"] || !seen["slot 1 of 2 rank 1"] {
		t.Fatalf("processes printed %v, want slots 0 and 1", seen)
	}
	if code := e.wait(t); code != 0 {
		t.Fatalf("exit code %d, want 0 once every process exited 0", code)
	}
}

func TestExecRestartsAFailedCommandWithTheJobThenGivesUp(t *testing.T) {
	srv := etcdtest.Start(t)
	w0 := sidecartest.Start(t, srv.Endpoints(), "exec", "w0")
	e := startExec(t, w0.Socket, 1, `echo "run $TORCHELASTIC_RESTART_COUNT $RINGSIDE_GENERATION"; exit 3`)
	first := e.await(t, "run 0")
	second := e.await(t, "run 1")
	if first == second {
		t.Fatalf("the restart ran in the same generation: %q", second)
	}
	if code := e.wait(t); code != 3 {
		t.Fatalf("exit code %d, want the command's 3 after max restarts", code)
	}
}

func TestExecFailsClearlyWithoutASidecar(t *testing.T) {
	cfg := launch.DefaultConfig()
	cfg.Socket = t.TempDir() + "/none.sock"
	cfg.Command = []string{"true"}
	cfg.SidecarWait = 200 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	code, err := launch.Run(context.Background(), cfg)
	var absent *client.WaitError
	if code == 0 || !errors.As(err, &absent) || !strings.Contains(err.Error(), cfg.Socket) {
		t.Fatalf("Run = %d, %v; want a non-zero code and a *client.WaitError naming the socket", code, err)
	}
}

func TestExecPreloadRestartsInAWarmProcess(t *testing.T) {
	python := requirePython(t)
	dir := t.TempDir()
	// heavy stands for torch: the warm process imports it ahead of time.
	if err := os.WriteFile(filepath.Join(dir, "heavy.py"), []byte("import os\nPID = os.getpid()\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "train.py")
	if err := os.WriteFile(script, []byte(`import os, signal, sys, time
preloaded = "heavy" in sys.modules
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("start", os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["TORCHELASTIC_RESTART_COUNT"],
      preloaded, sys.argv[1:], __name__, flush=True)
while True:
    time.sleep(0.05)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", dir)
	srv := etcdtest.Start(t)
	w0 := sidecartest.Start(t, srv.Endpoints(), "exec", "w0")
	e := startExec(t, w0.Socket, 0, "", func(c *launch.Config) {
		c.Command = []string{python, "-u", script, "--flag", "x"}
		c.Preload = []string{"heavy"}
	})
	// The first start too: exec waited for the warm process to import
	// heavy before it joined.
	if got := e.await(t, "start"); got != "start 0 1 0 True ['--flag', 'x'] __main__" {
		t.Fatalf("first start %q, want rank 0 of 1 in a process that imported heavy", got)
	}
	sidecartest.Start(t, srv.Endpoints(), "exec", "w1")
	if got := e.await(t, "start"); got != "start 0 2 1 True ['--flag', 'x'] __main__" {
		t.Fatalf("restart %q, want rank 0 of 2, restart count 1, in a process that imported heavy", got)
	}
	e.signals <- syscall.SIGTERM
	if code := e.wait(t); code != 0 {
		t.Fatalf("exit code %d, want the command's 0", code)
	}
}

func TestExecPreloadOfAMissingModuleStartsCold(t *testing.T) {
	python := requirePython(t)
	script := filepath.Join(t.TempDir(), "train.py")
	if err := os.WriteFile(script, []byte(`import os
print("start", os.environ["RANK"], os.environ["WORLD_SIZE"], flush=True)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := etcdtest.Start(t)
	w0 := sidecartest.Start(t, srv.Endpoints(), "exec", "w0")
	e := startExec(t, w0.Socket, 0, "", func(c *launch.Config) {
		c.Command = []string{python, script}
		c.Preload = []string{"no_such_module_here"}
	})
	if got := e.await(t, "start"); got != "start 0 1" {
		t.Fatalf("start %q, want rank 0 of 1", got)
	}
	if code := e.wait(t); code != 0 {
		t.Fatalf("exit code %d, want the command's 0", code)
	}
}

// When exec itself ends (its command finished, as a trainer container's
// main process may before the kubelet restarts it), the member leaves the
// ring at once, and the restarted exec brings it back.
func TestExecThatEndsTakesItsMemberOutUntilItIsBack(t *testing.T) {
	srv := etcdtest.Start(t)
	w0 := sidecartest.Start(t, srv.Endpoints(), "exec", "w0")
	w1 := sidecartest.Start(t, srv.Endpoints(), "exec", "w1")
	e0 := startExec(t, w0.Socket, 0, `trap 'exit 0' TERM; echo "start $WORLD_SIZE"; `+loop)
	e0.await(t, "start 2")

	// w1's exec is stopped (its container ends; a command that exits 0 on
	// its own would finish the job instead).
	first := startExec(t, w1.Socket, 0, `trap 'exit 0' TERM; echo "first $WORLD_SIZE"; `+loop)
	first.await(t, "first 2")
	end := time.Now()
	first.signals <- syscall.SIGTERM
	if code := first.wait(t); code != 0 {
		t.Fatalf("the stopped exec exited %d, want its command's 0", code)
	}
	e0.await(t, "start 1")
	t.Logf("w0 restarted at world size 1 %s after w1's exec ended", time.Since(end).Round(time.Millisecond))

	back := time.Now()
	e1 := startExec(t, w1.Socket, 0, `trap 'exit 0' TERM; echo "back $WORLD_SIZE"; `+loop)
	e0.await(t, "start 2")
	e1.await(t, "back 2")
	t.Logf("w0 restarted at world size 2 %s after w1's exec came back", time.Since(back).Round(time.Millisecond))
	for _, e := range []*execRun{e0, e1} {
		e.signals <- syscall.SIGTERM
		if code := e.wait(t); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
	}
}

// requirePython returns python3's path; without one the test skips, and
// fails in CI.
func requirePython(t *testing.T) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and no python3 in PATH")
		}
		t.Skip("no python3 in PATH")
	}
	return python
}
