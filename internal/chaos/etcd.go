package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ringside/ringside/trainer/launch"
)

// etcdProc is `ringside etcd` in a process of its own, so that a run can
// SIGKILL it and start it again on the same data and port, or freeze it.
type etcdProc struct {
	ringside, dir, log string
	client, peer       string // URLs
	proc               *launch.Process
}

// startEtcd starts etcd with its data in dir on two free loopback ports.
func startEtcd(ctx context.Context, ringside, dir string) (*etcdProc, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	e := &etcdProc{ringside: ringside, dir: filepath.Join(dir, "etcd-data"), log: filepath.Join(dir, "etcd.log"),
		client: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), peer: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	return e, e.start(ctx)
}

// freePorts asks the kernel for n free TCP ports on loopback.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (e *etcdProc) start(ctx context.Context) error {
	logf, err := os.OpenFile(e.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(e.ringside, "etcd", "--data-dir", e.dir, "--listen-client-url", e.client, "--listen-peer-url", e.peer)
	cmd.Stdout, cmd.Stderr = logf, logf
	if e.proc, err = launch.StartProcess(cmd); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	return e.awaitReady(ctx)
}

// awaitReady waits until etcd answers a read.
func (e *etcdProc) awaitReady(ctx context.Context) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: e.endpoints(), Logger: zap.NewNop(), DialTimeout: time.Second})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Get(actx, "ready")
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-e.proc.Done():
			return fmt.Errorf("etcd exited at start (code %d); see %s", e.proc.ExitCode(), e.log)
		case <-ctx.Done():
			return fmt.Errorf("etcd not ready: %w", err)
		case <-time.After(50 * time.Millisecond): // polled: etcd has nothing to wait on before it serves
		}
	}
}

func (e *etcdProc) endpoints() []string { return []string{e.client} }

// kill SIGKILLs etcd and waits for it to be gone.
func (e *etcdProc) kill() { e.proc.Kill() }

// restart starts etcd again on the same data and ports.
func (e *etcdProc) restart(ctx context.Context) error { return e.start(ctx) }

// freeze and thaw SIGSTOP and SIGCONT etcd.
func (e *etcdProc) freeze() error { return e.proc.Signal(syscall.SIGSTOP) }
func (e *etcdProc) thaw() error   { return e.proc.Signal(syscall.SIGCONT) }

// close stops etcd for good.
func (e *etcdProc) close() {
	e.thaw() //nolint:errcheck // a running etcd needs none
	e.proc.Stop(5 * time.Second)
}
