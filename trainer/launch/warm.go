package launch

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ringside/ringside/trainer/api"
)

// With Config.Preload, a Python command's next process for each slot is
// started while the current one trains: it imports the preloaded modules
// and waits to be told its environment. A restart then costs neither an
// interpreter start nor `import torch` (1.6 s each on a small VM, and
// several processes importing at once share its few cores). At start, exec
// waits for the first slot's warm process before it asks the sidecar for
// a generation, so a new member (under `sidecar --await-trainer`) enters
// the ring ready to train.

//go:embed warm.py
var warmPy string

// pythonCommand splits a Python command into the interpreter with its
// options and the target (a script and its arguments, or -m module and its
// arguments); ok is false for anything else (-c, stdin, not Python).
func pythonCommand(cmd []string) (interp, target []string, ok bool) {
	if len(cmd) < 2 || !strings.HasPrefix(filepath.Base(cmd[0]), "python") {
		return nil, nil, false
	}
	for i := 1; i < len(cmd); i++ {
		switch a := cmd[i]; {
		case a == "-m":
			if i+1 >= len(cmd) {
				return nil, nil, false
			}
			return cmd[:i], cmd[i:], true
		case a == "-W" || a == "-X": // options with a separate value
			i++
		case a == "-c" || a == "-" || strings.HasPrefix(a, "--"):
			return nil, nil, false
		case strings.HasPrefix(a, "-"):
		default:
			return cmd[:i], cmd[i:], true
		}
	}
	return nil, nil, false
}

// spare is a warm process waiting for its environment.
type spare struct {
	p     *Process
	ready chan struct{} // closed once its imports are done or failed; imported is set then
	// imported: it wrote the ready byte, so every preloaded module imported
	// and it waits on stdin. Without the byte (EOF on fd 3) an import
	// failed and it exits, or exited, with warm.py's 3.
	imported bool
	start    func(env []string) error
}

// startSpare starts a warm process for slot; env is its environment until
// it is told the real one (the variables Python and the preloaded modules
// read at start are the same in both).
func startSpare(cfg Config, interp, target []string, env []string) (*spare, error) {
	args := append(append(append([]string{}, interp[1:]...), "-c", warmPy), strings.Join(cfg.Preload, ","))
	cmd := exec.Command(interp[0], args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = cfg.Stdout, cfg.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{readyW} // fd 3: a byte once imported
	p, err := StartProcess(cmd)
	readyW.Close()
	if err != nil {
		readyR.Close()
		return nil, err
	}
	s := &spare{p: p, ready: make(chan struct{})}
	go func() {
		n, _ := readyR.Read(make([]byte, 1)) // a byte once imported, EOF when it exits first
		readyR.Close()
		s.imported = n == 1
		close(s.ready)
	}()
	s.start = func(env []string) error {
		defer stdin.Close()
		line, err := json.Marshal(struct {
			Env    []string `json:"env"`
			Target []string `json:"target"`
		}{env, target})
		if err != nil {
			return err
		}
		if _, err := stdin.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("warm process %d: %w", cmd.Process.Pid, err)
		}
		p.started = time.Now() // the command's run starts now, not the imports'
		return nil
	}
	return s, nil
}

// startSpares starts a warm process per slot of gen (their environment is
// replaced when they take over), when the command can be preloaded.
func (r *runner) startSpares(gen *api.Rendezvous, o EnvOptions) {
	interp, target, ok := pythonCommand(r.cfg.Command)
	if len(r.cfg.Preload) == 0 || !ok {
		return
	}
	r.stopSpares()
	r.spares = make([]*spare, gen.LocalWorldSize)
	for slot := range r.spares {
		s, err := startSpare(r.cfg, interp, target, Env(baseEnv(), gen, slot, o))
		if err != nil {
			r.log.Warn("could not start a warm process; the next restart starts cold", "err", err)
			continue
		}
		r.spares[slot] = s
	}
}

// warmUp starts the first slot's warm process and waits until it has
// imported the preloaded modules (at most StartTimeout).
func (r *runner) warmUp(ctx context.Context) {
	r.startSpares(&api.Rendezvous{LocalWorldSize: 1}, EnvOptions{RunID: r.cfg.RunID, Socket: r.cfg.Socket})
	if len(r.spares) == 0 || r.spares[0] == nil {
		return
	}
	r.log.Info("importing the preloaded modules before joining", "modules", strings.Join(r.cfg.Preload, ","))
	select {
	case <-r.spares[0].ready:
	case <-time.After(r.cfg.StartTimeout):
		r.log.Warn("the warm process is still importing; going on", "waited", r.cfg.StartTimeout)
	case <-ctx.Done():
	}
}

// takeSpare returns slot's warm process, nil when there is none that
// imported the preloaded modules and is alive.
//
// It waits for the outcome of the imports (at most StartTimeout): the
// command handed to a process whose import then fails would fail with
// it, and a process's death cannot be told from its exit having not been
// reaped yet (the handover write into its stdin pipe can still succeed).
// Waiting costs nothing against a cold start, which imports the same.
func (r *runner) takeSpare(slot int) *spare {
	if slot >= len(r.spares) || r.spares[slot] == nil {
		return nil
	}
	s := r.spares[slot]
	r.spares[slot] = nil
	select {
	case <-s.ready:
	case <-time.After(r.cfg.StartTimeout):
		r.log.Warn("the warm process is still importing; starting cold", "waited", r.cfg.StartTimeout)
		s.p.Kill()
		return nil
	}
	if !s.imported {
		s.p.Kill()
		r.log.Warn("the warm process could not import the preloaded modules; starting cold", "modules", strings.Join(r.cfg.Preload, ","), "exit_code", s.p.ExitCode())
		return nil
	}
	select {
	case <-s.p.Done():
		r.log.Warn("a warm process had exited; starting cold", "exit_code", s.p.ExitCode())
		return nil
	default:
		return s
	}
}

// stopSpares kills the warm processes left.
func (r *runner) stopSpares() {
	for _, s := range r.spares {
		if s != nil {
			s.p.Kill()
		}
	}
	r.spares = nil
}
