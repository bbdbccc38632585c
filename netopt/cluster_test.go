package netopt

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadClusterAcceptsTheDocumentedFormat(t *testing.T) {
	in := `[{"id": "w0", "topology": ["zone-a", "block-1", "rack-3", "host-7"], "slots": 8},
	        {"id": "w1", "topology": ["zone-a", "block-1", "rack-3", "host-8"], "slots": 4}]`
	got, err := ReadCluster(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []ClusterMember{
		{ID: "w0", Topology: []string{"zone-a", "block-1", "rack-3", "host-7"}, Slots: 8},
		{ID: "w1", Topology: []string{"zone-a", "block-1", "rack-3", "host-8"}, Slots: 4},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cluster (-want +got):\n%s", diff)
	}
}

func TestReadClusterNamesWhatIsWrong(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty file", ``, "cluster file is not a JSON array of members: file is empty"},
		{"not JSON", "[\n{\"id\": \"w0\",,}]", "cluster file is not a JSON array of members: line 2, column 13: invalid character ',' looking for beginning of object key string"},
		{"truncated", `[{"id": "w0"`, "cluster file is not a JSON array of members: file ends in the middle of the JSON"},
		{"an object, not an array", `{"id": "w0"}`, "cluster file is not a JSON array of members: line 1, column 1: json: cannot unmarshal object into Go value of type []netopt.ClusterMember"},
		{"slots as a string", `[{"id": "w0", "topology": [], "slots": "8"}]`, "cluster file is not a JSON array of members: line 1, column 42: json: cannot unmarshal string into Go struct field ClusterMember.slots of type int"},
		{"misspelt field", `[{"id": "w0", "topolgy": ["a"], "slots": 1}]`, `cluster file is not a JSON array of members: json: unknown field "topolgy"`},
		{"trailing data", `[] []`, "cluster file has data after the JSON array"},
		{"no members", `[]`, "cluster has no members"},
		{"empty id", `[{"id": "", "topology": ["a"], "slots": 1}]`, `member 0 (id ""): id is empty`},
		{"id with a slash", `[{"id": "w/0", "topology": ["a"], "slots": 1}]`, `member 0 (id "w/0"): id contains '/' or whitespace`},
		{"duplicate id", `[{"id": "w0", "topology": ["a"], "slots": 1}, {"id": "w1", "topology": ["a"], "slots": 1}, {"id": "w0", "topology": ["b"], "slots": 1}]`, `member 2 (id "w0"): id repeats member 0`},
		{"zero slots", `[{"id": "w0", "topology": ["a"], "slots": 0}]`, `member 0 (id "w0"): slots must be at least 1, got 0`},
		{"missing slots", `[{"id": "w0", "topology": ["a"]}]`, `member 0 (id "w0"): slots must be at least 1, got 0`},
		{"inconsistent depth", `[{"id": "w0", "topology": ["a", "b"], "slots": 1}, {"id": "w1", "topology": ["a"], "slots": 1}]`, `member 1 (id "w1"): topology has 1 levels but member 0 has 2; every member needs the same depth`},
		{"empty level", `[{"id": "w0", "topology": ["a", " "], "slots": 1}]`, `member 0 (id "w0"): topology level 1 is empty`},
		{"several problems", `[{"id": "", "topology": ["a"], "slots": 0}, {"id": "w1", "topology": [], "slots": 1}]`, "member 0 (id \"\"): id is empty\nmember 0 (id \"\"): slots must be at least 1, got 0\nmember 1 (id \"w1\"): topology has 0 levels but member 0 has 1; every member needs the same depth"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadCluster(strings.NewReader(tt.in))
			if err == nil {
				t.Fatal("want an error")
			}
			if err.Error() != tt.want {
				t.Errorf("got  %q\nwant %q", err, tt.want)
			}
		})
	}
}

func TestReadClusterCapsTheProblemsListed(t *testing.T) {
	in := "[" + strings.Repeat(`{"id": "", "topology": [], "slots": 1},`, 30) + `{"id": "", "topology": [], "slots": 1}]`
	_, err := ReadCluster(strings.NewReader(in))
	if err == nil {
		t.Fatal("want an error")
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != maxClusterErrors+1 || lines[maxClusterErrors] != "(further problems not listed)" {
		t.Errorf("got %d lines: %q", len(lines), err)
	}
}

func TestGenerateClusterBuildsTheRequestedTree(t *testing.T) {
	got, err := GenerateCluster(ClusterSpec{Members: 20, Levels: 3, Fanout: 4, Slots: 2}, newRand(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateCluster(got); err != nil {
		t.Fatal(err)
	}
	levels := RingLevels(NewOrderer().Order(nil, Members(got)))
	want := []LevelStats{{Level: 0, Domains: 2, CrossEdges: 2}, {Level: 1, Domains: 5, CrossEdges: 5}, {Level: 2, Domains: 20, CrossEdges: 20}}
	if diff := cmp.Diff(want, levels); diff != "" {
		t.Errorf("levels (-want +got):\n%s", diff)
	}
	byID := map[string][]string{}
	for _, m := range got {
		byID[m.ID] = m.Topology
	}
	if diff := cmp.Diff([]string{"block-1", "rack-4", "host-17"}, byID["w17"]); diff != "" {
		t.Errorf("w17 (-want +got):\n%s", diff)
	}
	if got[0].ID == "w0" && got[1].ID == "w1" && got[2].ID == "w2" {
		t.Error("members are not shuffled")
	}
}

func TestGenerateClusterRejectsBadSpecs(t *testing.T) {
	_, err := GenerateCluster(ClusterSpec{Members: 0, Levels: 0, Fanout: 1, Slots: 0}, newRand(1))
	want := "members must be at least 1, got 0\nlevels must be at least 1, got 0\nfanout must be at least 2, got 1\nslots must be at least 1, got 0"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

func TestWriteClusterWritesAMemberPerLineThatReadsBack(t *testing.T) {
	cluster := []ClusterMember{
		{ID: "w0", Topology: []string{"rack-0", "host-0"}, Slots: 8},
		{ID: "w1", Topology: []string{"rack-1", "host-1"}, Slots: 4},
	}
	var b strings.Builder
	if err := WriteCluster(&b, cluster); err != nil {
		t.Fatal(err)
	}
	want := `[
{"id":"w0","topology":["rack-0","host-0"],"slots":8},
{"id":"w1","topology":["rack-1","host-1"],"slots":4}
]
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("file (-want +got):\n%s", diff)
	}
	back, err := ReadCluster(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cluster, back); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}
}
