// Package podnet gives the test cluster's pods real network boundaries:
// each pod gets its own network namespace with a veth pair to a bridge on
// the host and an address of a /24 held by this test package alone
// (10.213.B.0/24, B from 1 to 254, claimed with an flock as
// internal/loopback claims its blocks). The bridge's address, 10.213.B.1,
// is the HostIP: what runs on the host for the pods (the API server, an
// embedded etcd) listens there, and pods reach it, each other and the host
// through the bridge. Nothing is routed off the host and no iptables rule
// is added: bridged traffic and traffic to the host need neither.
//
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's ip;
// without them New fails with an error wrapping kubetest.ErrUnavailable.
package podnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/ringside/ringside/internal/kubetest"
)

// Network is a bridge and the pods attached to it.
type Network struct {
	b    int
	lock *os.File
	log  *slog.Logger

	mu   sync.Mutex
	used [256]bool // host parts in use; 0, 1 and 255 never are
	// next is where the search for a free address starts, as an offset
	// from firstHost: addresses go round, as CNI's host-local IPAM gives
	// them. A pod that took the address of one just gone went unreached
	// for up to a minute, while the host's and the other pods' neighbour
	// caches still held the old pod's MAC.
	next int
}

// Attachment is one pod's namespace and address.
type Attachment struct {
	// NetNS is the namespace's path, for nsenter --net=.
	NetNS string
	// IP is the pod's address.
	IP   string
	name string
	host int
}

// New claims a free /24, removes what a crashed earlier holder of it left
// (its namespaces and bridge) and creates the bridge.
func New(ctx context.Context, log *slog.Logger) (*Network, error) {
	if log == nil {
		log = slog.Default()
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: pod network namespaces need root", kubetest.ErrUnavailable)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("%w: pod network needs iproute2's ip: %v", kubetest.ErrUnavailable, err)
	}
	for b := 1; b <= 254; b++ {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("ringside-podnet-%d.lock", b))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("podnet: %w", err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue
		}
		n := &Network{b: b, lock: f, log: log}
		n.removeStale(ctx)
		if err := n.createBridge(ctx); err != nil {
			n.Close(ctx)
			return nil, err
		}
		return n, nil
	}
	return nil, errors.New("podnet: all 254 subnets are held by other processes")
}

// HostIP is the bridge's address, where host services listen for pods.
func (n *Network) HostIP() string { return n.addr(1) }

// Subnet is the network's /24 in CIDR notation.
func (n *Network) Subnet() string { return n.addr(0) + "/24" }

func (n *Network) addr(host int) string { return fmt.Sprintf("10.213.%d.%d", n.b, host) }
func (n *Network) bridge() string       { return fmt.Sprintf("rsbr%d", n.b) }
func (n *Network) veth(host int) string { return fmt.Sprintf("rs%dh%d", n.b, host) }
func (n *Network) nsPrefix() string     { return fmt.Sprintf("rs%d-", n.b) }

func (n *Network) createBridge(ctx context.Context) error {
	br := n.bridge()
	return ipCmds(ctx,
		[]string{"link", "add", br, "type", "bridge"},
		[]string{"addr", "add", n.HostIP() + "/24", "dev", br},
		[]string{"link", "set", br, "up"},
	)
}

// removeStale deletes the namespaces and bridge of this subnet's earlier
// holder, and kills the processes still in them (a crashed run's pods):
// holding the lock now, nothing else can be using them. A veth goes with
// its namespace.
func (n *Network) removeStale(ctx context.Context) {
	out, _ := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], n.nsPrefix()) {
			killAll(ctx, f[0])
			_ = ipCmds(ctx, []string{"netns", "del", f[0]})
		}
	}
	links, _ := exec.CommandContext(ctx, "ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(links), "\n") {
		// "11: rs1h2@if2: <...": a pod's host side.
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], fmt.Sprintf("rs%dh", n.b)) {
			_ = ipCmds(ctx, []string{"link", "del", strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]})
		}
	}
	if ipCmds(ctx, []string{"link", "show", n.bridge()}) == nil {
		n.log.Info("podnet: removing a stale bridge", "bridge", n.bridge())
		_ = ipCmds(ctx, []string{"link", "del", n.bridge()})
	}
}

// The pods' host parts: 2 to 254 (1 is the host's, on the bridge).
const firstHost, hosts = 2, 253

// Attach creates a namespace with loopback up and an address on the
// bridge, the default route through the host.
func (n *Network) Attach(ctx context.Context) (*Attachment, error) {
	n.mu.Lock()
	host := 0
	for i := range hosts {
		if h := firstHost + (n.next+i)%hosts; !n.used[h] {
			host, n.used[h], n.next = h, true, h-firstHost+1
			break
		}
	}
	n.mu.Unlock()
	if host == 0 {
		return nil, errors.New("podnet: the subnet's 253 pod addresses are all in use")
	}
	name := n.nsPrefix() + strconv.Itoa(host)
	a := &Attachment{NetNS: "/run/netns/" + name, IP: n.addr(host), name: name, host: host}
	veth := n.veth(host)
	err := ipCmds(ctx,
		[]string{"netns", "add", name},
		[]string{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name},
		[]string{"link", "set", veth, "master", n.bridge(), "up"},
		[]string{"-n", name, "addr", "add", a.IP + "/24", "dev", "eth0"},
		[]string{"-n", name, "link", "set", "eth0", "up"},
		[]string{"-n", name, "link", "set", "lo", "up"},
		[]string{"-n", name, "route", "add", "default", "via", n.HostIP()},
	)
	if err != nil {
		n.Detach(ctx, a)
		return nil, err
	}
	return a, nil
}

// Detach deletes a's namespace (and with it its veth pair) and frees its
// address.
func (n *Network) Detach(ctx context.Context, a *Attachment) {
	// The veth first: a namespace outlives its deletion while anything
	// still refers to it (a socket the kernel has not let go), and its
	// veth with it, on the host's side of the bridge.
	_ = ipCmds(ctx, []string{"link", "del", n.veth(a.host)})
	if err := ipCmds(ctx, []string{"netns", "del", a.name}); err != nil {
		n.log.Warn("podnet: deleting a pod namespace", "netns", a.name, "err", err)
	}
	n.mu.Lock()
	n.used[a.host] = false
	n.mu.Unlock()
}

// Close deletes every namespace of the subnet and the bridge, and gives
// the subnet back.
func (n *Network) Close(ctx context.Context) {
	n.removeStale(ctx)
	n.lock.Close()
}

func ipCmds(ctx context.Context, cmds ...[]string) error {
	for _, args := range cmds {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "ip", args...)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("podnet: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
		}
	}
	return nil
}

// killAll kills the processes in namespace name.
func killAll(ctx context.Context, name string) {
	out, _ := exec.CommandContext(ctx, "ip", "netns", "pids", name).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
