package netopt

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// chooseSocketInterface sets NCCL_SOCKET_IFNAME to the one interface peers
// should reach this node at. NCCL uses it for bootstrap always and for data
// when RDMA is not usable. Left to itself NCCL takes the first interface
// that is not lo or docker*, which can be a veth, a bridge or a down link.
// The exact-match "=" prefix keeps eth1 from also matching eth10.
func chooseSocketInterface(r *recommendation, h *Host) {
	byName := make(map[string]Interface, len(h.Interfaces))
	for _, ifc := range h.Interfaces {
		byName[ifc.Name] = ifc
	}
	physical := func(ifc Interface) bool {
		if !ifc.Virtual {
			return true
		}
		return slices.ContainsFunc(ifc.Lower, func(l string) bool {
			low, ok := byName[l]
			return ok && !low.Virtual
		})
	}
	var cands []Interface
	var left []string
	for _, ifc := range h.Interfaces {
		if why := socketExcluded(ifc); why != "" {
			left = append(left, fmt.Sprintf("%s (%s)", ifc.Name, why))
			continue
		}
		cands = append(cands, ifc)
	}
	if len(cands) == 0 {
		r.warn("no usable network interface (all are loopback, container, tunnel or down): NCCL_SOCKET_IFNAME not set, NCCL will pick one itself")
		return
	}
	slices.SortStableFunc(cands, func(a, b Interface) int {
		return cmp.Or(
			-cmpBool(physical(a), physical(b)),
			-cmpBool(a.OperState == "up", b.OperState == "up"),
			-cmpBool(a.Type == arphrdEther, b.Type == arphrdEther),
			-cmp.Compare(a.SpeedMbps, b.SpeedMbps),
			strings.Compare(a.Name, b.Name),
		)
	})
	best := cands[0]
	reason := describeInterface(best, physical(best))
	if len(cands) > 1 {
		var others []string
		for _, c := range cands[1:] {
			others = append(others, c.Name)
		}
		reason += "; preferred over " + strings.Join(others, ", ")
	}
	if len(left) > 0 {
		reason += "; left out: " + strings.Join(left, ", ")
	}
	if !physical(best) {
		var names []string
		for _, c := range cands {
			names = append(names, c.Name)
		}
		r.warn(fmt.Sprintf("only virtual interfaces (%s): NCCL's socket traffic goes through a bridge or overlay; give the pod a host or SR-IOV interface for bandwidth", strings.Join(names, ", ")))
	}
	r.set("NCCL_SOCKET_IFNAME", "="+best.Name, reason)
}

// describeInterface says what made an interface the choice.
func describeInterface(ifc Interface, physical bool) string {
	parts := []string{ifc.Name + " is " + ifc.OperState}
	switch {
	case ifc.PCIAddr != "":
		parts = append(parts, "backed by PCI device "+ifc.PCIAddr)
	case physical:
		parts = append(parts, "on top of "+strings.Join(ifc.Lower, ", "))
	default:
		parts = append(parts, "virtual")
	}
	if ifc.SpeedMbps > 0 {
		parts = append(parts, fmt.Sprintf("%d Mb/s", ifc.SpeedMbps))
	}
	return strings.Join(parts, ", ")
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}
