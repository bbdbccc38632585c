package netopt

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Well-known node label keys, broad to narrow within each family.
const (
	LabelRegion   = "topology.kubernetes.io/region"
	LabelZone     = "topology.kubernetes.io/zone"
	LabelHostname = "kubernetes.io/hostname"

	legacyRegion = "failure-domain.beta.kubernetes.io/region"
	legacyZone   = "failure-domain.beta.kubernetes.io/zone"

	// labelEKSLayer is followed by 1..N; layer 1 is the farthest from the
	// instance (AWS's network-node-layer-1 is the top of the hierarchy).
	labelEKSLayer = "topology.k8s.aws/network-node-layer-"
	// labelTopographTier is followed by N; tier 0 is the switch next to the
	// node, so higher tiers are broader.
	labelTopographTier = "fabric.topograph.run/tier-"
)

// labelLevel is one level of the presets: the first of keys a node carries,
// or, with family set, every key family+N the node carries.
type labelLevel struct {
	keys      []string
	family    string
	highFirst bool // family members run from the highest N (broadest) down
}

// presets are the levels in the order they nest. Families a cluster does
// not use are simply absent from its nodes.
var presets = []labelLevel{
	{keys: []string{LabelRegion, legacyRegion}},
	{keys: []string{LabelZone, legacyZone}},
	// GKE compact placement and super-blocks.
	{keys: []string{"cloud.google.com/gce-topology-block"}},
	{keys: []string{"cloud.google.com/gce-topology-subblock"}},
	{keys: []string{"cloud.google.com/gce-topology-host"}},
	// EKS.
	{family: labelEKSLayer},
	// NVIDIA topograph, switch labels, then fabric tiers, then accelerator
	// (NVLink) domains and the GPU operator's NVLink clique.
	{keys: []string{"network.topology.nvidia.com/datacenter"}},
	{keys: []string{"network.topology.nvidia.com/core"}},
	{keys: []string{"network.topology.nvidia.com/spine"}},
	{keys: []string{"network.topology.nvidia.com/leaf"}},
	{keys: []string{"network.topology.nvidia.com/block"}},
	{keys: []string{"network.topology.nvidia.com/accelerator"}},
	{family: labelTopographTier, highFirst: true},
	{keys: []string{"accelerator.topograph.run/domain"}},
	{keys: []string{"accelerator.topograph.run/sub-domain"}},
	{keys: []string{"nvidia.com/gpu.clique"}},
	// Volcano-style hypernode and rack labels.
	{keys: []string{"volcano.sh/hypercluster"}},
	{keys: []string{"volcano.sh/hypernode"}},
	{keys: []string{"volcano.sh/tor"}},
	{keys: []string{LabelHostname}},
}

// TopologyFromLabels returns a node's place in the network, broad to narrow,
// for record.MemberInfo.Topology.
//
// With keys empty it reads the presets: region and zone (and their legacy
// beta keys), GKE's gce-topology-block/subblock/host, EKS's
// network-node-layer-1..N, NVIDIA topograph's network.topology.nvidia.com/*
// and fabric.topograph.run/tier-N (highest tier first) with its accelerator
// domains and nvidia.com/gpu.clique, Volcano's hypercluster/hypernode/tor,
// and finally kubernetes.io/hostname. With keys given, exactly those are
// read, in that order. Keys a node does not carry are left out, so nodes
// labelled alike get paths of the same depth.
func TopologyFromLabels(labels map[string]string, keys []string) []string {
	levels := presets
	if len(keys) > 0 {
		levels = make([]labelLevel, len(keys))
		for i, k := range keys {
			levels[i] = labelLevel{keys: []string{k}}
		}
	}
	var path []string
	for _, l := range levels {
		if l.family != "" {
			for _, k := range numbered(labels, l.family, l.highFirst) {
				if v := strings.TrimSpace(labels[k]); v != "" {
					path = append(path, v)
				}
			}
			continue
		}
		for _, k := range l.keys {
			if v := strings.TrimSpace(labels[k]); v != "" {
				path = append(path, v)
				break
			}
		}
	}
	return path
}

// numbered returns the keys prefix+N present in labels, by N ascending
// (descending when highFirst).
func numbered(labels map[string]string, prefix string, highFirst bool) []string {
	type key struct {
		n int
		k string
	}
	var ks []key
	for k := range labels {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
				ks = append(ks, key{n, k})
			}
		}
	}
	slices.SortFunc(ks, func(a, b key) int {
		if highFirst {
			return cmp.Compare(b.n, a.n)
		}
		return cmp.Compare(a.n, b.n)
	})
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.k
	}
	return out
}
