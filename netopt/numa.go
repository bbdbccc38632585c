package netopt

import (
	"strconv"
	"strings"
)

// NUMANode is one node of devices/system/node.
type NUMANode struct {
	ID int `json:"id"`
	// CPUList is the kernel's range list, "0-31,64-95".
	CPUList string `json:"cpulist"`
	// CPUMap is the same set as a hex mask, as NCCL's topology XML wants it.
	CPUMap string `json:"cpumap,omitempty"`
}

// readNUMA reads devices/system/node/node*.
func readNUMA(s *sysfs) []NUMANode {
	var out []NUMANode
	for _, name := range s.list("devices/system/node") {
		num, ok := strings.CutPrefix(name, "node")
		if !ok {
			continue
		}
		id, err := strconv.Atoi(num)
		if err != nil || id < 0 {
			continue
		}
		dir := "devices/system/node/" + name
		out = append(out, NUMANode{
			ID:      id,
			CPUList: s.optional(dir + "/cpulist"),
			CPUMap:  s.optional(dir + "/cpumap"),
		})
	}
	return out
}
