package netopt

import (
	"strings"
)

// ARPHRD types from <linux/if_arp.h> that the selection cares about.
const (
	arphrdEther      = 1
	arphrdInfiniband = 32
	arphrdLoopback   = 772
)

// Interface is one network interface of class/net.
type Interface struct {
	Name string `json:"name"`
	// OperState is the RFC 2863 state: "up", "down", "unknown" (loopback and
	// some paravirtual drivers), ...
	OperState string `json:"operstate"`
	// SpeedMbps is the link speed; 0 when the driver does not report one.
	SpeedMbps int `json:"speed_mbps,omitempty"`
	// Type is the ARPHRD type: 1 Ethernet, 32 IPoIB, 772 loopback; 0 unknown.
	Type int `json:"type"`
	// PCIAddr is the PCI device behind the interface; empty when virtual.
	PCIAddr string `json:"pci_addr,omitempty"`
	// Virtual is true when no device backs the interface (bridges, veth,
	// tunnels, bonds, VLANs).
	Virtual bool `json:"virtual"`
	// Lower lists the interfaces below a bond, VLAN or macvlan.
	Lower []string `json:"lower,omitempty"`
}

// readInterfaces reads class/net.
func readInterfaces(s *sysfs) []Interface {
	var out []Interface
	for _, name := range s.list("class/net") {
		dir := "class/net/" + name
		if !s.exists(dir+"/type") && !s.exists(dir+"/operstate") {
			continue // bonding_masters and other non-interface files
		}
		ifc := Interface{Name: name}
		ifc.OperState = s.optional(dir + "/operstate")
		if ifc.OperState == "" {
			ifc.OperState = "unknown"
		}
		ifc.Type, _ = s.int(dir+"/type", "type taken as unknown")
		ifc.SpeedMbps = readSpeed(s, dir+"/speed")
		if chain, ok := s.pciChain(dir + "/device"); ok {
			ifc.PCIAddr = chain[len(chain)-1]
		} else if !s.exists(dir + "/device") {
			ifc.Virtual = true
		}
		for _, e := range s.list(dir) {
			if lower, ok := strings.CutPrefix(e, "lower_"); ok {
				ifc.Lower = append(ifc.Lower, lower)
			}
		}
		out = append(out, ifc)
	}
	return out
}

// readSpeed reads a speed file in Mb/s. The kernel answers EINVAL for a link
// that is down and -1 (or 4294967295) for "unknown"; both are quietly 0.
// Anything else that is not a positive number is skipped with a warning.
func readSpeed(s *sysfs, rel string) int {
	v, err := s.read(rel)
	if err != nil {
		return 0
	}
	n, ok := parsePositive(v)
	if !ok {
		if v != "-1" && v != "4294967295" && v != "" {
			s.warnf(rel, "unexpected value %q; speed taken as unknown", clip(v))
		}
		return 0
	}
	return n
}

// parsePositive parses a positive decimal integer below 2^31.
func parsePositive(v string) (int, bool) {
	if v == "" || len(v) > 10 {
		return 0, false
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n <= 0 || n >= 1<<31 {
		return 0, false
	}
	return n, true
}

// socketExcluded reports why an interface must never carry NCCL's socket
// traffic, or "" when it may. These names belong to container bridges,
// veth pairs, overlays and tunnels: their addresses are not the ones peers
// reach this node at.
func socketExcluded(ifc Interface) string {
	if ifc.Type == arphrdLoopback || ifc.Name == "lo" {
		return "loopback"
	}
	for _, p := range []string{"docker", "veth", "virbr", "br-", "cni", "flannel", "cali", "cilium", "vxlan", "genev", "tunl", "tun", "tap", "kube-", "weave", "lxc", "ovs-", "nodelocaldns", "dummy", "wg", "tailscale"} {
		if strings.HasPrefix(ifc.Name, p) {
			return "container or tunnel interface"
		}
	}
	switch ifc.OperState {
	case "up", "unknown":
	default:
		return "link " + ifc.OperState
	}
	return ""
}
