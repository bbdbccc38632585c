package netopt

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTopologyFromLabels(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		keys   []string
		want   []string
	}{
		{
			name:   "plain zone and hostname",
			labels: map[string]string{LabelRegion: "us-east1", LabelZone: "us-east1-b", LabelHostname: "node-7", "kubernetes.io/os": "linux"},
			want:   []string{"us-east1", "us-east1-b", "node-7"},
		},
		{
			name:   "legacy beta zone labels",
			labels: map[string]string{"failure-domain.beta.kubernetes.io/region": "r", "failure-domain.beta.kubernetes.io/zone": "z", LabelHostname: "n"},
			want:   []string{"r", "z", "n"},
		},
		{
			name: "GKE compact placement",
			labels: map[string]string{
				LabelZone: "us-central1-a", "cloud.google.com/gce-topology-block": "b1",
				"cloud.google.com/gce-topology-subblock": "sb3", "cloud.google.com/gce-topology-host": "h42", LabelHostname: "gke-n1",
			},
			want: []string{"us-central1-a", "b1", "sb3", "h42", "gke-n1"},
		},
		{
			name: "EKS network node layers, layer 1 broadest, numbered past 9",
			labels: map[string]string{
				LabelZone: "us-west-2a", "topology.k8s.aws/network-node-layer-3": "nn-3", "topology.k8s.aws/network-node-layer-1": "nn-1",
				"topology.k8s.aws/network-node-layer-2": "nn-2", "topology.k8s.aws/network-node-layer-10": "nn-10", LabelHostname: "ip-10-0-0-1",
			},
			want: []string{"us-west-2a", "nn-1", "nn-2", "nn-3", "nn-10", "ip-10-0-0-1"},
		},
		{
			name: "NVIDIA topograph switch labels, core to accelerator",
			labels: map[string]string{
				"network.topology.nvidia.com/accelerator": "nvl1", "network.topology.nvidia.com/leaf": "s1",
				"network.topology.nvidia.com/spine": "s2", "network.topology.nvidia.com/core": "s3", LabelHostname: "n",
			},
			want: []string{"s3", "s2", "s1", "nvl1", "n"},
		},
		{
			name: "topograph fabric tiers, highest tier broadest, then accelerator domains",
			labels: map[string]string{
				"fabric.topograph.run/tier-0": "leaf7", "fabric.topograph.run/tier-1": "spine2", "fabric.topograph.run/tier-2": "core1",
				"accelerator.topograph.run/domain": "nvl72-a", "accelerator.topograph.run/sub-domain": "tray3", LabelHostname: "n",
			},
			want: []string{"core1", "spine2", "leaf7", "nvl72-a", "tray3", "n"},
		},
		{
			name:   "Volcano hypercluster and hypernode",
			labels: map[string]string{"volcano.sh/hypercluster": "hc1", "volcano.sh/hypernode": "hn4", LabelHostname: "n"},
			want:   []string{"hc1", "hn4", "n"},
		},
		{
			name:   "custom keys replace the presets, in the order given",
			labels: map[string]string{LabelZone: "z", "example.com/row": "row-2", "example.com/rack": "rack-9", LabelHostname: "n"},
			keys:   []string{"example.com/row", "example.com/rack", LabelHostname},
			want:   []string{"row-2", "rack-9", "n"},
		},
		{
			name:   "empty values and unlabelled nodes give a short path",
			labels: map[string]string{LabelZone: " "},
			want:   nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, TopologyFromLabels(tt.labels, tt.keys)); diff != "" {
				t.Errorf("path (-want +got):\n%s", diff)
			}
		})
	}
}
