// Package netsplit gives each member of a local job a network namespace of
// its own, joined to the others by a veth pair to a bridge in the root
// namespace (where etcd listens on the bridge's address), and cuts that
// network on demand: partitions, one-way partitions, random packet loss and
// jitter, all with iptables rules inside the members' namespaces. It drives
// `ringside bench partition` and its test, and needs root.
//
// Everything it creates is named after its prefix (namespaces
// <prefix>m<i>, host-side veths <prefix><i>, the bridge <prefix>br), so
// Sweep removes a crashed run's leftovers and nothing else. The rules live
// in the members' namespaces and vanish with them: the root namespace's
// iptables are never touched.
//
// Jitter is a netfilter queue served in user space (Net.Jitter), where
// tc netem would do it in the kernel: kernels without the sch_netem qdisc
// refuse netem ("Specified qdisc kind is unknown").
package netsplit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Net is a bridge and one namespace per member, on the subnet
// 10.233.<Subnet>.0/24: the bridge is .1, member i is .(i+2).
type Net struct {
	prefix string
	subnet int
	n      int
}

// Available reports why namespaces cannot be made here, nil when they can:
// it takes root and the ip and iptables-restore commands.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces and iptables rules need root: run it as root (sudo)")
	}
	for _, cmd := range []string{"ip", "iptables-restore"} {
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

// NamespacePath is the file of member i's namespace, which setns takes.
func (nt *Net) NamespacePath(i int) string { return filepath.Join("/run/netns", nt.Namespace(i)) }

// Addr is member i's address.
func (nt *Net) Addr(i int) string { return fmt.Sprintf("10.233.%d.%d", nt.subnet, i+2) }

// BridgeAddr is the bridge's address in the root namespace, where a
// service every member reaches (etcd) listens.
func (nt *Net) BridgeAddr() string { return fmt.Sprintf("10.233.%d.1", nt.subnet) }

// Exec is the command prefix that runs a command in member i's namespace.
func (nt *Net) Exec(i int) []string { return []string{"ip", "netns", "exec", nt.Namespace(i)} }

// Rules are iptables rules of the filter table, by member: what a cut
// adds to each member's namespace.
type Rules map[int][]string

// Deaf makes member i drop every packet from the addresses from: it no
// longer hears them (a one-way cut; with Mute, a partition).
func (r Rules) Deaf(i int, from ...string) {
	for _, a := range from {
		r[i] = append(r[i], "-A INPUT -s "+a+" -j DROP")
	}
}

// Mute makes member i drop every packet it sends to the addresses to.
func (r Rules) Mute(i int, to ...string) {
	for _, a := range to {
		r[i] = append(r[i], "-A OUTPUT -d "+a+" -j DROP")
	}
}

// Lose makes member i drop each packet it receives with probability p
// (iptables' statistic match).
func (r Rules) Lose(i int, p float64) {
	r[i] = append(r[i], fmt.Sprintf("-A INPUT -i eth0 -m statistic --mode random --probability %.4f -j DROP", p))
}

// Apply adds rules to the members' namespaces, every member's at once (one
// iptables-restore each, all started together), so that a cut of several
// members takes effect within a few milliseconds, not one rule after
// another.
func (nt *Net) Apply(ctx context.Context, rules Rules) error {
	return nt.each(ctx, func(i int) error {
		if len(rules[i]) == 0 {
			return nil
		}
		return nt.restore(ctx, i, "--noflush", "*filter\n"+strings.Join(rules[i], "\n")+"\nCOMMIT\n")
	})
}

// Heal removes every rule from every member's namespace, all at once.
func (nt *Net) Heal(ctx context.Context) error {
	return nt.each(ctx, func(i int) error { return nt.restore(ctx, i, "", "*filter\nCOMMIT\n") })
}

// each runs f for every member concurrently.
func (nt *Net) each(ctx context.Context, f func(i int) error) error {
	errs := make([]error, nt.n)
	var wg sync.WaitGroup
	for i := range nt.n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// restore loads table (iptables-restore's format) into member i's
// namespace; without --noflush it replaces the table's rules.
func (nt *Net) restore(ctx context.Context, i int, flag, table string) error {
	args := []string{"ip", "netns", "exec", nt.Namespace(i), "iptables-restore", "-w"}
	if flag != "" {
		args = append(args, flag)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin = strings.NewReader(table)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netsplit: %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func run(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netsplit: %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
