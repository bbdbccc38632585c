package launch

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringside/ringside/trainer/api"
)

func TestPythonCommand(t *testing.T) {
	for _, c := range []struct {
		cmd            []string
		interp, target []string
	}{
		{[]string{"python3", "train.py", "-x"}, []string{"python3"}, []string{"train.py", "-x"}},
		{[]string{"/usr/bin/python3.11", "-u", "-W", "ignore", "train.py"}, []string{"/usr/bin/python3.11", "-u", "-W", "ignore"}, []string{"train.py"}},
		{[]string{"python", "-Bu", "-m", "pkg.train", "--lr", "1"}, []string{"python", "-Bu"}, []string{"-m", "pkg.train", "--lr", "1"}},
		{[]string{"python", "-c", "print(1)"}, nil, nil},
		{[]string{"python", "-m"}, nil, nil},
		{[]string{"python", "--version"}, nil, nil},
		{[]string{"python"}, nil, nil},
		{[]string{"torchrun", "train.py"}, nil, nil},
		{[]string{"sh", "-c", "python train.py"}, nil, nil},
	} {
		interp, target, ok := pythonCommand(c.cmd)
		if ok != (c.interp != nil) || !slices.Equal(interp, c.interp) || !slices.Equal(target, c.target) {
			t.Errorf("pythonCommand(%q) = %q, %q, %v; want %q, %q", c.cmd, interp, target, ok, c.interp, c.target)
		}
	}
}

