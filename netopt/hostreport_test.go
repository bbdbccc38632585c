package netopt

import (
	"strings"
	"testing"
)

func TestWriteHostReportMatchesTheGoldenFiles(t *testing.T) {
	tests := []struct {
		golden string
		host   func(t *testing.T) *Host
	}{
		{"host_hgx", func(t *testing.T) *Host {
			f := newFixture(t)
			hgx(f)
			f.peerMemory("nvidia_peermem")
			f.uverbs(8)
			return detect(t, f)
		}},
		// RoCE ports list their IPv4 GIDs, the ones NCCL_IB_GID_INDEX picks from.
		{"host_roce", func(t *testing.T) *Host {
			f := newFixture(t)
			roce(f)
			return detect(t, f)
		}},
		// No RDMA: no path matrix.
		{"host_vm", func(t *testing.T) *Host {
			f := newFixture(t)
			vm(f)
			return detect(t, f)
		}},
		{"host_unread", func(*testing.T) *Host {
			return &Host{Warnings: []string{"class/net/eth0/speed: read: invalid argument", "bus/pci/devices: open: no such file or directory"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			var b strings.Builder
			if err := WriteHostReport(&b, tt.host(t)); err != nil {
				t.Fatal(err)
			}
			matchGolden(t, tt.golden, b.String())
		})
	}
}

func TestWriteHostReportReportsWriteErrors(t *testing.T) {
	if err := WriteHostReport(failingWriter{}, &Host{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("got %v", err)
	}
}
