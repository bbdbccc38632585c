package netopt

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var sample = Settings{
	Env: []Setting{
		{Name: "NCCL_SOCKET_IFNAME", Value: "=eth0", Reason: "eth0 is up"},
		{Name: "NCCL_IB_HCA", Value: "=mlx5_0:1", Reason: "the active ports\nby exact name"},
	},
	Warnings: []string{"mixed link speeds"},
}

func TestWriteEnvAndConfFiles(t *testing.T) {
	tests := []struct {
		name  string
		write func(io.Writer, Settings) error
		want  string
	}{
		{
			name:  "env file",
			write: WriteEnvFile,
			want: `# NCCL settings for this node, chosen by ringside netopt.
# warning: mixed link speeds
# eth0 is up
NCCL_SOCKET_IFNAME==eth0
# the active ports
# by exact name
NCCL_IB_HCA==mlx5_0:1
`,
		},
		{
			name:  "NCCL conf file",
			write: WriteConfFile,
			want: `# NCCL configuration chosen by ringside netopt; point NCCL_CONF_FILE at this file.
# Variables set in the environment take precedence over these.
# warning: mixed link speeds
# eth0 is up
NCCL_SOCKET_IFNAME==eth0
# the active ports
# by exact name
NCCL_IB_HCA==mlx5_0:1
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := tt.write(&b, sample); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWritersReportWriteErrors(t *testing.T) {
	if err := WriteEnvFile(failingWriter{}, sample); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("env: got %v", err)
	}
	if err := WriteTopologyXML(failingWriter{}, &Host{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("xml: got %v", err)
	}
}

func TestWriteTopologyXMLFollowsNCCLGrammar(t *testing.T) {
	f := newFixture(t)
	roce(f)
	f.uverbs(2)
	h := detect(t, f)
	var b strings.Builder
	if err := WriteTopologyXML(&b, h); err != nil {
		t.Fatal(err)
	}
	want := `<system version="1">
  <cpu numaid="0" affinity="ffffffff">
    <pci busid="0000:10:00.0" class="0x060400" vendor="0x10b5" device="0xc040">
      <pci busid="0000:12:00.0" class="0x030200" vendor="0x10de" device="0x20b5"/>
      <pci busid="0000:13:00.0" class="0x020000" vendor="0x15b3" device="0x101d">
        <nic>
          <net name="mlx5_0" port="1" speed="100000"/>
        </nic>
      </pci>
    </pci>
    <pci busid="0000:20:00.0" class="0x060400" vendor="0x10b5" device="0xc040">
      <pci busid="0000:22:00.0" class="0x030200" vendor="0x10de" device="0x20b5"/>
      <pci busid="0000:23:00.0" class="0x020000" vendor="0x15b3" device="0x101d">
        <nic>
          <net name="mlx5_1" port="1" speed="100000"/>
        </nic>
      </pci>
    </pci>
  </cpu>
</system>
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("xml (-want +got):\n%s", diff)
	}
}

func TestWriteTopologyXMLOfAnHGXIsWellFormed(t *testing.T) {
	f := newFixture(t)
	hgx(f)
	h, err := Detect(context.Background(), f.config())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteTopologyXML(&b, h); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	dec := xml.NewDecoder(strings.NewReader(b.String()))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, b.String())
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
		}
	}
	// 2 CPUs, 4 switches + 8 GPUs + 8 HCAs, 8 nets.
	want := map[string]int{"system": 1, "cpu": 2, "pci": 20, "nic": 8, "net": 8}
	if diff := cmp.Diff(want, counts); diff != "" {
		t.Errorf("elements (-want +got):\n%s", diff)
	}
}

func TestFormatWritesItsFile(t *testing.T) {
	h := &Host{}
	for _, tt := range []struct {
		format Format
		write  func(io.Writer) error
	}{
		{FormatEnv, func(w io.Writer) error { return WriteEnvFile(w, sample) }},
		{FormatConf, func(w io.Writer) error { return WriteConfFile(w, sample) }},
		{FormatXML, func(w io.Writer) error { return WriteTopologyXML(w, h) }},
	} {
		if err := tt.format.Validate(); err != nil {
			t.Errorf("%s: %v", tt.format, err)
		}
		var got, want strings.Builder
		if err := tt.format.Write(&got, h, sample); err != nil {
			t.Fatal(err)
		}
		if err := tt.write(&want); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("%s wrote:\n%s\nwant:\n%s", tt.format, got.String(), want.String())
		}
	}
}

func TestFormatRejectsAnUnknownOne(t *testing.T) {
	const want = `format must be env, conf or xml, got "yaml"`
	var fe *FieldError
	if err := Format("yaml").Validate(); !errors.As(err, &fe) || fe.Field != "Format" || err.Error() != want {
		t.Errorf("Validate = %v, want the *FieldError %q", err, want)
	}
	var b strings.Builder
	if err := Format("yaml").Write(&b, &Host{}, sample); err == nil || err.Error() != want || b.Len() != 0 {
		t.Errorf("Write = %v after %q, want %q and nothing written", err, b.String(), want)
	}
}
