package netopt

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// xmlNode is one element of NCCL's topology XML.
type xmlNode struct {
	name  string
	attrs [][2]string
	subs  []*xmlNode
	key   string // sort key among siblings: the bus id
}

// WriteTopologyXML writes the host's GPUs and active RDMA ports as an NCCL
// topology file (for NCCL_TOPO_FILE), in the grammar NCCL dumps and parses:
//
//	<system version="1">
//	  <cpu numaid="0" affinity="...">
//	    <pci busid="0000:01:00.0" class="0x060400" ...>   (a PCIe switch)
//	      <pci busid="0000:03:00.0" class="0x030200" .../> (a GPU)
//	      <pci busid="0000:05:00.0" ...>
//	        <nic>
//	          <net name="mlx5_0" port="1" speed="200000"/>
//	        </nic>
//	      </pci>
//
// Like NCCL, it keeps one <pci> per PCIe switch (the upstream port) and
// skips the downstream ports. It writes only what sysfs shows for certain:
// NCCL fills every attribute left out (GPU index, compute capability, net
// device index, GPUDirect support) from its own probing, and would keep a
// wrong one if this file guessed it.
func WriteTopologyXML(w io.Writer, h *Host) error {
	bw := bufio.NewWriter(w)
	writeXMLNode(bw, topologyTree(h), 0)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write topology xml: %w", err)
	}
	return nil
}

// topologyTree builds the <system> element of the host.
func topologyTree(h *Host) *xmlNode {
	t := &xmlTree{
		host:   h,
		system: &xmlNode{name: "system", attrs: [][2]string{{"version", "1"}}},
		cpus:   map[int]*xmlNode{},
		pcis:   map[string]*xmlNode{},
	}
	for _, g := range h.GPUs {
		if len(g.chain) > 0 {
			t.place(g)
		}
	}
	for _, d := range h.RDMA {
		dev, ok := h.pci[d.PCIAddr]
		if !ok || len(dev.chain) == 0 {
			continue
		}
		var nets []*xmlNode
		for _, p := range d.Ports {
			if !p.Active() || (p.LinkLayer != linkLayerIB && p.LinkLayer != linkLayerEthernet) {
				continue
			}
			net := &xmlNode{name: "net", attrs: [][2]string{{"name", d.Name}, {"port", strconv.Itoa(p.Port)}}}
			if p.RateGbps > 0 {
				net.attrs = append(net.attrs, [2]string{"speed", strconv.Itoa(int(p.RateGbps * 1000))})
			}
			nets = append(nets, net)
		}
		if len(nets) > 0 {
			node := t.place(dev)
			node.subs = append(node.subs, &xmlNode{name: "nic", subs: nets})
		}
	}
	return t.system
}

// xmlTree indexes the elements built so far.
type xmlTree struct {
	host   *Host
	system *xmlNode
	cpus   map[int]*xmlNode
	pcis   map[string]*xmlNode
}

// cpu returns the <cpu> element of a NUMA node, creating it.
func (t *xmlTree) cpu(numa int) *xmlNode {
	if c, ok := t.cpus[numa]; ok {
		return c
	}
	c := &xmlNode{name: "cpu", key: fmt.Sprintf("%08d", numa+1), attrs: [][2]string{{"numaid", strconv.Itoa(numa)}}}
	for _, n := range t.host.NUMANodes {
		if n.ID == numa && n.CPUMap != "" {
			c.attrs = append(c.attrs, [2]string{"affinity", n.CPUMap})
		}
	}
	t.cpus[numa] = c
	t.system.subs = append(t.system.subs, c)
	return c
}

// place adds the <pci> element of dev below its switches and CPU, and
// returns it. The CPU is the NUMA node of the topmost switch, as NCCL reads it.
func (t *xmlTree) place(dev PCIDevice) *xmlNode {
	parents := xmlParents(dev.chain)
	top := dev
	if len(parents) > 0 {
		if d, ok := t.host.pci[parents[len(parents)-1]]; ok {
			top = d
		}
	}
	parent := t.cpu(top.NUMANode)
	for i := len(parents) - 1; i >= 0; i-- {
		parent = t.pci(parent, parents[i])
	}
	return t.pci(parent, dev.Addr)
}

// pci returns parent's <pci> child for addr, creating it.
func (t *xmlTree) pci(parent *xmlNode, addr string) *xmlNode {
	if n, ok := t.pcis[addr]; ok {
		return n
	}
	n := &xmlNode{name: "pci", key: addr, attrs: [][2]string{{"busid", addr}}}
	if d, ok := t.host.pci[addr]; ok {
		n.attrs = append(n.attrs, [2]string{"class", d.Class}, [2]string{"vendor", d.Vendor})
		if d.Device != "" {
			n.attrs = append(n.attrs, [2]string{"device", d.Device})
		}
	}
	t.pcis[addr] = n
	parent.subs = append(parent.subs, n)
	return n
}

// xmlParents returns the switches NCCL keeps above a device, nearest first.
// chain[0] is the root complex; NCCL climbs two components at a time (from
// a device past its downstream port to the switch's upstream port) and
// stops at the root complex, where the <cpu> element stands.
func xmlParents(chain []string) []string {
	var out []string
	for i := len(chain) - 1; i-2 >= 1; i -= 2 {
		out = append(out, chain[i-2])
	}
	return out
}

// writeXMLNode writes n the way NCCL's own dump does: two-space indent,
// double-quoted attributes, childless elements self-closed.
func writeXMLNode(w *bufio.Writer, n *xmlNode, indent int) {
	pad := strings.Repeat(" ", indent)
	fmt.Fprintf(w, "%s<%s", pad, n.name)
	for _, a := range n.attrs {
		if xmlSafe(a[1]) {
			fmt.Fprintf(w, " %s=\"%s\"", a[0], a[1])
		}
	}
	if len(n.subs) == 0 {
		w.WriteString("/>\n")
		return
	}
	w.WriteString(">\n")
	slices.SortStableFunc(n.subs, func(a, b *xmlNode) int { return cmp.Compare(a.key, b.key) })
	for _, s := range n.subs {
		writeXMLNode(w, s, indent+2)
	}
	fmt.Fprintf(w, "%s</%s>\n", pad, n.name)
}

// xmlSafe reports whether v can stand in an attribute as is: NCCL's parser
// knows no escapes, and sysfs content is not trusted.
func xmlSafe(v string) bool {
	return v != "" && !strings.ContainsAny(v, "\"'<>& \t\r\n")
}