// TestTakeSpareHandsOverOnlyAnImportedProcess runs warm processes that
// keep warm.py's protocol (a byte on fd 3 once imported, then one line on
// stdin) without Python: a shell script named python3 stands in for the
// interpreter, so the order of events is the test's, not the scheduler's.
func TestTakeSpareHandsOverOnlyAnImportedProcess(t *testing.T) {
	tests := []struct {
		name string
		// warm is the body of the fake interpreter. $FIFO is a fifo the
		// test writes a line to once takeSpare was called, when fifo is set.
		warm     string
		fifo     bool
		imported bool
	}{
		{"imported and waiting", `printf 1 >&3; exec 3>&-; read go < "$FIFO"; read line`, true, true},
		// Handed the command, it would fail with warm.py's exit code 3:
		// the command's failure, as far as exec could tell.
		{"import fails after takeSpare was called", `read go < "$FIFO"; exit 3`, true, false},
		{"import failed before", `exit 3`, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			fifo := filepath.Join(dir, "go")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Setenv("FIFO", fifo)
			python := filepath.Join(dir, "python3")
			if err := os.WriteFile(python, []byte("#!/bin/sh\n"+tt.warm+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.Command = []string{python, "train.py"}
			cfg.Preload = []string{"heavy"}
			cfg.Stdout, cfg.Stderr = io.Discard, io.Discard
			r := &runner{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			r.startSpares(&api.Rendezvous{LocalWorldSize: 1}, EnvOptions{})
			defer r.stopSpares()
			if r.spares[0] == nil {
				t.Fatal("no warm process started")
			}
			taken := make(chan *spare, 1)
			go func() { taken <- r.takeSpare(0) }()
			if tt.fifo {
				if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s := <-taken
			if s != nil {
				defer s.p.Kill()
			}
			if got := s != nil; got != tt.imported {
				t.Fatalf("takeSpare handed over the warm process: %v, want %v", got, tt.imported)
			}
		})
	}
}

// A restart's stop is SIGTERM, which ends Python at once. In a warm
// process (exec --preload torch) a SIGTERM that arrives while torch.save
// writes is held until the save returns, then ends the process as it
// would have; outside a save it still ends it at once. A SIGKILL during
// the save (a pod killed whole) leaves the previous file whole: a save
// to a path is written aside and renamed over it.
func TestAStopDuringTorchSaveWaitsForTheSave(t *testing.T) {
	python := torchPython(t)
	dir := t.TempDir()
	// The object's pickling announces the save and takes a second: the
	// signal lands inside torch.save, with half the file written.
	script := filepath.Join(dir, "train.py")
	err := os.WriteFile(script, []byte(`import sys, time, torch
class Slow:
    def __reduce__(self):
        print("saving", flush=True)
        time.sleep(1)
        return (int, (7,))
torch.save({"a": torch.zeros(100000), "slow": Slow(), "b": torch.ones(100000)}, sys.argv[1])
print("saved", flush=True)
time.sleep(60)
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, signalAt string
		sig            syscall.Signal
		want           int // the "slow" value the file holds after
	}{
		{"during the save", "saving", syscall.SIGTERM, 7},
		{"after the save", "saved", syscall.SIGTERM, 7},
		{"killed during the save", "saving", syscall.SIGKILL, 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ckpt := filepath.Join(dir, tt.name+".pt")
			prev := exec.Command(python, "-c", `import sys, torch; torch.save({"slow": 6, "b": torch.ones(100000)}, sys.argv[1])`, ckpt)
			if out, err := prev.CombinedOutput(); err != nil {
				t.Fatalf("the previous checkpoint: %v\n%s", err, out)
			}
			s, out, w := runWarm(t, python, script, ckpt)
			lines := bufio.NewScanner(out)
			for lines.Scan() && lines.Text() != tt.signalAt {
			}
			go io.Copy(io.Discard, out)
			if err := s.p.SignalProcess(tt.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.p.Done():
			case <-time.After(20 * time.Second):
				t.Fatalf("the process did not end within 20s of %v", tt.sig)
			}
			w.Close()
			if code := s.p.ExitCode(); code != 128+int(tt.sig) {
				t.Fatalf("the process ended with exit code %d; want %d, the %v it was sent", code, 128+int(tt.sig), tt.sig)
			}
			check := exec.Command(python, "-c", `import sys, torch; d = torch.load(sys.argv[1]); assert d["slow"] == int(sys.argv[2]) and d["b"].sum() == 100000, d["slow"]`,
				ckpt, strconv.Itoa(tt.want))
			if out, err := check.CombinedOutput(); err != nil {
				t.Fatalf("the checkpoint does not load whole, with slow=%d: %v\n%s", tt.want, err, out)
			}
		})
	}
}

// runWarm runs script with args in a warm process that preloaded torch,
// its stdout on the pipe returned; the process is killed when the test
// ends.
func runWarm(t *testing.T, python, script string, args ...string) (*spare, *io.PipeReader, *io.PipeWriter) {
	t.Helper()
	out, w := io.Pipe()
	cfg := DefaultConfig()
	cfg.Preload = []string{"torch"}
	cfg.Stdout, cfg.Stderr = w, os.Stderr
	s, err := startSpare(cfg, []string{python}, append([]string{script}, args...), os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.p.Kill)
	<-s.ready
	if !s.imported {
		t.Fatal("the warm process did not import torch")
	}
	if err := s.start(os.Environ()); err != nil {
		t.Fatal(err)
	}
	return s, out, w
}

// torchPython returns Debian's python3-torch interpreter (the system
// Python's); it skips the test where torch is missing, and fails it in CI.
func torchPython(t *testing.T) string {
	t.Helper()
	python := "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import torch").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s cannot import torch: %v: %s", python, err, out)
		}
		t.Skipf("%s cannot import torch: %v", python, err)
	}
	return python
}

// In a warm process a rank other than 0 that reaches the job's store
// before rank 0's store listens waits for it in small steps, not torch's
// one-second retry (`ringside bench recovery --mode restart --fault
// trainer` shows the time), and then uses torch's own client.
func TestARankWaitsForTheStoreInSmallSteps(t *testing.T) {
	python := torchPython(t)
	script := filepath.Join(t.TempDir(), "rank1.py")
	err := os.WriteFile(script, []byte(`import datetime, importlib, sys, threading, time
from torch.distributed import TCPStore
rendezvous = importlib.import_module("torch.distributed.rendezvous")
port, timeout = int(sys.argv[1]), datetime.timedelta(seconds=30)
assert hasattr(rendezvous._create_c10d_store, "__wrapped__"), "the store's creation is not wrapped"
def rank0():
    time.sleep(0.5)  # rank 0 still loads its checkpoint
    global master
    master = TCPStore("127.0.0.1", port, 2, True, timeout, wait_for_workers=False)
    master.set("from0", "hello")
threading.Thread(target=rank0).start()
t0 = time.monotonic()
store = rendezvous._create_c10d_store("127.0.0.1", port, 1, 2, timeout)
print("connected after %.3fs: %s" % (time.monotonic() - t0, store.get("from0").decode()), flush=True)
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s, out, w := runWarm(t, python, script, strconv.Itoa(port))
	var lines []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
	}()
	select {
	case <-s.p.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the script did not end within 60s")
	}
	w.Close()
	<-done
	if code := s.p.ExitCode(); code != 0 || len(lines) != 1 || !strings.HasSuffix(lines[0], ": hello") {
		t.Fatalf("the script exited %d printing %q; want 0 and the value rank 0 set", code, lines)
	}
	t.Log(lines[0])
}
