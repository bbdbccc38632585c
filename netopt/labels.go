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

// presetKeys are the fixed keys of the presets in the order they nest.
// Families a cluster does not use are simply absent from its nodes.
var presetKeys = [][]string{
	{LabelRegion, legacyRegion},
	{LabelZone, legacyZone},
	// GKE compact placement and TPU/GPU super-blocks.
	{"cloud.google.com/gce-topology-block"},
	{"cloud.google.com/gce-topology-subblock"},
	{"cloud.google.com/gce-topology-host"},
	// EKS layers go here (numbered family).
	// NVIDIA topograph, first label scheme.
	{"network.topology.nvidia.com/datacenter"},
	{"network.topology.nvidia.com/core"},
	{"network.topology.nvidia.com/spine"},
	{"network.topology.nvidia.com/leaf"},
	{"network.topology.nvidia.com/block"},
	{"network.topology.nvidia.com/accelerator"},
	// Topograph fabric tiers go here (numbered family), then its accelerator
	// domains and the GPU operator's NVLink clique.
	{"accelerator.topograph.run/domain"},
	{"accelerator.topograph.run/sub-domain"},
	{"nvidia.com/gpu.clique"},
	// Volcano-style hypernode and rack labels.
	{"volcano.sh/hypercluster"},
	{"volcano.sh/hypernode"},
	{"volcano.sh/tor"},
	{LabelHostname},
}

// TopologyFromLabels returns a node's place in the network, broad to narrow,
// for coordinator.MemberInfo.Topology.
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
	var path []string
	add := func(alternatives ...string) {
		for _, k := range alternatives {
			if v := strings.TrimSpace(labels[k]); v != "" {
				path = append(path, v)
				return
			}
		}
	}
	if len(keys) > 0 {
		for _, k := range keys {
			add(k)
		}
		return path
	}
	for _, alts := range presetKeys {
		add(alts...)
		switch alts[0] {
		case "cloud.google.com/gce-topology-host":
			for _, k := range numbered(labels, labelEKSLayer, false) {
				add(k)
			}
		case "network.topology.nvidia.com/accelerator":
			for _, k := range numbered(labels, labelTopographTier, true) {
				add(k)
			}
		}
	}
	return path
}

// numbered returns the keys prefix+N present in labels, by N ascending
// (descending when broadFirstHigh).
func numbered(labels map[string]string, prefix string, broadFirstHigh bool) []string {
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
		if broadFirstHigh {
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
