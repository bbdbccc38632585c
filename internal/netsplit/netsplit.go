// Package netsplit gives each member of a local job a network namespace of
// its own, joined to the others by a veth pair to a bridge in the root
// namespace (where etcd listens on the bridge's address), and cuts that
// network on demand: partitions, one-way partitions and random packet loss,
// all with iptables rules inside the members' namespaces. It drives
// `ringside bench partition` and its test, and needs root.
//
// Everything it creates is named after its prefix (namespaces
// <prefix>m<i>, host-side veths <prefix><i>, the bridge <prefix>br), so
// Sweep removes a crashed run's leftovers and nothing else. The rules live
// in the members' namespaces and vanish with them: the root namespace's
// iptables are never touched.
//
// Packet delay and jitter are not emulated: they need the sch_netem qdisc,
// which kernels without it refuse ("Specified qdisc kind is unknown").
package netsplit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Net is a bridge and one namespace per member, on the subnet
// 10.233.<Subnet>.0/24: the bridge is .1, member i is .(i+2).
type Net struct {
	prefix string
	subnet int
	n      int
}

// Available reports why namespaces cannot be made here, nil when they can:
// it takes root and the ip and iptables commands.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces and iptables rules need root: run it as root (sudo)")
	}
	for _, cmd := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return fmt.Errorf("%s not found in PATH: install iproute2 and iptables", cmd)
		}
	}
	return nil
}

// Create sweeps what an earlier run with the same prefix left, then makes
// the bridge and n namespaces. Close removes them; on an error Create
// removes what it made.
func Create(ctx context.Context, prefix string, subnet, n int) (*Net, error) {
	if subnet < 0 || subnet > 255 {
		return nil, fmt.Errorf("netsplit: subnet %d is not in 0-255", subnet)
	}
	if n < 1 || n > 250 {
		return nil, fmt.Errorf("netsplit: %d members: want 1-250", n)
	}
	if len(prefix)+4 > 15 {
		return nil, fmt.Errorf("netsplit: prefix %q too long for an interface name", prefix)
	}
	nt := &Net{prefix: prefix, subnet: subnet, n: n}
	if err := Sweep(ctx, prefix); err != nil {
		return nil, err
	}
	if err := nt.create(ctx); err != nil {
		Sweep(context.WithoutCancel(ctx), prefix) //nolint:errcheck // the create error says more
		return nil, err
	}
	return nt, nil
}

func (nt *Net) create(ctx context.Context) error {
	br := nt.prefix + "br"
	steps := [][]string{
		{"ip", "link", "add", br, "type", "bridge"},
		{"ip", "addr", "add", nt.BridgeAddr() + "/24", "dev", br},
		{"ip", "link", "set", br, "up"},
	}
	for i := range nt.n {
		ns, veth := nt.Namespace(i), fmt.Sprintf("%s%d", nt.prefix, i)
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"ip", "link", "set", veth, "master", br, "up"},
			[]string{"ip", "-n", ns, "addr", "add", nt.Addr(i) + "/24", "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// Sweep removes every namespace, link and bridge named with prefix.
func Sweep(ctx context.Context, prefix string) error {
	var errs []error
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("netsplit: ip netns list: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			errs = append(errs, run(ctx, "ip", "netns", "del", f[0]))
		}
	}
	// Deleting a namespace deletes its veth end and so the pair; the
	// bridge (and a veth whose namespace is gone already) stays.
	out, err = exec.CommandContext(ctx, "ip", "-o", "link", "show").Output()
	if err != nil {
		return fmt.Errorf("netsplit: ip link show: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		// A veth goes with its namespace, a moment after `ip netns del`.
		if err := run(ctx, "ip", "link", "del", name); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close removes the namespaces and the bridge, and with them every rule.
func (nt *Net) Close() error { return Sweep(context.Background(), nt.prefix) }

// Namespace is member i's namespace.
func (nt *Net) Namespace(i int) string { return fmt.Sprintf("%sm%d", nt.prefix, i) }

// Addr is member i's address.
func (nt *Net) Addr(i int) string { return fmt.Sprintf("10.233.%d.%d", nt.subnet, i+2) }

// BridgeAddr is the bridge's address in the root namespace, where a
// service every member reaches (etcd) listens.
func (nt *Net) BridgeAddr() string { return fmt.Sprintf("10.233.%d.1", nt.subnet) }

// Exec is the command prefix that runs a command in member i's namespace.
func (nt *Net) Exec(i int) []string { return []string{"ip", "netns", "exec", nt.Namespace(i)} }

// Deaf makes member i drop every packet from the addresses from: it
// no longer hears them (a one-way cut; cut both ways for a partition).
func (nt *Net) Deaf(ctx context.Context, i int, from ...string) error {
	for _, a := range from {
		if err := nt.iptables(ctx, i, "-A", "INPUT", "-s", a, "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

// Mute makes member i drop every packet it sends to the addresses to.
func (nt *Net) Mute(ctx context.Context, i int, to ...string) error {
	for _, a := range to {
		if err := nt.iptables(ctx, i, "-A", "OUTPUT", "-d", a, "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

// Lose makes member i drop each packet it receives with probability p
// (iptables' statistic match, no delay: see the package comment).
func (nt *Net) Lose(ctx context.Context, i int, p float64) error {
	if p <= 0 || p >= 1 {
		return fmt.Errorf("netsplit: loss %g is not in (0, 1)", p)
	}
	return nt.iptables(ctx, i, "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random",
		"--probability", fmt.Sprintf("%.4f", p), "-j", "DROP")
}

// Heal removes every rule from every member's namespace.
func (nt *Net) Heal(ctx context.Context) error {
	var errs []error
	for i := range nt.n {
		errs = append(errs, nt.iptables(ctx, i, "-F"))
	}
	return errors.Join(errs...)
}

func (nt *Net) iptables(ctx context.Context, i int, args ...string) error {
	return run(ctx, append([]string{"ip", "netns", "exec", nt.Namespace(i), "iptables", "-w"}, args...)...)
}

func run(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netsplit: %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
