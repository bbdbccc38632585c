package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a started command in a process group of its own, so that a
// kill reaches everything it started (a trainer's data loader workers, a
// shell's children), and its end. Stop and forwarded signals reach the
// process alone, which ends its children itself. Its one goroutine waits for the
// command and ends with it: Kill or Stop end the process and return once
// that goroutine has.
type Process struct {
	cmd *exec.Cmd
	// started is when it started, or took over a command (a warm process,
	// see spare); set and read by its owner's goroutine.
	started time.Time
	stderr  *lineTail     // its stderr's last lines; nil without a stderr
	done    chan struct{} // closed once the command exited; the fields below are set then
	code    int
	signal  string // the name of the signal that ended it, if one did
	ended   time.Time
}

// stderrDrain bounds how long an exit waits for the process's stderr to
// be read to its end once the process is gone: a child that outlives it
// (a DataLoader worker of a killed trainer) and holds the pipe open does
// not hold up the exit's report longer than this; the pipe closes then.
const stderrDrain = 200 * time.Millisecond

// StartProcess starts cmd as the leader of a new process group, to be
// killed when this process dies. cmd must not be started yet; its
// SysProcAttr is kept except for Setpgid and the parent-death signal. What
// the process writes on cmd.Stderr passes through unchanged (through a
// pipe), and its last lines are kept for Stderr.
func StartProcess(cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	dieWithLauncher(cmd.SysProcAttr)
	p := &Process{cmd: cmd, done: make(chan struct{})}
	if cmd.Stderr != nil {
		p.stderr = &lineTail{out: cmd.Stderr}
		cmd.Stderr, cmd.WaitDelay = p.stderr, stderrDrain
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.started = time.Now()
	go func() {
		cmd.Wait() //nolint:errcheck // the exit status is read below; I/O copy errors are the writers'
		p.code, p.signal = exitCode(cmd.ProcessState)
		p.ended = time.Now()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's id, also its process group's.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitCode waits for the process's end and returns its exit code: 128+N
// when signal N ended it, as a shell reports it.
func (p *Process) ExitCode() int {
	<-p.done
	return p.code
}

// Ended waits for the process's end and says how it ended: the name of
// the signal that ended it ("" when it exited), how long it ran, and the
// last lines of its stderr (record.MaxCrashLines at most).
func (p *Process) Ended() (signal string, ran time.Duration, stderr []string) {
	<-p.done
	if p.stderr != nil {
		stderr = p.stderr.lines()
	}
	return p.signal, p.ended.Sub(p.started), stderr
}

// Signal sends sig to the process's group. Once the process has ended it
// sends nothing and returns os.ErrProcessDone: its id may then belong to
// another process.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	if err := syscall.Kill(-p.Pid(), sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("%w: %w", os.ErrProcessDone, err)
		}
		return err
	}
	return nil
}

// SignalProcess sends sig to the process alone, not to the rest of its
// group: a trainer asked to stop finishes its step and leaves, and the
// children it started (DataLoader workers) end with it, not mid-batch.
// Once the process has ended it sends nothing and returns
// os.ErrProcessDone.
func (p *Process) SignalProcess(sig syscall.Signal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	if err := syscall.Kill(p.Pid(), sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("%w: %w", os.ErrProcessDone, err)
		}
		return err
	}
	return nil
}

// Kill SIGKILLs the process's group and waits for the process's end.
func (p *Process) Kill() {
	p.Signal(syscall.SIGKILL) //nolint:errcheck // a group already gone is what Kill wants
	<-p.done
}

// Stop sends SIGTERM to the process alone (its children, DataLoader
// workers among them, are its to end), SIGKILL to its whole group after
// grace if the process has not exited by then, and waits for its end.
func (p *Process) Stop(grace time.Duration) {
	if err := p.SignalProcess(syscall.SIGTERM); errors.Is(err, os.ErrProcessDone) {
		<-p.done // it is gone, or will be at once
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.Kill()
	}
}

// exitCode returns ps's exit code, 128+N when signal N ended it, and that
// signal's name.
func exitCode(ps *os.ProcessState) (int, string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), unix.SignalName(ws.Signal())
	}
	return ps.ExitCode(), ""
}
