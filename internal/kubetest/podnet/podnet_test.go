package podnet_test

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/ringside/ringside/internal/kubetest"
	"github.com/ringside/ringside/internal/kubetest/podnet"
)

func TestPodsGetTheirOwnNamespaceAndAddressAndCloseRemovesThem(t *testing.T) {
	ctx := t.Context()
	n, err := podnet.New(ctx, nil)
	kubetest.Require(t, err)
	closed := false
	defer func() {
		if !closed {
			n.Close(ctx)
		}
	}()
	a, err := n.Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.IP == b.IP || a.NetNS == b.NetNS {
		t.Fatalf("two pods share %s / %s", a.IP, a.NetNS)
	}
	_, subnet, _ := net.ParseCIDR(n.Subnet())
	for _, ip := range []string{a.IP, b.IP, n.HostIP()} {
		if !subnet.Contains(net.ParseIP(ip)) {
			t.Errorf("%s is not in %s", ip, n.Subnet())
		}
	}
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+a.NetNS, "ip", "-br", "addr").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), a.IP+"/24") || !strings.Contains(string(out), "lo ") {
		t.Errorf("pod namespace addresses:\n%s", out)
	}
	if strings.Contains(string(out), b.IP) {
		t.Errorf("pod a's namespace holds b's address:\n%s", out)
	}
	l, err := net.Listen("tcp", n.HostIP()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	// From inside b, a TCP connection to the host side succeeds.
	dial := exec.CommandContext(ctx, "nsenter", "--net="+b.NetNS, "python3", "-c",
		"import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 5).close()", n.HostIP(), strconv.Itoa(port))
	if out, err := dial.CombinedOutput(); err != nil {
		t.Errorf("pod b cannot reach the host at %s:%d: %v %s", n.HostIP(), port, err, out)
	}
	n.Detach(ctx, a)
	c, err := n.Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.IP == a.IP {
		t.Errorf("a new pod got %s, the address of a pod just gone (the neighbours' caches still hold the old pod's MAC)", c.IP)
	}
	n.Detach(ctx, c)
	if exec.CommandContext(ctx, "ip", "netns", "pids", strings.TrimPrefix(a.NetNS, "/run/netns/")).Run() == nil {
		t.Errorf("%s still exists after Detach", a.NetNS)
	}
	n.Close(ctx)
	closed = true
	if out, _ := exec.CommandContext(ctx, "ip", "netns", "list").Output(); strings.Contains(string(out), strings.TrimPrefix(b.NetNS, "/run/netns/")+" ") {
		t.Errorf("%s still exists after Close:\n%s", b.NetNS, out)
	}
}
